package middleware

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
)

// The response header fields the HTTP middleware sets, after
// draft-ietf-httpapi-ratelimit-headers-10 ("RateLimit header fields for
// HTTP"): RateLimit-Policy is a Structured Fields list of quota policies, each
// a string naming the policy with q (quota, requests) and w (window, seconds);
// RateLimit is a list of current limits, each the policy name with r
// (remaining requests) and t (seconds until the quota resets). Both are set
// (Header().Set, never Add) on every limited response, allowed or not;
// Retry-After (seconds) on 429 only.
const (
	HeaderRateLimitPolicy = "RateLimit-Policy"
	HeaderRateLimit       = "RateLimit"
	HeaderRetryAfter      = "Retry-After"
)

// KeyFunc returns the rate-limit key of a request; an error (wrap ErrNoKey)
// answers the request 500 without calling the handler: a request whose key
// cannot be told is never let through unlimited.
type KeyFunc func(r *http.Request) (string, error)

// Option configures HTTP and HTTPDescriptors.
type Option func(*httpConfig) error

type httpConfig struct {
	key        KeyFunc
	deny       http.Handler
	failClosed bool
	log        *slog.Logger
	queue      time.Duration // WithQueue's bound; 0 = answer 429 at once
}

// WithQueue makes a request over the limit wait for its turn, up to maxWait
// (and the request's own context), instead of being answered 429 at once:
// the key's owner books the request's slot (node.Check.MaxWait) and the
// middleware holds the request until it is due, then calls the handler
// (Verdict.Waited says how long it waited). A request whose slot lies
// further than maxWait ahead is answered 429 at once with nothing consumed;
// one whose client goes away while it waits gives its slot back. Only for
// HTTP with a NodeLimiter over a GCRA or TokenBucket limit: HTTP returns an
// error wrapping ErrInvalidOption otherwise, as it does for a maxWait
// outside (0, node.MaxWait]. HTTPDescriptors refuses it (a policy rule
// checks several descriptors at once and cannot book ahead). Each waiting
// request holds its goroutine and connection: bound maxWait to what the
// server can hold (about rate × maxWait requests per key wait at once).
func WithQueue(maxWait time.Duration) Option {
	return func(c *httpConfig) error {
		if maxWait <= 0 || maxWait > node.MaxWait {
			return fmt.Errorf("%w: WithQueue(%v): want a wait in (0, %v]", ErrInvalidOption, maxWait, node.MaxWait)
		}
		c.queue = maxWait
		return nil
	}
}

// WithKeyFunc sets the key function. Default: KeyFromClientIP() (the direct
// peer's address, no proxy trusted).
func WithKeyFunc(f KeyFunc) Option {
	return func(c *httpConfig) error {
		if f == nil {
			return fmt.Errorf("%w: nil KeyFunc", ErrInvalidOption)
		}
		c.key = f
		return nil
	}
}

// WithDenyHandler replaces the default 429 response body ("Too Many
// Requests"). The handler runs after the status-independent fields
// (RateLimit-Policy, RateLimit, Retry-After) are set and must write the status
// itself; VerdictFrom(r.Context()) returns the Verdict.
func WithDenyHandler(h http.Handler) Option {
	return func(c *httpConfig) error {
		if h == nil {
			return fmt.Errorf("%w: nil deny handler", ErrInvalidOption)
		}
		c.deny = h
		return nil
	}
}

// WithFailClosed answers 503 Service Unavailable when the Limiter returns an
// error. Default: fail open (the request reaches the handler, without
// RateLimit fields). Either way, an error that is the request's fault (a key
// the node refuses, such as one above its MaxKeyLen) is 400 Bad Request: a
// request never passes unlimited because its key is too long.
func WithFailClosed() Option {
	return func(c *httpConfig) error { c.failClosed = true; return nil }
}

// WithLogger logs Limiter and key errors (at Warn). Default: not logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *httpConfig) error { c.log = l; return nil }
}

// KeyFromClientIP keys requests by client IP. The direct peer
// (Request.RemoteAddr) is the client unless it is in one of the trusted proxy
// networks; then the Forwarded header's for= (RFC 7239), or else
// X-Forwarded-For, is read from the right, skipping addresses in trusted
// networks, and the first untrusted address is the client. Entries a client
// wrote itself sit to the left of what the trusted proxies appended, so they
// are never reached; an unparsable or obfuscated entry stops the walk at the
// last trusted hop.
func KeyFromClientIP(trusted ...netip.Prefix) KeyFunc {
	tr := append([]netip.Prefix(nil), trusted...)
	return func(r *http.Request) (string, error) {
		a, err := ClientIP(r, tr)
		if err != nil {
			return "", err
		}
		return a.String(), nil
	}
}

