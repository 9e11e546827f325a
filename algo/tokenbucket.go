package algo

import (
	"math/bits"
	"time"
)

// TokenBucketState is the per-key state of the token bucket of Guava's
// RateLimiter and golang.org/x/time/rate: a bucket of capacity Burst tokens that
// starts full and refills continuously at Limit tokens per Period; a check of
// hits passes iff the bucket holds at least hits tokens, and takes them. The
// zero value is a fresh, full bucket. 16 bytes.
//
// The arithmetic is exact: the state is the number of tokens missing from a full
// bucket scaled by Period (token*ns units, so one token is Period units and the
// refill is Limit units per ns), and the time of the last refill (the now, or
// effective time, of the last admitted check). Nothing is rounded except the reported values: Remaining is the whole number
// of tokens in the bucket (rounded down), RetryAfter and ResetAfter are rounded
// up to the next ns. Decision.Limit is Burst. hits > Burst never pass
// (RetryNever).
//
// Clock going backwards: the latest time the bucket has seen is its last
// refill time, the now (or effective time) of the last admitted check. A check
// at an earlier now is decided at that time: no refill is taken back or given
// (the bucket holds what it held then), the state is not changed unless the
// check admits (then its tokens are taken at that time), and RetryAfter and
// ResetAfter are measured from now to the instants the bucket refills at, so
// they include the step. A clock that steps back and returns finds the bucket
// it left and nothing is credited twice; a bucket that was full at its latest
// time is full for the earlier now too.
//
// Limit changes: a different Period reinterprets the stored token*ns amount in
// the new Period (Limit alone may change freely). A smaller Burst leaves the
// missing tokens as they are, even when they exceed the new Burst: the key waits
// until the bucket would hold the hits under the old debt (at most the old
// Burst's full refill), and Remaining is clamped at 0 meanwhile; nothing is
// capped or stored by a denied check.
type TokenBucketState struct {
	// debt is (Burst - tokens) * Period at last, in token*ns, >= 0 (above
	// Burst*Period only for a Burst smaller than the one it was taken under).
	debt int64
	// last is the effective time of the last admitted check minus MinTime, in
	// ns: the latest time the bucket has seen. The zero value is earlier than
	// any valid now.
	last uint64
}

// Take applies a check of hits (0 peeks) at now (Unix ns, in [MinTime,
// MaxTime]) under l, takes the tokens if allowed, and returns the Decision. It
// assumes l.Validate() and ValidateHits(hits) returned nil (State.Take checks
// them); an unvalidated l may give a meaningless Decision or panic.
func (s *TokenBucketState) Take(now, hits int64, l Limit) Decision {
	var d Decision
	s.take(&d, now, hits, l)
	return d
}

// take is Take writing the Decision to d.
func (s *TokenBucketState) take(d *Decision, now, hits int64, l Limit) {
	p := int64(l.Period)
	n := uint64(now - MinTime)
	var lag uint64
	if n < s.last { // time never runs backwards inside a state
		lag, n = s.last-n, s.last
	}
	full := l.Burst * p
	debt := s.debt
	if debt > 0 {
		hi, lo := bits.Mul64(uint64(l.Limit), n-s.last)
		if hi != 0 || lo >= uint64(debt) {
			debt = 0
		} else {
			debt -= int64(lo)
		}
	}
	*d = Decision{Limit: l.Burst}
	switch {
	case hits == 0:
		d.Allowed = true
	case hits > l.Burst:
		d.RetryAfter = RetryNever
	case debt > full-hits*p: // debt may exceed full after Burst shrank
		d.RetryAfter = time.Duration(ceilDiv(debt-(full-hits*p), l.Limit))
	default:
		d.Allowed = true
		debt += hits * p
		s.debt, s.last = debt, n
	}
	if debt < full {
		d.Remaining = (full - debt) / p
	}
	d.ResetAfter = time.Duration(ceilDiv(debt, l.Limit))
	if lag != 0 {
		d.delay(lag)
	}
}

// idle reports whether the bucket is full at now.
func (s TokenBucketState) idle(now int64, l Limit) bool {
	return s.Take(now, 0, l).ResetAfter == 0
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if q*b != a {
		q++
	}
	return q
}
