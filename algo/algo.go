// Package algo holds ringlimit's six rate-limit algorithms as pure value types.
//
// Every algorithm keeps the per-key state in a small value and is applied as
// Take(now, hits, limit) -> Decision, updating the state in place. Time is an
// argument (integer Unix nanoseconds), never read inside; nothing here starts a
// goroutine, logs, or emits metrics, so the same state fed the same sequence of
// (now, hits, limit) always gives the same decisions. The node package owns the
// clock, the per-key serialization and the storage of states; this package only
// computes.
//
// Data flows through one of two doors. The value types (GCRAState,
// TokenBucketState, FixedWindowState, SlidingWindowCounterState,
// SlidingWindowLogState, BucketedWindowState) take a Limit that the caller has already validated and
// are what the tests and benchmarks drive directly. State is the tagged union of
// the six that the node stores per key: State.Take validates the Limit, the hits
// and the time, picks the algorithm from Limit.Kind, and returns errors instead of
// relying on the caller. State also merges the states of a handed-off key, tells
// when a state is back to full capacity (and can be dropped), and has a versioned
// binary form for the wire.
//
// Common rules for every algorithm:
//   - hits == 0 peeks: it reports the current Decision and never consumes.
//   - Only a check that admits hits (hits > 0, Allowed) changes the state. A
//     check that is denied and a peek change nothing, whatever their now, and
//     a now that stepped back is never a reason to store anything: no cap, no
//     pull-back, no clean-up, so the state cannot tell such checks happened.
//     (State.Take also gives a zero State its Kind, or starts a fresh one when
//     the Kind changes.)
//   - Time never runs backwards inside a state. TokenBucket, FixedWindow,
//     SlidingWindowCounter and SlidingWindowLog carry in their state the latest
//     time they have seen (the last refill time; the start of the current
//     window; the newest entry of the log), set by the checks they admitted. A
//     check whose now is earlier is decided at that latest time, its effective
//     time max(now, latest): Allowed, Remaining and the state it leaves are
//     those of the same check at the effective time, and RetryAfter and
//     ResetAfter are measured from now to the same instants, so they are
//     longer by the step. A clock that steps back therefore credits nothing (a
//     clock that returns finds the state it left, plus what was admitted in
//     between) and locks nothing out beyond what the state at its latest time
//     implies: the key frees up when the clock reaches the instant it would
//     have freed up at anyway. Each type documents what its latest time is.
//   - GCRA keeps only its TAT, as redis-cell does, and decides at now itself:
//     a step back moves now away from the TAT, so it is at least as
//     restrictive as a check at any later time, never changes the TAT when
//     denied, and bounds the wait by the step plus the normal wait (see
//     GCRAState).
//   - A Limit may change between checks of the same key; every check applies the
//     Limit it is given (as redis-cell does). A smaller capacity credits nothing
//     and stores no cap: what was recorded under the larger Limit keeps counting
//     for as long as it would have (a key may wait out the debt of the larger
//     Limit, at most the larger Limit's full wait); Remaining is clamped to
//     [0, capacity] in the Decision only.
//   - State.Idle is exact for checks at times at or after both its now and the
//     state's latest time; a caller that may feed a key earlier times than it
//     already did must not drop states on Idle alone.
//   - Durations in a Decision saturate at math.MaxInt64 ns (about 292 years),
//     reachable only when now is centuries before the state's latest time.
//   - Invalid parameters return an error wrapping ErrInvalidLimit that names the
//     field and value; nothing panics and nothing is clamped silently.
//
// Integers only: times and durations are int64 nanoseconds and products that
// could overflow are bounded by validation (MaxDuration, MaxHits, MinTime,
// MaxTime) or computed in 128 bits with math/bits.
//
// Bad input anywhere in ringlimit is one error type, InputError (field, value,
// what is allowed), whose Message every front door shows; Limit.Validate,
// ValidateHits, ValidateKey, ValidateCreatedAt and ValidatePenalty are the
// rules node and transport share.
//
// # Adding a seventh algorithm
//
// Each step has a test that fails until it is done (every one iterates Kinds):
//
//  1. Its file here: a state type with Take, and its cases in State (state.go:
//     Take, Merge, Idle, the binary form; plausible.go; packed.go when it has a
//     packed form), with the rules above; its checks in validate.go.
//  2. This package's one name table: a constant after BucketedSlidingWindow,
//     lastKind, and a case in Kind.String (ParseKind, Kinds, KindNames, every
//     flag, help text, message and parser follow). TestKindNameTable.
//  3. The proto enum: Algorithm in transport/proto/ringlimit/v1/ringlimit.proto (then
//     regenerate) and transport/convert.go's kindToWire and kindFromWire.
//     transport's TestEveryKindHasAWireEnum.
//  4. The store's table list: a table in node/store.go's shard (tables, take,
//     prefetchLarge, and the packed forms if any). node's
//     TestEveryKindHasAStoreTable.
//  5. The policy loader: node/policy/load.go's burst rule when the algorithm
//     takes a burst. node/policy's TestEveryKindLoads.
//  6. The Lua side: a script in node/failover/redislimit (scripts.go, the
//     scripts array, SupportedKinds), or the kind added to the explicit
//     unsupported list of TestEveryKindHasAScriptOrIsUnsupported there (the
//     failover limiter then sends it to the cluster).
//  7. The bench bound: a case in cmd/ringlimit/internal/bench's MaxAdmitted.
//     TestEveryKindHasABound.
//  8. The doors parse names through ParseKind and need nothing;
//     TestEveryKindParses in httpapi and resp proves it.
package algo

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// ErrInvalidLimit is returned, wrapped with the offending field and value, for any
// Limit, hits or now value that an algorithm cannot honour exactly: an unknown
// Kind, Limit <= 0, Period <= 0 or above MaxDuration, Burst < 0, a TokenBucket
// Burst < 1, a SlidingWindowLog Limit above MaxLogLimit, a GCRA emission interval
// Period/Limit below 1 ns, products above MaxDuration (GCRA's T*(Burst+1),
// TokenBucket's Burst*Period), hits < 0 or above MaxHits, a now outside
// [MinTime, MaxTime]. Being over the limit is never an error: it is a Decision.
var ErrInvalidLimit = errors.New("algo: invalid limit")

