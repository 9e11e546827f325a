// Package redislimit is ringlimit's five algorithms (package algo) as Redis Lua
// scripts, for a Redis that is the primary limiter (see package failover) and as
// the Redis baseline of `ringlimit bench --redis`.
//
// A check runs one script (EVALSHA, EVAL when Redis does not know it yet) on the
// key's hash: the script reads the state, decides with the semantics of
// algo.State.Take, writes the state only when it admits hits, and sets PEXPIRE to
// the time the key is back to full capacity plus Options.ExpiryGrace. Time is the
// caller's: Take receives now (Unix ns) as an argument, never Redis's TIME, so a
// limiter that switches between Redis and a ringlimit cluster keeps each key's
// clock. For the same sequence of (key, now, hits, limit), Take returns the same
// algo.Decision as algo.State.Take (the property test checks it on a real
// redis-server), inside the range below.
//
// Range. Lua numbers in Redis are float64, exact for integers up to 2^53, so the
// scripts keep times as two 32-bit halves and bound every duration and count:
// Period, GCRA's tau = T*(Burst+1) and TokenBucket's time to refill from
// empty, ceil(Burst*Period/Limit), at most MaxDuration (2^51 ns, about 26 days) and Limit at most MaxCount (2^51). A Limit
// outside it is refused with ErrUnsupportedLimit (wrapping algo.ErrInvalidLimit)
// before Redis is called; nothing is rounded. A check whose now is more than
// about 2^51 ns before the key's latest time (a clock stepping back by weeks)
// returns ErrClockStep instead of a Decision.
//
// Expiry. Keys expire on Redis's clock, ExpiryGrace after the caller's clock says
// they are back to full. A key dropped when full is equivalent to its state for
// checks at or after its latest time; a check that steps back further than the
// grace may find it fresh, as algo.State.Idle documents for the node.
package redislimit

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/algo"
)

// Named errors of the package.
var (
	// ErrUnsupportedLimit is returned, wrapped with the field and value, for a
	// Limit that algo accepts but the scripts cannot compute exactly (see
	// MaxDuration and MaxCount). It wraps algo.ErrInvalidLimit.
	ErrUnsupportedLimit = fmt.Errorf("%w: redislimit: outside the exact range of the Lua scripts", algo.ErrInvalidLimit)
	// ErrClockStep is returned by Take when now is so far before the key's
	// latest time (more than about 2^51 ns) that the durations of the Decision
	// would not be exact in Lua numbers.
	ErrClockStep = errors.New("redislimit: clock step back too large")
	// ErrInvalidKey is returned for an empty key.
	ErrInvalidKey = errors.New("redislimit: invalid key")
	// ErrStateRange is returned by Take when a key's state, taken under
	// another Limit of the same Kind (a larger TokenBucket debt, say), cannot
	// be computed exactly under this one. The failover limiter lets the
	// cluster decide such a check.
	ErrStateRange = errors.New("redislimit: key state out of the exact range under this limit")
	// ErrReply is returned, wrapped, when Redis answers something a script
	// never replies (another program's data under the key prefix, say).
	ErrReply = errors.New("redislimit: unexpected reply")
	// ErrInvalidOptions is returned by New for a nil client or a negative
	// ExpiryGrace.
	ErrInvalidOptions = errors.New("redislimit: invalid options")
)

// MaxDuration bounds, in ns, a Limit's Period, GCRA's tau = (Period/Limit) *
// (Burst+1) and TokenBucket's time to refill from empty,
// ceil(Burst*Period/Limit): 2^51 ns, about 26 days. Together
// with a step back of at most as much, every duration a script computes stays
// below 2^53 and is exact in Lua's float64 numbers.
const MaxDuration time.Duration = 1 << 51

// MaxCount bounds a Limit's Limit and Burst (hits): 2^51.
const MaxCount int64 = 1 << 51

// DefaultPrefix is the key prefix when Options.Prefix is empty.
const DefaultPrefix = "ringlimit:"

// DefaultExpiryGrace is Options.ExpiryGrace when it is zero.
const DefaultExpiryGrace = 10 * time.Second

// Options configures a Limiter.
type Options struct {
	// Prefix is prepended to every key (default DefaultPrefix, "ringlimit:").
	// Keys are hashes with the fields k (the algo.Kind number) and a..d.
	Prefix string
	// ExpiryGrace is added to each key's PEXPIRE, which is otherwise the time
	// until the key is back to full capacity (rounded up to ms). Default 10 s
	// (DefaultExpiryGrace); must not be negative. A longer grace keeps idle
	// keys longer (memory) and keeps checks whose clock steps back by less than
	// the grace exact (see the package doc).
	ExpiryGrace time.Duration
}

// Limiter applies algo's algorithms on Redis. It is safe for concurrent use;
// checks of one key are serialized by Redis.
type Limiter struct {
	c       redis.UniversalClient
	prefix  string
	graceMS int64
	scripts [algo.TokenBucket + 1]*redis.Script
}

