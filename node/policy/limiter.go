package policy

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// Checker decides one key on its owner; *node.Node implements it.
type Checker interface {
	AllowPenalized(ctx context.Context, key string, l algo.Limit, hits int64, p node.Penalty) (node.Decision, error)
}

// Outcome classifies a descriptor's decision for metrics.
type Outcome string

// The outcomes of a descriptor.
const (
	// OutcomeNoRule: no rule applies (unknown domain, no match, depth
	// mismatch) and there is no default_rate_limit: not limited.
	OutcomeNoRule Outcome = "no_rule"
	// OutcomeUnlimited: an unlimited rule applies: not limited.
	OutcomeUnlimited Outcome = "unlimited"
	// OutcomeReplaced: the rule was replaced by another rule of the same check
	// (replaces): not limited by this check.
	OutcomeReplaced Outcome = "replaced"
	// OutcomeAllowed: the rule admitted the hits.
	OutcomeAllowed Outcome = "allowed"
	// OutcomeDenied: the rule denied the hits.
	OutcomeDenied Outcome = "denied"
	// OutcomeBanned: the key's penalty ban denied the hits.
	OutcomeBanned Outcome = "banned"
	// OutcomeShadowDenied: a shadow_mode rule would have denied; admitted.
	OutcomeShadowDenied Outcome = "shadow_denied"
)

// Metrics receives one call per descriptor decided by Limiter.Check. It must be
// safe for concurrent use and must not block. domain is a domain of the policy
// that decided, or UnknownDomain for a domain it does not have; rule is
// Rule.ID, "" for OutcomeNoRule. Neither carries a caller's text, so metric
// labels made of them are bounded by the policy file, whatever callers send.
type Metrics interface {
	Descriptor(domain, rule string, o Outcome)
}

// UnknownDomain is the domain Limiter.Check reports to Metrics for a domain
// the policy in force does not have.
const UnknownDomain = "unknown"

// Decision is the outcome of one descriptor of a check.
type Decision struct {
	// Decision is the node's Decision for the descriptor's key: Allowed,
	// Limit, Remaining, RetryAfter, ResetAfter, Route, Owner, Banned. For a
	// descriptor the node was not asked about (no rule, unlimited, replaced)
	// it is Allowed with every number 0; for a blocking rule
	// (requests_per_unit 0) it is denied with RetryAfter algo.RetryNever. In
	// shadow mode Allowed is true even when the rule denied (see WouldDeny).
	node.Decision
	// Rule is the rule that applied, nil when none did.
	Rule *Rule
	// Key is the stored key the node decided ("" when it was not asked).
	Key string
	// Hits is the hits the descriptor was checked with.
	Hits int64
	// WouldDeny is set in shadow mode when the rule denied: the descriptor was
	// admitted only because of shadow_mode.
	WouldDeny bool
	// Replaced is set when another rule of the check replaced this one.
	Replaced bool
}

// Outcome classifies d.
func (d *Decision) Outcome() Outcome {
	switch {
	case d.Rule == nil:
		return OutcomeNoRule
	case d.Replaced:
		return OutcomeReplaced
	case d.Rule.Unlimited:
		return OutcomeUnlimited
	case d.WouldDeny:
		return OutcomeShadowDenied
	case d.Banned && !d.Allowed:
		return OutcomeBanned
	case !d.Allowed:
		return OutcomeDenied
	}
	return OutcomeAllowed
}

// Result is the outcome of a check: one Decision per descriptor, in order.
type Result struct {
	// Allowed is true when every descriptor was allowed (shadow mode counts as
	// allowed): Envoy's overall_code OK.
	Allowed bool
	// Decisions holds one Decision per descriptor of the check, in order.
	Decisions []Decision
	// Version is the version of the policy that decided every descriptor
	// (Limiter.Swap numbers them from 1).
	Version uint64
}

// Binding returns the index of the descriptor whose Decision a single-answer
// front door (an HTTP header set) should report: among denied descriptors the
// one with the longest RetryAfter (RetryNever counts as longest); when all are
// allowed, the limited one with the fewest Remaining (then the shortest
// window). -1 when no descriptor is limited by a rule.
func (r *Result) Binding() int {
	best := -1
	for i := range r.Decisions {
		d := &r.Decisions[i]
		if d.Key == "" && (d.Rule == nil || !d.Rule.Blocks()) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &r.Decisions[best]
		switch {
		case !d.Allowed && b.Allowed:
			best = i
		case !d.Allowed && !b.Allowed:
			if retryRank(d.RetryAfter) > retryRank(b.RetryAfter) {
				best = i
			}
		case d.Allowed && b.Allowed:
			if d.Remaining < b.Remaining || (d.Remaining == b.Remaining && d.ResetAfter < b.ResetAfter) {
				best = i
			}
		}
	}
	return best
}

func retryRank(d time.Duration) time.Duration {
	if d == algo.RetryNever {
		return 1<<63 - 1
	}
	return d
}

