package algo

// SlidingWindowLogState is the per-key state of the exact sliding window log,
// the in-memory form of Redis's ZSET recipe (ZADD, ZREMRANGEBYSCORE, ZCARD): a
// ring buffer of the timestamps (Unix ns) of admitted hits, oldest first. A hit
// admitted at t counts while t > now-Period; a check of hits passes iff the hits
// that count plus hits <= Limit. The zero value is a fresh key.
//
// Cost. Each admitted hit is stored once (8 bytes) and dropped once, by the
// first admitted check after it expires: amortized O(1) per hit, plus a binary
// search, O(log n), for the hits that count. After an admitted check the buffer
// holds at most that check's Limit entries; it grows by doubling up to Limit and
// shrinks to twice the entries when less than a quarter full, so it uses at most
// 8*max(minLogCap, 4*stored) bytes and never more than 8*Limit (at most 512 KiB,
// see MaxLogLimit), plus 32 bytes for this header. Denied checks and peeks
// change nothing, not even the buffer.
//
// Decision.Limit is Limit; hits > Limit never pass (RetryNever). RetryAfter is
// the exact wait until enough of the oldest hits expire; ResetAfter the time
// until the newest one expires.
//
// Limit changes: when Limit shrinks below the number of hits that count, they
// all keep counting (Remaining is clamped at 0) and the key waits until enough
// of them expire; nothing is dropped, so a Limit that grows back finds them.
//
// Clock going backwards: the latest time the log has seen is its newest entry.
// A check at an earlier now is decided at that time: the hits that count are
// those that count then, an admitted hit is recorded at that time (the log stays
// in order), and RetryAfter and ResetAfter are measured from now to the instants
// the hits expire, so they include the step. Nothing is credited (no hit expires
// earlier than it would have) and the key frees up when its hits expire, as it
// would have. A denied check or a peek stores nothing.
type SlidingWindowLogState struct {
	buf  []int64 // ring buffer; len(buf) is its capacity
	head int32   // index of the oldest entry
	n    int32   // number of entries
}

// minLogCap is the smallest buffer the log allocates (unless Limit is smaller).
const minLogCap = 4

// Take applies a check of hits (0 peeks) at now (Unix ns, in [MinTime,
// MaxTime]) under l, records one timestamp per hit if allowed, and returns the
// Decision. It assumes l.Validate() and ValidateHits(hits) returned nil
// (State.Take checks them); an unvalidated l may give a meaningless Decision or
// panic.
func (s *SlidingWindowLogState) Take(now, hits int64, l Limit) Decision {
	var d Decision
	s.take(&d, now, hits, l)
	return d
}

// take is Take writing the Decision to d.
func (s *SlidingWindowLogState) take(d *Decision, now, hits int64, l Limit) {
	p := int64(l.Period)
	eff := now
	if s.n > 0 {
		eff = max(now, s.at(s.n-1)) // time never runs backwards inside a state
	}
	lo := s.first(eff - p)
	count := int64(s.n - lo) // may exceed Limit after Limit shrank
	*d = Decision{Limit: l.Limit}
	switch {
	case hits == 0:
		d.Allowed = true
	case hits > l.Limit:
		d.RetryAfter = RetryNever
	case hits > l.Limit-count:
		// The (count+hits-Limit)-th oldest hit that counts must expire first.
		d.RetryAfter = until(s.at(lo+int32(count+hits-l.Limit-1))+p, now)
	default:
		d.Allowed = true
		s.drop(lo)
		s.fit(int32(l.Limit))
		s.push(eff, int32(hits), int32(l.Limit))
		count += hits
	}
	d.Remaining = max(0, l.Limit-count)
	if count > 0 {
		d.ResetAfter = until(s.at(s.n-1)+p, now)
	}
}

// fit shrinks a buffer larger than limit or sparse (less than a quarter full).
func (s *SlidingWindowLogState) fit(limit int32) {
	switch c := int32(len(s.buf)); {
	case c > limit:
		s.resize(min(limit, max(2*s.n, minLogCap)))
	case c > minLogCap && s.n < c/4:
		s.resize(max(2*s.n, minLogCap))
	}
}

// peek returns the Decision of a check of 0 hits at now, without changing s.
func (s *SlidingWindowLogState) peek(now int64, l Limit) Decision {
	var d Decision
	s.take(&d, now, 0, l)
	return d
}

// first returns the index of the oldest entry later than cut: the entries
// from it on count.
func (s *SlidingWindowLogState) first(cut int64) int32 {
	// Usually none or a few have expired since the last admitted check; a
	// binary search bounds the rest (denied checks drop nothing).
	lo := int32(0)
	for ; lo < min(s.n, 4); lo++ {
		if s.at(lo) > cut {
			return lo
		}
	}
	hi := s.n
	for lo < hi {
		m := int32(uint32(lo+hi) >> 1)
		if s.at(m) <= cut {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (s *SlidingWindowLogState) idx(i int32) int32 {
	j := s.head + i
	if c := int32(len(s.buf)); j >= c {
		j -= c
	}
	return j
}

func (s *SlidingWindowLogState) at(i int32) int64 { return s.buf[s.idx(i)] }

// drop removes the k oldest entries.
func (s *SlidingWindowLogState) drop(k int32) {
	s.head = s.idx(k)
	s.n -= k
	if s.n == 0 {
		s.head = 0
	}
}

// push appends k copies of t, growing the buffer (at most to limit).
func (s *SlidingWindowLogState) push(t int64, k, limit int32) {
	if need := s.n + k; need > int32(len(s.buf)) {
		s.resize(min(max(2*int32(len(s.buf)), need, minLogCap), limit))
	}
	for range k {
		s.buf[s.idx(s.n)] = t
		s.n++
	}
}

// resize moves the entries, oldest first, to a new buffer of capacity c >= n.
func (s *SlidingWindowLogState) resize(c int32) {
	if c == int32(len(s.buf)) {
		return
	}
	var nb []int64
	if c > 0 {
		nb = make([]int64, c)
	}
	for i := range s.n {
		nb[i] = s.at(i)
	}
	s.buf, s.head = nb, 0
}

// clone returns a deep copy of s.
func (s *SlidingWindowLogState) clone() *SlidingWindowLogState {
	c := &SlidingWindowLogState{}
	if s.n > 0 {
		c.buf = make([]int64, s.n)
		for i := range s.n {
			c.buf[i] = s.at(i)
		}
		c.n = s.n
	}
	return c
}