// ClientIP returns the client address of r under the trusted proxy networks
// (see KeyFromClientIP). Errors wrap ErrNoKey (an unparsable RemoteAddr).
func ClientIP(r *http.Request, trusted []netip.Prefix) (netip.Addr, error) {
	peer, err := parseHostAddr(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: remote address %q", ErrNoKey, r.RemoteAddr)
	}
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	if !isTrusted(peer) {
		return peer, nil
	}
	var chain []string
	if fw := r.Header.Values("Forwarded"); len(fw) > 0 {
		chain = forwardedFor(fw)
	} else {
		for _, v := range r.Header.Values("X-Forwarded-For") {
			for _, s := range strings.Split(v, ",") {
				chain = append(chain, strings.TrimSpace(s))
			}
		}
	}
	client := peer
	for i := len(chain) - 1; i >= 0 && isTrusted(client); i-- {
		a, err := parseHostAddr(chain[i])
		if err != nil {
			break
		}
		client = a
	}
	return client, nil
}

// forwardedFor returns the for= values of Forwarded header values, in order.
// An element without for= yields "" (which stops the walk).
func forwardedFor(values []string) []string {
	var out []string
	for _, v := range values {
		for _, elem := range strings.Split(v, ",") {
			f := ""
			for _, pair := range strings.Split(elem, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(k, "for") {
					f = strings.Trim(val, `"`)
				}
			}
			out = append(out, f)
		}
	}
	return out
}

// parseHostAddr parses "ip", "ip:port", "[ipv6]" or "[ipv6]:port".
func parseHostAddr(s string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), nil
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	return a.Unmap(), nil
}

// KeyFromHeader keys requests by the value of header name; a request without
// it has no key (500).
func KeyFromHeader(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("%w: header %s is missing", ErrNoKey, name)
		}
		return v, nil
	}
}

// KeyFromRoute keys requests by the ServeMux pattern that matched them
// (Request.Pattern, e.g. "GET /items/{id}"): one limit per route. The
// middleware must wrap the handler registered with the pattern
// (mux.Handle(pattern, mw(h))), since the pattern is set on the request the
// mux passes to that handler; a request without a pattern has no key.
func KeyFromRoute() KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.Pattern == "" {
			return "", fmt.Errorf("%w: no ServeMux pattern (wrap the handler registered with the pattern)", ErrNoKey)
		}
		return r.Pattern, nil
	}
}

type verdictKey struct{}

// VerdictFrom returns the Verdict the middleware stored in the request context
// for the deny handler and the handler.
func VerdictFrom(ctx context.Context) (Verdict, bool) {
	v, ok := ctx.Value(verdictKey{}).(Verdict)
	return v, ok
}

// HTTP returns middleware that decides every request with l by its key (see
// WithKeyFunc) before calling the next handler. Errors: a nil Limiter or a bad
// option (wrapping ErrInvalidOption).
func HTTP(l Limiter, opts ...Option) (func(http.Handler) http.Handler, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil Limiter", ErrInvalidOption)
	}
	c, err := newHTTPConfig(opts)
	if err != nil {
		return nil, err
	}
	key := c.key
	if c.queue > 0 {
		wl, ok := l.(waitLimiter)
		if !ok {
			return nil, fmt.Errorf("%w: WithQueue needs a NodeLimiter", ErrInvalidOption)
		}
		if err := wl.canWait(c.queue); err != nil {
			return nil, err
		}
		queue := c.queue
		return c.wrap(func(r *http.Request) (Verdict, bool, error) {
			k, err := key(r)
			if err != nil {
				return Verdict{}, false, err
			}
			v, err := wl.limitWait(r.Context(), k, queue)
			if err != nil && r.Context().Err() != nil {
				// The client went away while it waited (its slot went back):
				// the handler is not called, whatever the fail mode.
				return Verdict{}, true, nil
			}
			return v, true, err
		}), nil
	}
	return c.wrap(func(r *http.Request) (Verdict, bool, error) {
		k, err := key(r)
		if err != nil {
			return Verdict{}, false, err
		}
		v, err := l.Limit(r.Context(), k)
		return v, true, err
	}), nil
}

