package algo

// FixedWindowState is the per-key state of a fixed-window counter, the
// in-memory form of Redis's INCR+EXPIRE recipe: at most Limit hits per window,
// windows aligned to the Unix epoch, the window of now starting at
// floor(now/Period)*Period (rounded toward minus infinity, also for now < 0).
// The state is the start of the current window (ns) and the hits admitted in it.
// The zero value is a fresh key. 16 bytes. Decision.Limit is Limit; hits > Limit
// never pass (RetryNever); a denied check waits for the next window.
//
// Clock going backwards: the latest time the state has seen is the start of its
// window (the window of the last admitted check). A now in an earlier window is
// decided in the stored window, as at its start: its count is kept and nothing
// is stored unless the check admits (then the hits count in the stored window).
// RetryAfter and ResetAfter are measured from now to the end of the stored
// window, so they include the step. Nothing is credited (a clock oscillating
// across a window edge admits at most Limit per window) and the key frees up
// when the stored window ends, as it would have.
//
// Limit changes: a smaller Limit keeps the count (Remaining is clamped at 0);
// a different Period is handled like the clock: a now whose window starts after
// the stored one starts a new count, one whose window starts before it is
// decided in the window of max(now, stored start), which contains the stored
// start, keeping the count.
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
	start, count := now-off, s.count
	if start != s.start {
		if start > s.start || count == 0 {
			count = 0 // a new window (or a fresh state)
		} else {
			// Before the stored window (the clock stepped back, or a longer
			// Period): time never runs backwards inside a state.
			eff := max(now, s.start)
			start = eff - floorMod(eff, p) // <= s.start < start+p
		}
	}
	end := until(start+p, now)
	*d = Decision{Limit: l.Limit}
	switch {
	case hits == 0:
		d.Allowed = true
	case hits > l.Limit:
		d.RetryAfter = RetryNever
	case hits > l.Limit-count:
		d.RetryAfter = end
	default:
		d.Allowed = true
		count += hits
		s.start, s.count = start, count
	}
	if count > 0 {
		d.Remaining = max(0, l.Limit-count)
		d.ResetAfter = end
	} else {
		d.Remaining = l.Limit
	}
}

// idle reports whether no hit counts against the window of now or any later
// one.
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
