package algo

import (
	"math/bits"
	"time"
)

// SlidingWindowCounterState is the per-key state of the sliding window counter
// described in Cloudflare's "How we built rate limiting capable of scaling to
// millions of domains": two epoch-aligned windows of length Period, the hits
// admitted in the previous one (prev) and in the current one (cur), and an
// estimate of the hits in the sliding window (now-Period, now]
//
//	E = floor(prev*(Period-elapsed)/Period) + cur,  elapsed = now - start of cur
//
// computed exactly in 128-bit integers. A check of hits passes iff E+hits <=
// Limit; Remaining is Limit-E (at least 0). The zero value is a fresh key.
// 24 bytes. Decision.Limit is Limit; hits > Limit never pass (RetryNever).
// RetryAfter is the exact wait until E+hits <= Limit; ResetAfter the exact time
// until E is 0 and stays 0 (the state is then equivalent to a fresh one).
//
// Error bound. E differs from Cloudflare's real-valued estimate by less than one
// hit (E <= real < E+1), and from the exact count C of hits admitted in
// (now-Period, now] (what SlidingWindowLog counts) by at most prev, the count of
// the previous window: cur <= C <= cur+prev and cur <= E <= cur+prev, so
// |E-C| <= prev <= Limit. Consequences: every aligned window admits at most
// Limit hits, any window of length Period at most 2*Limit (and close to 2*Limit
// is reachable when the previous window's hits all came at its very end); it may
// also deny while C+hits <= Limit when the previous window's hits came early.
// E equals C, in expectation, when the previous window's hits were spread
// uniformly, Cloudflare's working assumption (they measured 0.003% of requests
// wrongly allowed or limited on real traffic).
//
// Clock going backwards: the latest time the state has seen is the start of its
// current window (the window of the last admitted check). A now before it is
// decided as at that start, with both counts kept (the estimate there is
// prev+cur, the most the window ever weighs): nothing is stored unless the check
// admits (then in the stored window), and RetryAfter and ResetAfter are measured
// from now, so they include the step. Nothing is credited (a clock oscillating
// across a window edge admits at most Limit per window) and the counts fade as
// they would have from the stored window.
//
// Limit changes: a smaller Limit keeps the counts (Remaining is clamped at 0). A
// different Period: a window start later than the stored one by at most Period
// shifts cur into prev, later still clears both; a window start before the
// stored one (a longer Period, the stored start inside the window of now)
// keeps both counts in the window of now.
type SlidingWindowCounterState struct {
	start int64 // Unix ns of the current window's start
	prev  int64 // hits admitted in [start-Period, start)
	cur   int64 // hits admitted in [start, start+Period)
}

// Take applies a check of hits (0 peeks) at now (Unix ns, in [MinTime,
// MaxTime]) under l, counts the hits if allowed, and returns the Decision. It
// assumes l.Validate() and ValidateHits(hits) returned nil (State.Take checks
// them); an unvalidated l may give a meaningless Decision or panic.
func (s *SlidingWindowCounterState) Take(now, hits int64, l Limit) Decision {
	var d Decision
	s.take(&d, now, hits, l)
	return d
}

// take is Take writing the Decision to d.
func (s *SlidingWindowCounterState) take(d *Decision, now, hits int64, l Limit) {
	p := int64(l.Period)
	w, eff := *s, now
	if now < w.start && w.prev|w.cur != 0 {
		eff = w.start // time never runs backwards inside a state
	}
	e := floorMod(eff, p)
	w.advance(eff-e, p)
	est := w.estimate(e, p) // uint64: prev and cur are each < 2^63
	lim := uint64(l.Limit)
	*d = Decision{Limit: l.Limit}
	switch {
	case hits == 0:
		d.Allowed = true
	case hits > l.Limit:
		d.RetryAfter = RetryNever
	case est > lim || uint64(hits) > lim-est:
		d.RetryAfter = time.Duration(w.retry(e, p, hits, l.Limit))
	default:
		d.Allowed = true
		w.cur += hits
		est += uint64(hits)
		*s = w
	}
	if est < lim {
		d.Remaining = int64(lim - est)
	}
	d.ResetAfter = time.Duration(w.reset(e, p))
	if eff != now {
		d.delay(uint64(eff - now))
	}
}

// advance moves the state to the window starting at start (aligned, Period p).
func (s *SlidingWindowCounterState) advance(start, p int64) {
	switch {
	case start == s.start:
	case start < s.start:
		s.start = start
	case uint64(start)-uint64(s.start) <= uint64(p):
		s.start, s.prev, s.cur = start, s.cur, 0
	default:
		s.start, s.prev, s.cur = start, 0, 0
	}
}

// estimate returns E at elapsed e in the current window.
func (s *SlidingWindowCounterState) estimate(e, p int64) uint64 {
	return weighted(s.prev, p-e, p) + uint64(s.cur)
}

// weighted returns floor(c*w/p) for 0 <= c, 0 <= w <= p, p > 0.
func weighted(c, w, p int64) uint64 {
	if c == 0 || w == 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(c), uint64(w))
	q, _ := bits.Div64(hi, lo, uint64(p)) // hi < p since w <= p
	return q
}

// fadeAt returns the elapsed time into a window, in [1, p], from which a count
// c >= 1 of the previous window weighs floor(c*(p-e)/p) <= r, for 0 <= r < c:
// e >= p - ceil((r+1)*p/c) + 1.
func fadeAt(c, r, p int64) int64 {
	hi, lo := bits.Mul64(uint64(r+1), uint64(p))
	q, rem := bits.Div64(hi, lo, uint64(c)) // (r+1)*p/c <= p: fits
	if rem != 0 {
		q++
	}
	return p - int64(q) + 1
}

// retry returns the exact wait from elapsed e until E+hits <= limit, for a
// check that is denied now and 0 < hits <= limit.
func (s *SlidingWindowCounterState) retry(e, p, hits, limit int64) int64 {
	if r := limit - hits - s.cur; r >= 0 {
		// Within this window (or at its end): prev must fade to r. Denied now
		// means floor(prev*(p-e)/p) > r, so prev > r.
		return fadeAt(s.prev, r, p) - e
	}
	// Next window: cur becomes prev and must fade to limit-hits < cur.
	return p - e + fadeAt(s.cur, limit-hits, p)
}

// reset returns the time from elapsed e until E is 0 and stays 0.
func (s *SlidingWindowCounterState) reset(e, p int64) int64 {
	if s.cur > 0 {
		return p - e + fadeAt(s.cur, 0, p)
	}
	if s.prev > 0 {
		return max(0, fadeAt(s.prev, 0, p)-e)
	}
	return 0
}

// idle reports whether E is 0 at now (or the effective time) and stays 0.
func (s SlidingWindowCounterState) idle(now int64, l Limit) bool {
	var d Decision
	s.take(&d, now, 0, l)
	return d.ResetAfter == 0
}
