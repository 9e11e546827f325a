// Package middleware puts ringlimit in front of Go services: net/http
// middleware and gRPC server interceptors that decide every request on the
// cluster (a node, or the policy file through a policy.Limiter) before the
// handler runs.
//
// Data flows the same way for both: a key function turns the request into a
// key (the client IP, a header, the route pattern, the gRPC method, peer or
// metadata, or a function of your own), a Limiter decides the key and returns
// a Verdict, and the front door maps the Verdict to its protocol: HTTP 429
// with Retry-After and the IETF RateLimit fields, or gRPC ResourceExhausted
// with RetryInfo and QuotaFailure details. For the policy file the HTTP
// middleware can also build descriptors from the request directly
// (HTTPDescriptors). An error of the Limiter fails open by default (the
// request goes through) or closed by option (503 / Unavailable), never as a
// rate-limit denial.
package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
)

// ErrInvalidOption is returned, wrapped with the cause, by the constructors for
// a nil Limiter, nil function or bad option value.
var ErrInvalidOption = errors.New("middleware: invalid option")

// invalidInput reports whether err is the request's fault (a key the node
// refuses, a bad descriptor: node.ClassInvalid): such a request is refused,
// never let through as if the limiter were down.
func invalidInput(err error) bool { return node.Classify(err) == node.ClassInvalid }

// ErrNoKey is wrapped by key functions that find no key in the request (a
// missing header or metadata entry, an unparsable peer address).
var ErrNoKey = errors.New("middleware: no rate-limit key in request")

// Verdict is a Limiter's answer for one request.
type Verdict struct {
	// Limited is false when no rule applies to the request (a policy without a
	// matching rule, an unlimited rule): it passes and no RateLimit fields are
	// sent.
	Limited bool
	// Allowed reports whether the request may proceed (shadow mode included).
	Allowed bool
	// Limit is the quota of the policy (the Decision's Limit), in requests.
	Limit int64
	// Remaining is how many more requests would pass now.
	Remaining int64
	// RetryAfter is, when denied, how long until the request would pass
	// (algo.RetryNever: never within this policy).
	RetryAfter time.Duration
	// ResetAfter is the time until the quota is full again.
	ResetAfter time.Duration
	// Window is the policy's window (Limit.Period; the unit for Envoy rules).
	Window time.Duration
	// Policy names the policy in the RateLimit fields.
	Policy string
	// WouldDeny is set when a shadow-mode rule would have denied.
	WouldDeny bool
	// Banned is set when the key's penalty ban decided.
	Banned bool
	// Waited is how long the request waited for its slot (WithQueue); 0
	// when it passed at once. VerdictFrom gives the handler of a request
	// that waited its Verdict.
	Waited time.Duration
}

// Limiter decides one request by its key. NodeLimiter and PolicyLimiter
// implement it; a Limiter must be safe for concurrent use.
type Limiter interface {
	Limit(ctx context.Context, key string) (Verdict, error)
}

// KeyChecker is what NodeLimiter needs: *node.Node implements it.
type KeyChecker interface {
	AllowN(ctx context.Context, key string, l algo.Limit, hits int64) (node.Decision, error)
}

type nodeLimiter struct {
	n      KeyChecker
	l      algo.Limit
	name   string
	prefix string
}

// NodeLimiter limits every key with one explicit limit l on node n: each
// request takes 1 hit of prefix+key. name names the policy in the RateLimit
// fields ("default" when empty). Errors: n is nil or l invalid (wrapping
// ErrInvalidOption).
func NodeLimiter(n KeyChecker, l algo.Limit, name, prefix string) (Limiter, error) {
	if n == nil {
		return nil, fmt.Errorf("%w: nil node", ErrInvalidOption)
	}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if name == "" {
		name = "default"
	}
	return &nodeLimiter{n: n, l: l, name: name, prefix: prefix}, nil
}

// Limit takes one hit of prefix+key on the node.
func (nl *nodeLimiter) Limit(ctx context.Context, key string) (Verdict, error) {
	d, err := nl.n.AllowN(ctx, nl.prefix+key, nl.l, 1)
	if err != nil {
		return Verdict{}, err
	}
	return nl.verdict(d), nil
}

func (nl *nodeLimiter) verdict(d node.Decision) Verdict {
	return Verdict{Limited: true, Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Window: nl.l.Period, Policy: nl.name, Banned: d.Banned, Waited: d.Delay}
}

