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
// refill is Limit units per ns), and the time it was last brought up to date.
// Nothing is rounded except the reported values: Remaining is the whole number
// of tokens in the bucket (rounded down), RetryAfter and ResetAfter are rounded
// up to the next ns. Decision.Limit is Burst. hits > Burst never pass
// (RetryNever).
//
// Clock going backwards: the refill of the step back is taken back (the missing
// tokens grow by Limit*step/Period), so a clock that returns finds the bucket it
// left and nothing is credited twice; the missing tokens are capped at Burst (an
// empty bucket at the earlier now), so the key is never locked out for longer
// than a full refill. A backwards step is stored even by a denied check. A
// smaller Burst between checks caps the missing tokens at the new Burst (also
// stored by any check, so the key never waits out the old debt); a
// different Period reinterprets the stored token*ns amount in the new Period
// (Limit alone may change freely).
type TokenBucketState struct {
	// debt is (Burst - tokens) * Period at last, in token*ns, >= 0.
	debt int64
	// last is the now of the last update minus MinTime, in ns; the zero value
	// is earlier than any valid now.
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
	full := l.Burst * p
	debt := s.debt
	back := n < s.last
	if !back {
		if debt > 0 {
			hi, lo := bits.Mul64(uint64(l.Limit), n-s.last)
			if hi != 0 || lo >= uint64(debt) {
				debt = 0
			} else {
				debt -= int64(lo)
			}
		}
	} else {
		hi, lo := bits.Mul64(uint64(l.Limit), s.last-n)
		if hi != 0 || lo >= uint64(full) {
			debt = full
		} else {
			debt += int64(lo) // < 2*MaxDuration: no overflow; capped below
		}
	}
	store := back // a step back, or a cap below, must be kept even if denied
	if debt > full {
		debt, store = full, true
	}
	*d = Decision{Limit: l.Burst}
	switch {
	case hits == 0:
		d.Allowed = true
	case hits > l.Burst:
		d.RetryAfter = RetryNever
	case debt+hits*p > full:
		d.RetryAfter = time.Duration(ceilDiv(debt+hits*p-full, l.Limit))
	default:
		d.Allowed = true
		debt += hits * p
	}
	if store || (d.Allowed && hits > 0) {
		s.debt, s.last = debt, n
	}
	d.Remaining = (full - debt) / p
	d.ResetAfter = time.Duration(ceilDiv(debt, l.Limit))
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