// Limiter applies a Policy on a node. Check is safe for concurrent use, also
// with Swap.
type Limiter struct {
	c       Checker
	m       Metrics
	cur     atomic.Pointer[versioned]
	version atomic.Uint64
}

type versioned struct {
	p *Policy
	v uint64
}

// NewLimiter returns a Limiter deciding with c under p (version 1). p may be
// nil (no rules: every descriptor is OutcomeNoRule); m may be nil (no
// metrics). Errors: c is nil (wrapping ErrInvalidRequest).
func NewLimiter(c Checker, p *Policy, m Metrics) (*Limiter, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil Checker", ErrInvalidRequest)
	}
	l := &Limiter{c: c, m: m}
	l.Swap(p)
	return l, nil
}

// Swap makes p the policy of every later Check, atomically (a Check in flight
// finishes under the policy it started with, whole), and returns p's version.
func (l *Limiter) Swap(p *Policy) uint64 {
	v := l.version.Add(1)
	l.cur.Store(&versioned{p: p, v: v})
	return v
}

// Policy returns the current policy and its version.
func (l *Limiter) Policy() (*Policy, uint64) {
	cur := l.cur.Load()
	return cur.p, cur.v
}

// Check decides descriptors of domain, each with hits hits unless it carries
// its own (Descriptor.Hits), under one policy version: every descriptor is
// looked up (Policy.Lookup), rules replaced by another matched rule are
// skipped, and every remaining limited descriptor is decided on its key's
// owner, in order, with its rule's penalty. As in envoyproxy/ratelimit, every
// matched descriptor takes its hits even when another one is denied. Errors:
// a wrapped ErrInvalidRequest for bad input, holding the *node.InputError that
// names the field (including a descriptor whose key the node refuses, e.g.
// above its MaxKeyLen), or the
// node's error (then the descriptors decided before it have taken their hits).
func (l *Limiter) Check(ctx context.Context, domain string, descs []Descriptor, hits int64) (Result, error) {
	if domain == "" {
		return Result{}, requestError("domain", `""`, "must not be empty")
	}
	if len(descs) == 0 {
		return Result{}, requestError("descriptors", "0 descriptors", "must hold at least one")
	}
	if err := algo.ValidateHits(hits); err != nil {
		return Result{}, fmt.Errorf("%w: hits: %w", ErrInvalidRequest, err)
	}
	for i, d := range descs {
		if len(d.Entries) == 0 {
			return Result{}, requestError(fmt.Sprintf("descriptors[%d].entries", i), "0 entries", "must hold at least one")
		}
		for j, e := range d.Entries {
			if e.Key == "" {
				return Result{}, requestError(fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), `""`, "must not be empty")
			}
		}
		if d.Hits != nil {
			if err := algo.ValidateHits(*d.Hits); err != nil {
				return Result{}, fmt.Errorf("%w: descriptors[%d] hits: %w", ErrInvalidRequest, i, err)
			}
		}
	}
	cur := l.cur.Load() // the one policy version this check sees
	res := Result{Allowed: true, Decisions: make([]Decision, len(descs)), Version: cur.v}
	var replaced []string
	for i := range descs {
		d := &res.Decisions[i]
		d.Rule = cur.p.Lookup(domain, descs[i].Entries)
		d.Hits = hits
		if descs[i].Hits != nil {
			d.Hits = *descs[i].Hits
		}
		d.Allowed = true
		if d.Rule != nil {
			replaced = append(replaced, d.Rule.Replaces...)
		}
	}
	for i := range descs {
		d := &res.Decisions[i]
		r := d.Rule
		if r != nil && r.Name != "" && contains(replaced, r.Name) {
			d.Replaced = true
		}
		switch {
		case r == nil || r.Unlimited || d.Replaced:
		case r.Blocks():
			d.Allowed = false
			d.RetryAfter = algo.RetryNever
		default:
			d.Key = Key(domain, descs[i].Entries)
			nd, err := l.c.AllowPenalized(ctx, d.Key, r.Limit, d.Hits, r.Penalty)
			if node.Classify(err) == node.ClassInvalid { // e.g. a key above the node's MaxKeyLen
				return Result{}, fmt.Errorf("%w: descriptor %d (rule %s): %w", ErrInvalidRequest, i, r.ID(), err)
			}
			if err != nil {
				return Result{}, fmt.Errorf("policy: descriptor %d (rule %s): %w", i, r.ID(), err)
			}
			d.Decision = nd
		}
		if !d.Allowed && r.ShadowMode {
			d.Allowed, d.WouldDeny = true, true
		}
		if !d.Allowed {
			res.Allowed = false
		}
		if l.m != nil {
			id, md := "", UnknownDomain
			if r != nil {
				id = r.ID()
			}
			if cur.p.HasDomain(domain) {
				md = domain
			}
			l.m.Descriptor(md, id, d.Outcome())
		}
	}
	return res, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// requestError is the *node.InputError of a request that Limiter.Check
// refuses, wrapping ErrInvalidRequest.
func requestError(field, value, allowed string) error {
	return &node.InputError{Field: field, Value: value, Allowed: allowed, Err: ErrInvalidRequest}
}