// New returns a Limiter on c (a single node, Sentinel or Cluster client of
// go-redis v9). It does not contact Redis; Load preloads the scripts. Errors:
// ErrInvalidOptions for a nil c or a negative ExpiryGrace.
func New(c redis.UniversalClient, o Options) (*Limiter, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOptions)
	}
	if o.ExpiryGrace < 0 {
		return nil, fmt.Errorf("%w: ExpiryGrace = %v, must be >= 0", ErrInvalidOptions, o.ExpiryGrace)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.ExpiryGrace == 0 {
		o.ExpiryGrace = DefaultExpiryGrace
	}
	l := &Limiter{c: c, prefix: o.Prefix, graceMS: int64((o.ExpiryGrace + time.Millisecond - 1) / time.Millisecond)}
	l.scripts[algo.GCRA] = redis.NewScript(gcraScript)
	l.scripts[algo.TokenBucket] = redis.NewScript(tokenBucketScript)
	l.scripts[algo.FixedWindow] = redis.NewScript(fixedWindowScript)
	l.scripts[algo.SlidingWindowCounter] = redis.NewScript(slidingWindowCounterScript)
	l.scripts[algo.SlidingWindowLog] = redis.NewScript(slidingWindowLogScript)
	return l, nil
}

// Load loads the five scripts into Redis (SCRIPT LOAD), so that the first
// checks need no EVAL fallback. On a Cluster client it loads them on every
// master. Optional: Take falls back to EVAL on NOSCRIPT.
func (l *Limiter) Load(ctx context.Context) error {
	load := func(ctx context.Context, c redis.Scripter) error {
		for _, s := range l.scripts[algo.SlidingWindowLog:] {
			if err := s.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	if cc, ok := l.c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return load(ctx, c) })
	}
	return load(ctx, l.c)
}

// Key returns the Redis key that holds key's state: Prefix + key.
func (l *Limiter) Key(key string) string { return l.prefix + key }

// Validate returns nil if Take can apply lim exactly, else an error wrapping
// algo.ErrInvalidLimit (lim.Validate's) or ErrUnsupportedLimit.
func Validate(lim algo.Limit) error {
	if err := lim.Validate(); err != nil {
		return err
	}
	switch {
	case lim.Period > MaxDuration:
		return fmt.Errorf("%w: field Period value %d ns: must be <= MaxDuration (%d ns)", ErrUnsupportedLimit, int64(lim.Period), int64(MaxDuration))
	case lim.Limit > MaxCount:
		return fmt.Errorf("%w: field Limit value %d: must be <= MaxCount (%d)", ErrUnsupportedLimit, lim.Limit, MaxCount)
	case lim.Burst > MaxCount:
		return fmt.Errorf("%w: field Burst value %d: must be <= MaxCount (%d)", ErrUnsupportedLimit, lim.Burst, MaxCount)
	}
	if !Supported(lim.Kind) {
		return fmt.Errorf("%w: field Kind value %v: no Lua script (supported: %v)", ErrUnsupportedLimit, lim.Kind, SupportedKinds())
	}
	// Period, Limit and Burst are below 2^51 here, so these products fit int64.
	switch lim.Kind {
	case algo.GCRA:
		if tau := int64(lim.Period) / lim.Limit * (lim.Burst + 1); tau > int64(MaxDuration) {
			return fmt.Errorf("%w: field Burst value %d: tau = T*(Burst+1) = %d ns, must be <= MaxDuration (%d ns)", ErrUnsupportedLimit, lim.Burst, tau, int64(MaxDuration))
		}
	case algo.TokenBucket:
		// lim.Validate bounded Burst*Period by algo.MaxDuration (2^62).
		full := lim.Burst * int64(lim.Period)
		if refill := (full-1)/lim.Limit + 1; refill > int64(MaxDuration) {
			return fmt.Errorf("%w: field Burst value %d: the time to refill, ceil(Burst*Period/Limit) = %d ns, must be <= MaxDuration (%d ns)", ErrUnsupportedLimit, lim.Burst, refill, int64(MaxDuration))
		}
	}
	return nil
}

// SupportedKinds returns the algorithms that have a Lua script: every
// algo.Kind but BucketedSlidingWindow, which the failover limiter sends to the
// cluster (as it does every limit Validate refuses).
func SupportedKinds() []algo.Kind {
	return []algo.Kind{algo.SlidingWindowLog, algo.SlidingWindowCounter, algo.FixedWindow, algo.GCRA, algo.TokenBucket}
}

// Supported reports whether k has a Lua script.
func Supported(k algo.Kind) bool {
	for _, s := range SupportedKinds() {
		if s == k {
			return true
		}
	}
	return false
}

