package algo

import (
	"math"
	"math/bits"
	"time"
)

// WindowBuckets is the number of buckets per Period of a BucketedSlidingWindow:
// the bucket width is w = ceil(Period/WindowBuckets) ns, and a state keeps the
// counts of WindowBuckets+1 buckets.
const WindowBuckets = 16

// BucketedWindowState is the per-key state of the bucketed sliding window, the
// in-memory form of the Redis HASH recipe (HINCRBY on the field of the current
// sub-window, HGETALL or a Lua sum over the fields still in the window, HDEL of
// the old ones): a count of admitted hits per epoch-aligned bucket of width
// w = ceil(Period/WindowBuckets), bucket k = floor(t/w) holding [k*w, (k+1)*w).
// A check at now, in bucket cur, counts the hits of buckets cur-WindowBuckets
// to cur and passes iff that count plus hits <= Limit. The zero value is a fresh
// key. 152 bytes whatever the Limit (the counts are int64: any Limit works,
// 2^32 per Period and beyond).
//
// Exact at bucket granularity: a hit admitted in bucket k counts until bucket
// k+WindowBuckets ends, at (k+WindowBuckets+1)*w. The decisions are exactly
// those of SlidingWindowLog with a Period of WindowBuckets*w fed the same
// checks with every admitted hit stamped at the end of its bucket, (k+1)*w.
//
// Error bound against the exact log (SlidingWindowLog under the same Limit):
// the bucketed count is never below the exact count, since a hit counts at
// least as long as in the log (t+Period <= (k+WindowBuckets+1)*w), and at most
// w+WindowBuckets-1 ns longer. So any window of length Period admits at most
// Limit hits, as with the log (never more permissive); the bucketed window may
// deny a check the log would admit, only while hits admitted in the last
// w+WindowBuckets ns before their expiry in the log still count, which is
// 1/WindowBuckets of the Period (6.25%) plus rounding.
//
// Decision.Limit is Limit; hits > Limit never pass (RetryNever). RetryAfter is
// the exact wait until enough of the oldest buckets expire; ResetAfter the time
// until the newest bucket expires.
//
// Clock going backwards: the latest time the state has seen is the start of
// its newest bucket with admitted hits (head). A check in an earlier bucket is
// decided in that bucket: admitted hits are counted there, and RetryAfter and
// ResetAfter are measured from now to the instants the buckets expire, so they
// include the step. Nothing is credited and nothing is locked out beyond the
// instant the buckets would have expired anyway.
//
// Limit changes: a smaller Limit keeps the counts (Remaining is clamped at 0).
// A Period that gives another bucket width moves every count into the bucket,
// under the new width, holding the end of the newest stored bucket: nothing is
// credited, and the old hits count for the new Period from there.
type BucketedWindowState struct {
	width  int64                    // bucket width (ns) of the counts; 0 in a fresh state
	head   int64                    // index of the newest bucket with hits; its count is > 0 unless all are 0
	counts [WindowBuckets + 1]int64 // counts[k mod (WindowBuckets+1)]: hits of bucket k, head-WindowBuckets <= k <= head
}

// bucketWidth returns ceil(p/WindowBuckets) for p > 0.
func bucketWidth(p int64) int64 { return (p-1)/WindowBuckets + 1 }

// Take applies a check of hits (0 peeks) at now (Unix ns, in [MinTime,
// MaxTime]) under l, counts the hits if allowed, and returns the Decision. It
// assumes l.Validate() and ValidateHits(hits) returned nil (State.Take checks
// them); an unvalidated l may give a meaningless Decision or panic.
func (s *BucketedWindowState) Take(now, hits int64, l Limit) Decision {
	var d Decision
	s.take(&d, now, hits, l)
	return d
}