// waitChecker is what a queueing NodeLimiter needs of its node beyond
// KeyChecker: *node.Node implements it.
type waitChecker interface {
	Check(ctx context.Context, c node.Check) (node.Decision, error)
}

// waitLimiter is a Limiter that can wait for a slot (NodeLimiter over a
// node, GCRA or TokenBucket): what WithQueue needs.
type waitLimiter interface {
	// canWait returns nil if limitWait may be called with maxWait.
	canWait(maxWait time.Duration) error
	// limitWait takes one hit of key, waiting up to maxWait (and ctx) for
	// its slot (node.Check.MaxWait).
	limitWait(ctx context.Context, key string, maxWait time.Duration) (Verdict, error)
}

func (nl *nodeLimiter) canWait(maxWait time.Duration) error {
	if _, ok := nl.n.(waitChecker); !ok {
		return fmt.Errorf("%w: WithQueue needs a node that implements Check (a *node.Node)", ErrInvalidOption)
	}
	c := node.Check{Key: "k", Limit: nl.l, Hits: 1, MaxWait: maxWait}
	if err := c.Validate(0); err != nil {
		return fmt.Errorf("%w: WithQueue: %w", ErrInvalidOption, err)
	}
	return nil
}

func (nl *nodeLimiter) limitWait(ctx context.Context, key string, maxWait time.Duration) (Verdict, error) {
	d, err := nl.n.(waitChecker).Check(ctx, node.Check{Key: nl.prefix + key, Limit: nl.l, Hits: 1, MaxWait: maxWait})
	if err != nil {
		return Verdict{}, err
	}
	return nl.verdict(d), nil
}

type policyLimiter struct {
	pl     *policy.Limiter
	domain string
	desc   func(key string) []policy.Descriptor
}

// PolicyLimiter decides a key through the policy file: descriptors(key) builds
// the descriptors of the request (for example
// []policy.Descriptor{{Entries: []policy.Entry{{Key: "remote_address", Value: key}}}}),
// checked in domain with 1 hit. Errors: a nil argument or empty domain
// (wrapping ErrInvalidOption).
func PolicyLimiter(pl *policy.Limiter, domain string, descriptors func(key string) []policy.Descriptor) (Limiter, error) {
	if pl == nil || descriptors == nil || domain == "" {
		return nil, fmt.Errorf("%w: PolicyLimiter needs a policy.Limiter, a domain and a descriptors function", ErrInvalidOption)
	}
	return &policyLimiter{pl: pl, domain: domain, desc: descriptors}, nil
}

// Limit checks the key's descriptors against the policy file.
func (p *policyLimiter) Limit(ctx context.Context, key string) (Verdict, error) {
	return checkPolicy(ctx, p.pl, p.domain, p.desc(key))
}

// checkPolicy decides descs and folds the Result into one Verdict: the
// binding descriptor's (policy.Result.Binding).
func checkPolicy(ctx context.Context, pl *policy.Limiter, domain string, descs []policy.Descriptor) (Verdict, error) {
	res, err := pl.Check(ctx, domain, descs, 1)
	if err != nil {
		return Verdict{}, err
	}
	return VerdictOf(res), nil
}

// VerdictOf maps a policy Result to a Verdict: Allowed is the overall answer,
// the numbers are those of the binding descriptor (policy.Result.Binding);
// Limited is false when no descriptor is limited by a rule.
func VerdictOf(res policy.Result) Verdict {
	b := res.Binding()
	if b < 0 {
		return Verdict{Allowed: res.Allowed}
	}
	d := res.Decisions[b]
	v := Verdict{Limited: true, Allowed: res.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Policy: d.Rule.ID(), Banned: d.Banned}
	v.Window = d.Rule.Limit.Period
	if v.Window == 0 {
		v.Window = d.Rule.Unit.Duration()
	}
	for i := range res.Decisions {
		v.WouldDeny = v.WouldDeny || res.Decisions[i].WouldDeny
	}
	return v
}

// retrySeconds is a RetryAfter in whole seconds, rounded up (at least 1); a
// request that can never pass is told to come back after the window.
func retrySeconds(v Verdict) int64 {
	d := v.RetryAfter
	if d == algo.RetryNever || d < 0 {
		d = v.Window
	}
	return ceilSeconds(d, 1)
}

func ceilSeconds(d time.Duration, atLeast int64) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, atLeast)
}
