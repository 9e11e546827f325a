package algo

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
//	remaining = floor((tau - ttl) / T), ttl = (tat after the check) - now,
//	            0 when ttl > tau
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
// Clock going backwards: the TAT is absolute and never capped, so a check at a
// now earlier than a previous one sees the TAT further away by the step: it is
// decided as redis-cell decides it at that now (never more permissive than the
// same check at any later time). When now < new_tat - tau it is denied with the
// honest RetryAfter = new_tat - tau - now (the step plus the normal wait), and
// Remaining is clamped at 0 in the Decision when ttl > tau (ResetAfter is ttl).
// Nothing is stored by a denied check or a peek, so a clock that returns finds
// exactly the state it left, and nothing is credited: the wait is bounded by
// the step. GCRA does not record the latest time it has seen (its state stays
// the 8-byte TAT), so its bound holds on each check's own now: for admitted
// checks i before j in the sequence, the hits admitted by checks i..j are at
// most (now_j - now_i + tau) / T. (A check at an earlier now whose TAT has
// already passed then is admitted from that now, as redis-cell would; measured
// on the later clock that is at most step/T hits more than the rate.)
//
// Limit changes: a smaller Burst or a larger T leaves the TAT as it is (as
// redis-cell does); the key waits out the larger debt, at most the old tau, and
// Remaining is clamped at 0 meanwhile.
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
	var ttl uint64 // TAT - now; above tau after a step back or a smaller limit
	if s.tat > n {
		ttl = s.tat - n
	}
	*d = Decision{Limit: capacity}
	switch {
	case hits == 0:
		d.Allowed = true
	case hits > capacity:
		d.RetryAfter = RetryNever
	case ttl > uint64(tau-t*hits): // now < new_tat - tau
		d.RetryAfter = satDur(ttl - uint64(tau-t*hits))
	default:
		d.Allowed = true
		ttl += uint64(t * hits)
		s.tat = n + ttl
	}
	if ttl < uint64(tau) {
		d.Remaining = (tau - int64(ttl)) / t
	}
	d.ResetAfter = satDur(ttl)
}

// idle reports whether s is back to full capacity at now.
func (s GCRAState) idle(now int64) bool { return s.tat <= uint64(now-MinTime) }
