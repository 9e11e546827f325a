package algo

import "time"

// FixedWindowState is the per-key state of a fixed-window counter, the
// in-memory form of Redis's INCR+EXPIRE recipe: at most Limit hits per window,
// windows aligned to the Unix epoch, the window of now starting at
// floor(now/Period)*Period (rounded toward minus infinity, also for now < 0).
// The state is the start of the current window (ns) and the hits admitted in it.
// The zero value is a fresh key. 16 bytes. Decision.Limit is Limit; hits > Limit
// never pass (RetryNever); a denied check waits for the next window.
//
// Clock going backwards: a now in an earlier window moves the state to that
// window keeping its count (stored even by a denied check), so nothing is
// credited and the key is free again at the end of that earlier window, within
// one Period. A different Period between checks is handled the same way: a window
// start later than the stored one starts a new count, an earlier one keeps it.
type FixedWindowState struct {
	start int64 // Unix ns of the current window's start
	count int64 // hits admitted in it
}

// Take applies a check of hits (0 peeks) at now (Unix ns, in [MinTime,
// MaxTime]) under l, counts the hits if allowed, and returns the Decision. It
// assumes l.Validate() and ValidateHits(hits) returned nil (State.Take checks
// them); an unvalidated l may give a meaningless Decision or panic.
func (s *FixedWindowState) Take(now, hits int64, l Limit) Decision {
	var d Decision
	s.take(&d, now, floorMod(now, int64(l.Period)), hits, l)
	return d
}

// take is Take with off = floorMod(now, Period) computed by the caller,
// writing the Decision to d.
func (s *FixedWindowState) take(d *Decision, now, off, hits int64, l Limit) {
	p := int64(l.Period)
	start := now - off
	if start > s.start {
		s.start, s.count = start, 0
	} else if start < s.start {
		s.start = start
	}
	*d = Decision{Limit: l.Limit}
	switch {
	case hits == 0:
		d.Allowed = true
	case hits > l.Limit:
		d.RetryAfter = RetryNever
	case hits > l.Limit-s.count:
		d.RetryAfter = time.Duration(p - off)
	default:
		d.Allowed = true
		s.count += hits
	}
	if s.count > 0 {
		d.Remaining = max(0, l.Limit-s.count)
		d.ResetAfter = time.Duration(p - off)
	} else {
		d.Remaining = l.Limit
	}
}

// idle reports whether no hit counts against the window of now.
func (s FixedWindowState) idle(now int64, l Limit) bool {
	return s.count == 0 || now-floorMod(now, int64(l.Period)) > s.start
}

// floorMod returns a mod p in [0, p) for p > 0, also for a < 0.
func floorMod(a, p int64) int64 {
	m := a % p
	if m < 0 {
		m += p
	}
	return m
}
