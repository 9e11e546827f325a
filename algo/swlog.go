package algo

import "time"

// SlidingWindowLogState is the per-key state of the exact sliding window log,
// the in-memory form of Redis's ZSET recipe (ZADD, ZREMRANGEBYSCORE, ZCARD): a
// ring buffer of the timestamps (Unix ns) of admitted hits, oldest first. A hit
// admitted at t counts while t > now-Period; a check of hits passes iff the hits
// that count plus hits <= Limit. The zero value is a fresh key.
//
// Cost. Each admitted hit is stored once (8 bytes) and dropped once, when it
// expires: amortized O(1) per hit. The buffer never holds more than Limit
// entries; it grows by doubling up to Limit and shrinks to twice the entries
// when less than a quarter full, so after a check it uses at most
// 8*max(minLogCap, 4*stored) bytes and never more than
// 8*Limit (at most 512 KiB, see MaxLogLimit), plus 32 bytes for this header.
//
// Decision.Limit is Limit; hits > Limit never pass (RetryNever). RetryAfter is
// the exact wait until enough of the oldest hits expire; ResetAfter the time
// until the newest one expires.
//
// Limit changes: when Limit shrinks below the number of hits that count, the
// oldest are dropped and the newest Limit kept. That changes no decision under
// the new Limit (the dropped hits are the first to expire and a full log denies
// anyway); if Limit grows back within Period the dropped hits no longer count.
//
// Clock going backwards: timestamps later than now are moved back to now (stored
// even by a denied check), so they count for one more Period from the earlier
// now, no longer: nothing is credited (recorded hits never expire earlier than
// they would have on the later clock, except the part of their life beyond now
// that the move cuts) and the key is not locked out for the length of the step.
// The move costs O(number of hits moved), paid only when the clock goes back.
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
	s.normalize(now, p, l.Limit)
	count := int64(s.n)
	*d = Decision{Limit: l.Limit}
	switch {
	case hits == 0:
		d.Allowed = true
	case hits > l.Limit:
		d.RetryAfter = RetryNever
	case hits > l.Limit-count:
		// The (count+hits-Limit)-th oldest hit must expire first.
		d.RetryAfter = time.Duration(s.at(int32(count+hits-l.Limit-1)) + p - now)
	default:
		d.Allowed = true
		s.push(now, int32(hits), int32(l.Limit))
	}
	d.Remaining = l.Limit - int64(s.n)
	if s.n > 0 {
		d.ResetAfter = time.Duration(s.at(s.n-1) + p - now)
	}
}

// normalize applies the clock rule, drops expired hits and hits beyond limit,
// and shrinks a sparse buffer. It changes no decision at now or later.
func (s *SlidingWindowLogState) normalize(now, p, limit int64) {
	for i := s.n - 1; i >= 0; i-- { // clock went back: future hits move to now
		j := s.idx(i)
		if s.buf[j] <= now {
			break
		}
		s.buf[j] = now
	}
	cut := now - p
	for s.n > 0 && s.buf[s.head] <= cut {
		s.drop(1)
	}
	if int64(s.n) > limit {
		s.drop(s.n - int32(limit))
	}
	switch c := int32(len(s.buf)); {
	case int64(c) > limit:
		s.resize(min(int32(limit), max(2*s.n, minLogCap)))
	case c > minLogCap && s.n < c/4:
		s.resize(max(2*s.n, minLogCap))
	}
}

// peek returns the Decision of a check of 0 hits at now, without changing s.
func (s *SlidingWindowLogState) peek(now int64, l Limit) Decision {
	p := int64(l.Period)
	count := s.live(now, p, l.Limit)
	d := Decision{Allowed: true, Limit: l.Limit, Remaining: l.Limit - count}
	if count > 0 {
		d.ResetAfter = time.Duration(min(s.at(s.n-1), now) + p - now)
	}
	return d
}

// live returns the number of hits that count at now, without changing s.
func (s *SlidingWindowLogState) live(now, p, limit int64) int64 {
	cut := now - p
	lo, hi := int32(0), s.n // first entry > cut, by binary search
	for lo < hi {
		m := int32(uint32(lo+hi) >> 1)
		if s.at(m) <= cut {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return min(int64(s.n-lo), limit)
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