// RetryNever is the Decision.RetryAfter of a check that can never pass, whatever the
// caller waits: its hits exceed the capacity of the limit (hits > Limit for window
// algorithms, hits > Burst for TokenBucket, hits > Burst+1 for GCRA).
const RetryNever time.Duration = -1

// MaxHits is the largest hits value a single check may carry (2^31);
// ValidateHits rejects larger ones. A check's hits are multiplied by an
// interval (GCRA's T, TokenBucket's Period) only when they fit the capacity,
// so those products stay below MaxDuration, which Validate bounds.
const MaxHits int64 = 1 << 31

// MaxLogLimit is the largest Limit a SlidingWindowLog accepts (65,536 hits per
// Period). The log stores one 8-byte timestamp per admitted hit, so a key costs at
// most 512 KiB; larger limits belong to SlidingWindowCounter or GCRA.
const MaxLogLimit int64 = 1 << 16

// MinTime and MaxTime bound the now argument of every Take, in Unix nanoseconds:
// -2^62 and 2^62-1, about the years 1823 and 2116. Together with MaxDuration they
// guarantee that a time plus or minus a duration never overflows int64. State.Take
// returns an error wrapping ErrInvalidLimit for a now outside these bounds; the
// value types assume it.
const (
	MinTime int64 = -1 << 62
	MaxTime int64 = 1<<62 - 1
)

// MaxDuration is the largest Period a Limit may have, and the largest value of
// the durations derived from it: GCRA's tau = T*(Burst+1) and TokenBucket's
// Burst*Period. 2^62-1 ns, about 146 years.
const MaxDuration time.Duration = 1<<62 - 1

// Kind selects the algorithm of a Limit. The zero value is invalid so that an
// unset Kind is an error rather than a silent default.
type Kind uint8