// HTTPDescriptors returns middleware that checks the descriptors build returns
// for each request against the policy file in domain (1 hit per request). A
// build error answers 500 (the request is not let through unlimited).
// WithKeyFunc is ignored. Errors: a nil argument, an empty domain or a bad
// option (wrapping ErrInvalidOption).
func HTTPDescriptors(pl *policy.Limiter, domain string, build func(r *http.Request) ([]policy.Descriptor, error), opts ...Option) (func(http.Handler) http.Handler, error) {
	if pl == nil || build == nil || domain == "" {
		return nil, fmt.Errorf("%w: HTTPDescriptors needs a policy.Limiter, a domain and a build function", ErrInvalidOption)
	}
	c, err := newHTTPConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.queue > 0 {
		return nil, fmt.Errorf("%w: WithQueue is not supported by HTTPDescriptors (a policy check cannot book ahead)", ErrInvalidOption)
	}
	return c.wrap(func(r *http.Request) (Verdict, bool, error) {
		descs, err := build(r)
		if err != nil {
			return Verdict{}, false, err
		}
		v, err := checkPolicy(r.Context(), pl, domain, descs)
		return v, true, err
	}), nil
}

func newHTTPConfig(opts []Option) (*httpConfig, error) {
	c := &httpConfig{key: KeyFromClientIP()}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// wrap builds the middleware around decide, which returns the Verdict, whether
// an error came from the Limiter (true) or from building the key (false), and
// the error.
func (c *httpConfig) wrap(decide func(r *http.Request) (Verdict, bool, error)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v, fromLimiter, err := decide(r)
			if err != nil {
				if c.log != nil {
					c.log.Warn("rate limit", "err", err, "from_limiter", fromLimiter, "path", r.URL.Path)
				}
				switch {
				case !fromLimiter:
					http.Error(w, "rate limit key: "+err.Error(), http.StatusInternalServerError)
				case invalidInput(err):
					http.Error(w, "rate limit: invalid request: "+node.Message(err), http.StatusBadRequest)
				case c.failClosed:
					http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
				default:
					next.ServeHTTP(w, r)
				}
				return
			}
			if v.Limited {
				setFields(w.Header(), v)
			}
			if v.Allowed {
				if v.Waited > 0 {
					// A queued request's handler can tell how long it waited.
					r = r.WithContext(context.WithValue(r.Context(), verdictKey{}, v))
				}
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set(HeaderRetryAfter, strconv.FormatInt(retrySeconds(v), 10))
			if c.deny != nil {
				c.deny.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), verdictKey{}, v)))
				return
			}
			http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		})
	}
}

// The canonical (textproto) forms of the field names: assigning the header
// map directly skips Set's canonicalization, which allocates for names that
// are not canonical already ("RateLimit" is not).
// (TestHeaderKeysAreCanonical checks them against textproto.)
const (
	keyRateLimitPolicy = "Ratelimit-Policy"
	keyRateLimit       = "Ratelimit"
)

// setFields sets (replaces) RateLimit-Policy and RateLimit for v.
func setFields(h http.Header, v Verdict) {
	var buf [160]byte
	b := appendSFString(buf[:0], v.Policy)
	n := len(b)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, v.Limit, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, ceilSeconds(v.Window, 1), 10)
	policyEnd := len(b)
	b = append(b, b[:n]...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, v.Remaining, 10)
	t := v.ResetAfter
	if !v.Allowed && v.RetryAfter > t {
		t = v.RetryAfter
	}
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, ceilSeconds(t, 0), 10)
	s := string(b) // one allocation for both values
	vals := []string{s[:policyEnd], s[policyEnd:]}
	h[keyRateLimitPolicy] = vals[0:1:1]
	h[keyRateLimit] = vals[1:2:2]
}

// sfString serializes s as a Structured Fields String (RFC 8941 §4.1.6).
func sfString(s string) string { return string(appendSFString(nil, s)) }

// appendSFString appends s as a Structured Fields String: quoted, with '"'
// and '\' escaped; characters outside printable ASCII are replaced by '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '"' || ch == '\\':
			b = append(b, '\\', ch)
		case ch < 0x20 || ch > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, ch)
		}
	}
	return append(b, '"')
}
