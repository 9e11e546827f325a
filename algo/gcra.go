package algo

import "time"

// GCRAState is the per-key state of the GCRA algorithm (generic cell rate
// algorithm, leaky bucket as a meter) with the semantics of redis-cell's
// CL.THROTTLE (github.com/brandur/redis-cell, src/cell/mod.rs and src/lib.rs).
// It is one 8-byte theoretical arrival time (TAT). The zero value is a fresh key
// (full capacity at any now).
//
// With T = Period/Limit (integer ns, rounded down; redis-cell rounds the same
// float64 quotient down, which agrees for every Period below 2^53 ns, ~104 days)
// and tau = T*(Burst+1):
//
//	capacity  = Burst+1
//	new_tat   = max(tat, now) + T*hits
//	limited   = now < new_tat - tau
//	remaining = floor((tau - ttl) / T), ttl = (tat after the check) - now
//	retry     = new_tat - tau - now when limited; RetryNever when hits > Burst+1
//	reset     = ttl
//
// Decision.Limit is Burst+1 and every field equals redis-cell's reply before its
// rounding to seconds (see Decision.CLThrottleReply), with one deliberate
// difference: redis-cell divides (tau - ttl) by T after truncating both to whole
// microseconds; GCRAState divides the exact nanoseconds. They agree whenever T is
// a whole number of microseconds (every CL.THROTTLE whose period*10^6 is a
// multiple of count); otherwise redis-cell can be off by one, above the capacity
// or above what a check would admit, which the Remaining contract forbids.
//
// Clock going backwards: the TAT is absolute, so a step back makes the key more
// restrictive by the step and a clock returning finds the same state (nothing is
// credited). The debt tat-now is capped at tau, the debt of a key drained at now,
// so a key is never locked out for longer than a full drain; the cap is stored
// even by a denied check. The same cap applies when Burst or Period/Limit shrink
// between checks: redis-cell would keep the larger debt.
type GCRAState struct {
	// tat is the TAT minus MinTime, in ns, so that the zero value is earlier than
	// any valid now and means "no debt".
	tat uint64
}

// Take applies a check of hits (0 peeks) at now (Unix ns, in [MinTime,
// MaxTime]) under l, records the hits if allowed, and returns the Decision. It
// assumes l.Validate() and ValidateHits(hits) returned nil (State.Take checks
// them); an unvalidated l may give a meaningless Decision or panic (a zero Limit
// divides by zero).
func (s *GCRAState) Take(now, hits int64, l Limit) Decision {
	t := int64(l.Period) / l.Limit
	var d Decision
	s.take(&d, now, hits, l.Burst+1, t, t*(l.Burst+1))
	return d
}

// take is Take with the derived parameters: capacity = Burst+1, emission
// interval t (ns) and tau = t*capacity (ns). It writes the Decision to d (the
// hot paths fill a *Decision rather than return one: Decision has too many
// fields for the compiler to keep in registers, and copying it between frames
// costs more than the algorithm).
func (s *GCRAState) take(d *Decision, now, hits, capacity, t, tau int64) {
	n := uint64(now - MinTime)
	tat := s.tat
	if tat < n {
		tat = n
	} else if tat-n > uint64(tau) {
		tat = n + uint64(tau) // clock went back, or a smaller limit: at most drained
		s.tat = tat
	}
	ttl := int64(tat - n) // in [0, tau]
	*d = Decision{Limit: capacity}
	switch {
	case hits == 0:
		d.Allowed = true
	case hits > capacity:
		d.RetryAfter = RetryNever
	case ttl+t*hits > tau:
		d.RetryAfter = time.Duration(ttl + t*hits - tau)
	default:
		d.Allowed = true
		if hits > 0 {
			ttl += t * hits
			s.tat = n + uint64(ttl)
		}
	}
	d.Remaining = (tau - ttl) / t
	d.ResetAfter = time.Duration(ttl)
}

// idle reports whether s is back to full capacity at now.
func (s GCRAState) idle(now int64) bool { return s.tat <= uint64(now-MinTime) }