// Take applies a check of hits (0 peeks) of key at now (Unix ns) under lim on
// Redis and returns the Decision algo.State.Take would return for the same
// sequence. Errors: ErrInvalidKey for an empty key; an error wrapping
// algo.ErrInvalidLimit for an invalid lim, hits or now (ErrUnsupportedLimit
// outside the scripts' range); ErrClockStep; ErrReply; otherwise Redis's or
// ctx's error. Being over the limit is a Decision, never an error.
func (l *Limiter) Take(ctx context.Context, key string, now, hits int64, lim algo.Limit) (algo.Decision, error) {
	if key == "" {
		return algo.Decision{}, fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if err := Validate(lim); err != nil {
		return algo.Decision{}, err
	}
	if err := algo.ValidateHits(hits); err != nil {
		return algo.Decision{}, err
	}
	if now < algo.MinTime || now > algo.MaxTime {
		return algo.Decision{}, fmt.Errorf("%w: field now value %d ns: must be in %d..%d", algo.ErrInvalidLimit, now, algo.MinTime, algo.MaxTime)
	}
	args := l.args(now, hits, lim)
	res, err := l.scripts[lim.Kind].Run(ctx, l.c, []string{l.prefix + key}, args...).Int64Slice()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) && strings.Contains(rerr.Error(), "RINGLIMIT clock step") {
			return algo.Decision{}, fmt.Errorf("%w: key %q, now %d", ErrClockStep, key, now)
		}
		if errors.As(err, &rerr) && strings.Contains(rerr.Error(), "RINGLIMIT range") {
			return algo.Decision{}, fmt.Errorf("%w: key %q", ErrStateRange, key)
		}
		return algo.Decision{}, err
	}
	if len(res) != 5 {
		return algo.Decision{}, fmt.Errorf("%w: %d values, want 5", ErrReply, len(res))
	}
	d := algo.Decision{Allowed: res[0] == 1, Limit: res[1], Remaining: res[2], RetryAfter: time.Duration(res[3]), ResetAfter: time.Duration(res[4])}
	if res[3] < 0 {
		d.RetryAfter = algo.RetryNever
	}
	return d, nil
}

// args returns a script's ARGV for a validated check (see scripts.go).
func (l *Limiter) args(now, hits int64, lim algo.Limit) []any {
	h, lo := split(now)
	p := int64(lim.Period)
	a := make([]any, 8, 11)
	a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] = int64(lim.Kind), h, lo, hits, lim.Limit, p, lim.Burst, l.graceMS
	switch lim.Kind {
	case algo.GCRA:
		t := p / lim.Limit
		a = append(a, t, t*(lim.Burst+1))
	case algo.FixedWindow:
		sh, sl := split(now - floorMod(now, p))
		a = append(a, sh, sl)
	case algo.SlidingWindowCounter:
		e := floorMod(now, p)
		sh, sl := split(now - e)
		a = append(a, sh, sl, e)
	}
	return a
}

// split returns the halves of t: t = h*2^32 + l, 0 <= l < 2^32.
func split(t int64) (h, l int64) { return t >> 32, t & (1<<32 - 1) }

// floorMod returns a mod p in [0, p) for p > 0.
func floorMod(a, p int64) int64 {
	m := a % p
	if m < 0 {
		m += p
	}
	return m
}

// ClientOptions returns the go-redis options NewClient uses for a redis:// or
// rediss:// URL (TLS for rediss; user, password, database and options as
// redis.ParseURL reads them), with ContextTimeoutEnabled on, so that a check's
// deadline (the failover Budget) bounds every Redis call, and no retries
// (MaxRetries -1) unless the URL sets max_retries (a retry inside one budget
// only delays the switch). Errors wrap ErrInvalidOptions.
func ClientOptions(rawURL string) (*redis.Options, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: redis URL: %w", ErrInvalidOptions, err)
	}
	o.ContextTimeoutEnabled = true
	if !strings.Contains(rawURL, "max_retries=") {
		o.MaxRetries = -1
	}
	return o, nil
}

// NewClient returns a go-redis client for a redis:// or rediss:// URL: a
// Sentinel client (redis.ParseFailoverURL) when the URL has a master_name
// parameter, the sentinels in its host and addr parameters; a Cluster client
// (redis.ParseClusterURL) when it has addr parameters (more seed nodes) and no
// master_name; else a single-node client with ClientOptions. All three have
// ContextTimeoutEnabled on and no retries unless the URL sets max_retries.
// Errors wrap ErrInvalidOptions.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: redis URL: %w", ErrInvalidOptions, err)
	}
	q := u.Query()
	retries := !q.Has("max_retries")
	switch {
	case q.Has("master_name"):
		o, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("%w: redis sentinel URL: %w", ErrInvalidOptions, err)
		}
		o.ContextTimeoutEnabled = true
		if retries {
			o.MaxRetries = -1
		}
		return redis.NewFailoverClient(o), nil
	case q.Has("addr"):
		o, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("%w: redis cluster URL: %w", ErrInvalidOptions, err)
		}
		o.ContextTimeoutEnabled = true
		if retries {
			o.MaxRetries = -1
		}
		return redis.NewClusterClient(o), nil
	}
	o, err := ClientOptions(rawURL)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(o), nil
}
