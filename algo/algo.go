// Package algo holds ringlimit's five rate-limit algorithms as pure value types.
//
// Every algorithm keeps the per-key state in a small value and is applied as
// Take(now, hits, limit) -> Decision, updating the state in place. Time is an
// argument (integer Unix nanoseconds), never read inside; nothing here starts a
// goroutine, logs, or emits metrics, so the same state fed the same sequence of
// (now, hits, limit) always gives the same decisions. The node package owns the
// clock, the per-key serialization and the storage of states; this package only
// computes.
//
// Common rules for every algorithm:
//   - hits == 0 peeks: it reports the current Decision and never consumes.
//   - A denied check changes nothing: rejected hits are not recorded.
//   - A clock that goes backwards never credits capacity twice and never locks a
//     key out: a now earlier than the last seen time is treated as that time for
//     refills, and the state never moves backwards.
//   - Invalid parameters return an error wrapping ErrInvalidLimit that names the
//     field and value; nothing panics and nothing is clamped silently.
package algo

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidLimit is returned, wrapped with the offending field and value, for any
// Limit or hits value that an algorithm cannot honour exactly (non-positive Limit or
// Period, negative Burst or hits, hits above MaxHits, a SlidingWindowLog Limit above
// MaxLogLimit, products that overflow int64 nanoseconds, an emission interval below
// 1 ns, an unknown Kind).
var ErrInvalidLimit = errors.New("algo: invalid limit")

// RetryNever is the Decision.RetryAfter of a check that can never pass, whatever the
// caller waits: its hits exceed the capacity of the limit (hits > Limit for window
// algorithms, hits > Burst for TokenBucket, hits > Burst+1 for GCRA).
const RetryNever time.Duration = -1

// MaxHits is the largest hits value a single check may carry (2^31). It keeps every
// product hits*interval below the int64 nanosecond range checks can prove.
const MaxHits int64 = 1 << 31

// MaxLogLimit is the largest Limit a SlidingWindowLog accepts (65,536 hits per
// Period). The log stores one 8-byte timestamp per admitted hit, so a key costs at
// most 512 KiB; larger limits belong to SlidingWindowCounter or GCRA.
const MaxLogLimit int64 = 1 << 16

// Kind selects the algorithm of a Limit. The zero value is invalid so that an
// unset Kind is an error rather than a silent default.
type Kind uint8

// The five algorithms. Wire and flag names are given by Kind.String.
const (
	// SlidingWindowLog is exact: a hit admitted at t counts while t > now-Period.
	// The state is the log of admitted timestamps (at most Limit entries). The
	// in-memory form of the Redis ZSET recipe (ZADD/ZREMRANGEBYSCORE/ZCARD).
	SlidingWindowLog Kind = iota + 1
	// SlidingWindowCounter estimates the sliding window from two fixed windows
	// (Cloudflare's approach): prev*(Period-elapsed)/Period + cur, integer math.
	SlidingWindowCounter
	// FixedWindow counts hits in windows aligned to the Unix epoch,
	// window = floor(now/Period): the INCR+EXPIRE recipe.
	FixedWindow
	// GCRA is the generic cell rate algorithm (leaky bucket as a meter) with the
	// semantics of redis-cell's CL.THROTTLE: capacity Burst+1, emission interval
	// T = Period/Limit. State: the theoretical arrival time (TAT), 8 bytes.
	GCRA
	// TokenBucket starts full with Burst tokens and refills Limit tokens per
	// Period (Guava RateLimiter, golang.org/x/time/rate). Hits > Burst never pass.
	TokenBucket
)

// String returns the snake_case name used on the wire, in flags and in metrics
// ("sliding_window_log", "sliding_window_counter", "fixed_window", "gcra",
// "token_bucket"), or "kind(N)" for an unknown value.
func (k Kind) String() string {
	switch k {
	case SlidingWindowLog:
		return "sliding_window_log"
	case SlidingWindowCounter:
		return "sliding_window_counter"
	case FixedWindow:
		return "fixed_window"
	case GCRA:
		return "gcra"
	case TokenBucket:
		return "token_bucket"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is one of the five algorithms.
func (k Kind) Valid() bool { return k >= SlidingWindowLog && k <= TokenBucket }

// Kinds returns the five algorithms in declaration order.
func Kinds() []Kind {
	return []Kind{SlidingWindowLog, SlidingWindowCounter, FixedWindow, GCRA, TokenBucket}
}

// ParseKind maps a name produced by Kind.String back to its Kind. It returns an
// error wrapping ErrInvalidLimit for any other string.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds() {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%w: kind %q (want one of sliding_window_log, sliding_window_counter, fixed_window, gcra, token_bucket)", ErrInvalidLimit, s)
}

// Limit is the rate-limit policy of a check. The same key may be checked with a
// different Limit over time; every algorithm applies the Limit given with each
// check (as redis-cell does), and changing Kind for a key starts a new state.
type Limit struct {
	// Kind selects the algorithm; the zero value is invalid.
	Kind Kind
	// Limit is the number of hits allowed per Period for the window algorithms, and
	// the refill rate (Limit hits per Period) for GCRA and TokenBucket. Must be > 0.
	Limit int64
	// Period is the window length or refill period, in nanoseconds. Must be > 0.
	Period time.Duration
	// Burst is redis-cell's max_burst for GCRA (capacity Burst+1, may be 0) and the
	// bucket capacity for TokenBucket (must be >= 1). Window algorithms ignore it;
	// it must still not be negative.
	Burst int64
}

// Decision is the outcome of one check. Field names are the public contract and
// are mirrored on the wire.
type Decision struct {
	// Allowed reports whether the hits were admitted (and recorded).
	Allowed bool
	// Limit is the capacity the caller sees: Limit for window algorithms, Burst for
	// TokenBucket, Burst+1 for GCRA (redis-cell's reply field 2).
	Limit int64
	// Remaining is how many more hits would be allowed right now, in [0, Limit].
	Remaining int64
	// RetryAfter is, when denied, how long to wait until the same request would pass
	// (ns); 0 when allowed; RetryNever when it can never pass.
	RetryAfter time.Duration
	// ResetAfter is the time until the key is back to full capacity (ns), >= 0.
	ResetAfter time.Duration
}