// The six algorithms. Wire and flag names are given by Kind.String.
const (
	// SlidingWindowLog is exact: a hit admitted at t counts while t > now-Period.
	// The state is the log of admitted timestamps (at most Limit entries). The
	// in-memory form of the Redis ZSET recipe (ZADD/ZREMRANGEBYSCORE/ZCARD).
	SlidingWindowLog Kind = iota + 1
	// SlidingWindowCounter estimates the sliding window from two fixed windows
	// (Cloudflare's approach): prev*(Period-elapsed)/Period + cur, integer math.
	// Approximate: the estimate is within prev (the previous window's count) of
	// the exact count, so any window of length Period admits at most 2*Limit;
	// see SlidingWindowCounterState for the full bound.
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
	// BucketedSlidingWindow counts hits per epoch-aligned bucket of
	// Period/WindowBuckets (the Redis HASH recipe: a count per sub-window) and
	// passes a check while the last WindowBuckets+1 buckets hold at most
	// Limit: exact at bucket granularity, never more permissive than
	// SlidingWindowLog, 152 bytes whatever the Limit (see BucketedWindowState).
	BucketedSlidingWindow
)

// lastKind is the last algorithm declared above: Valid, Kinds and the name
// list follow it, so a new algorithm is one constant, one case in String, and
// this line (see the checklist in the package doc).
const lastKind = BucketedSlidingWindow

// String returns the snake_case name used on the wire, in flags, in help texts,
// in policy files and in metrics ("sliding_window_log",
// "sliding_window_counter", "fixed_window", "gcra", "token_bucket",
// "bucketed_sliding_window"), or "kind(N)" for an unknown value. It is the one
// name table of the algorithms: ParseKind, Kinds and KindNames derive from it.
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
	case BucketedSlidingWindow:
		return "bucketed_sliding_window"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is one of the algorithms (SlidingWindowLog..lastKind).
func (k Kind) Valid() bool { return k >= SlidingWindowLog && k <= lastKind }

// Kinds returns every algorithm in declaration order (a new slice each call).
func Kinds() []Kind {
	out := make([]Kind, 0, int(lastKind))
	for k := SlidingWindowLog; k <= lastKind; k++ {
		out = append(out, k)
	}
	return out
}

// KindNames returns the names of Kinds joined by sep, for help texts, usage
// lines and error messages ("sliding_window_log|...|bucketed_sliding_window"
// with sep "|").
func KindNames(sep string) string {
	var b strings.Builder
	for i, k := range Kinds() {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(k.String())
	}
	return b.String()
}

// kindList is the list of names that messages give as allowed.
func kindList() string { return KindNames(", ") }

// ParseKind maps a name produced by Kind.String back to its Kind. For any
// other string it returns an *InputError (field "algorithm") wrapping
// ErrInvalidLimit that lists the names.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds() {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, limitError("algorithm", fmt.Sprintf("%q", s), "must be one of "+kindList())
}

// Limit is the rate-limit policy of a check. The same key may be checked with a
// different Limit over time; every algorithm applies the Limit given with each
// check (as redis-cell does), and changing Kind for a key starts a new state.
// The zero value is invalid (Kind 0); Validate lists every rule.
type Limit struct {
	// Kind selects the algorithm; the zero value is invalid.
	Kind Kind
	// Limit is the number of hits allowed per Period for the window algorithms, and
	// the refill rate (Limit hits per Period) for GCRA and TokenBucket. Must be > 0.
	Limit int64
	// Period is the window length or refill period, in nanoseconds. Must be > 0.
	Period time.Duration
	// Burst is redis-cell's max_burst for GCRA (capacity Burst+1 hits, may be 0)
	// and the bucket capacity in hits for TokenBucket (must be >= 1). Window
	// algorithms ignore it; it must still not be negative.
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

// until returns the time from now to at, for at > now, saturated at
// math.MaxInt64: at-now is below 2^64, so a negative int64 difference has
// wrapped.
func until(at, now int64) time.Duration {
	d := at - now
	if d < 0 {
		d = math.MaxInt64
	}
	return time.Duration(d)
}

// satDur returns u as a Duration saturated at math.MaxInt64.
func satDur(u uint64) time.Duration { return time.Duration(min(u, math.MaxInt64)) }

// delay lengthens the positive durations of d by lag >= 0 ns, saturating: d
// was decided at an effective time lag after the caller's now.
func (d *Decision) delay(lag uint64) {
	if d.RetryAfter > 0 {
		d.RetryAfter = satDur(uint64(d.RetryAfter) + lag)
	}
	if d.ResetAfter > 0 {
		d.ResetAfter = satDur(uint64(d.ResetAfter) + lag)
	}
}