// take is Take writing the Decision to d.
func (s *BucketedWindowState) take(d *Decision, now, hits int64, l Limit) {
	w := bucketWidth(int64(l.Period))
	if s.width != w {
		c := s.rebucketed(w)
		c.take(d, now, hits, l)
		if d.Allowed && hits > 0 {
			*s = c
		}
		return
	}
	cur := bucketOf(now, w)
	e := cur
	if s.head > cur && s.counts[slot(s.head)] > 0 {
		e = s.head // time never runs backwards inside a state
	}
	c := s.count(e)
	rem := now - cur*w // in [0, w)
	*d = Decision{Limit: l.Limit}
	switch {
	case hits == 0:
		d.Allowed = true
	case hits > l.Limit:
		d.RetryAfter = RetryNever
	case c > l.Limit || hits > l.Limit-c:
		d.RetryAfter = s.retry(e, cur, rem, c+hits-l.Limit)
	default:
		d.Allowed = true
		s.add(e, hits)
		c += hits
	}
	if c < l.Limit {
		d.Remaining = l.Limit - c
	}
	if c > 0 {
		d.ResetAfter = expiry(s.head, cur, rem, w)
	}
}

// slot returns the index in counts of bucket k.
func slot(k int64) int { return int(floorMod(k, WindowBuckets+1)) }

// count returns the hits that count in bucket e: the stored buckets in
// [e-WindowBuckets, e] (stored: [head-WindowBuckets, head]). When e is the
// head (a key checked again within its newest bucket, or a check that moves
// it) every stored bucket counts, and the counts are summed in place; else
// one slot is computed and the rest are walked, wrapping, instead of a
// modulo per bucket.
func (s *BucketedWindowState) count(e int64) int64 {
	var c int64
	if e == s.head {
		// Four independent sums: one chain of 17 dependent adds is what a
		// plain loop costs. (Two's complement addition is associative, so the
		// order cannot change the result.)
		var c0, c1, c2, c3 int64
		for i := 0; i+4 <= len(s.counts); i += 4 {
			c0 += s.counts[i]
			c1 += s.counts[i+1]
			c2 += s.counts[i+2]
			c3 += s.counts[i+3]
		}
		for i := len(s.counts) &^ 3; i < len(s.counts); i++ {
			c0 += s.counts[i]
		}
		return c0 + c1 + c2 + c3
	}
	lo, hi := max(e, s.head)-WindowBuckets, min(e, s.head)
	for k, i := lo, slot(lo); k <= hi; k++ {
		c += s.counts[i]
		if i++; i == len(s.counts) {
			i = 0
		}
	}
	return c
}

// add counts hits in bucket e: the head bucket, or a later one, or any bucket
// of a state that holds no hits.
func (s *BucketedWindowState) add(e, hits int64) {
	switch {
	case s.counts[slot(s.head)] == 0 || e-s.head > WindowBuckets:
		s.counts = [WindowBuckets + 1]int64{}
		s.head = e
	case e > s.head:
		for k := s.head + 1; k <= e; k++ {
			s.counts[slot(k)] = 0
		}
		s.head = e
	}
	s.counts[slot(s.head)] += hits
}

// retry returns the wait from now (bucket cur, rem ns into it) until the
// oldest buckets counted from bucket e have expired enough to free need hits.
func (s *BucketedWindowState) retry(e, cur, rem, need int64) time.Duration {
	var freed int64
	for k, i := e-WindowBuckets, slot(e-WindowBuckets); k <= s.head; k++ {
		if freed += s.counts[i]; freed >= need {
			return expiry(k, cur, rem, s.width)
		}
		if i++; i == len(s.counts) {
			i = 0
		}
	}
	return RetryNever // unreachable: need <= the count
}

// expiry returns the time from now (bucket cur, rem ns into it) until bucket
// k >= cur-WindowBuckets stops counting, at (k+WindowBuckets+1)*w, saturated.
func expiry(k, cur, rem, w int64) time.Duration {
	n := uint64(k-cur) + WindowBuckets + 1 // >= 1
	hi, lo := bits.Mul64(n, uint64(w))
	if hi != 0 || lo-uint64(rem) > math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(lo - uint64(rem))
}

// rebucketed returns s under bucket width w: fresh if s holds no hits, else
// with every count in the bucket under w that holds the end of s's head.
func (s *BucketedWindowState) rebucketed(w int64) BucketedWindowState {
	var total int64
	for _, c := range s.counts {
		total += c
	}
	if s.width == 0 || total == 0 {
		return BucketedWindowState{width: w}
	}
	end := s.head*s.width + (s.width - 1)
	c := BucketedWindowState{width: w, head: bucketOf(end, w)}
	c.counts[slot(c.head)] = total
	return c
}

// bucketOf returns floor(a/b) for b > 0: the bucket of time a at width b.
func bucketOf(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
