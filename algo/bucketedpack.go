package algo

// BucketedPackedWords is how many int64 words PackBucketed writes: a
// BucketedSlidingWindow state whose hits all sit in one bucket kept as its
// bucket width (ns), the index of that bucket and its count, instead of the 17
// counts of BucketedWindowState (152 bytes). A key checked in bursts shorter
// than a bucket (Period/WindowBuckets) and then left alone for a Period, the
// usual key among tens of millions, never needs more; this is the compact
// encoding that Redis's HASH recipe gets from a hash with one field.
const BucketedPackedWords = 3

// PackBucketed writes s into w[:BucketedPackedWords] and returns true when s is
// a BucketedSlidingWindow State whose admitted hits all sit in its newest
// bucket, or that holds none; UnpackBucketed reads it back exactly (the same
// width, newest bucket and counts, so every later Decision is the same). A
// fresh State of that Kind packs as three zeros. It returns false and leaves w
// alone for a State with hits in two or more buckets, or of another Kind: keep
// that one whole. It panics if w is shorter than BucketedPackedWords.
func (s *State) PackBucketed(w []int64) bool {
	if s.kind != BucketedSlidingWindow {
		return false
	}
	_ = w[BucketedPackedWords-1]
	b := s.bw
	if b == nil {
		w[0], w[1], w[2] = 0, 0, 0
		return true
	}
	h := slot(b.head)
	for i, c := range b.counts {
		if c != 0 && i != h {
			return false
		}
	}
	w[0], w[1], w[2] = b.width, b.head, b.counts[h]
	return true
}

// UnpackBucketed returns the BucketedSlidingWindow State that PackBucketed wrote
// to w, with its buckets in *buf, which it overwrites: the State refers to buf
// (a Take changes buf in place) until a Merge or an assignment replaces it, so
// buf must outlive every use of the State, and a State to keep beyond buf's
// next use must be a Clone. A caller that unpacks under a lock can keep one buf
// for every key it guards and unpack without allocating. w must come from
// PackBucketed: it is not validated (use MarshalBinary for state that crosses
// a trust boundary).
func UnpackBucketed(w []int64, buf *BucketedWindowState) State {
	_ = w[BucketedPackedWords-1]
	*buf = BucketedWindowState{width: w[0], head: w[1]}
	buf.counts[slot(w[1])] = w[2]
	return State{kind: BucketedSlidingWindow, bw: buf}
}

// TakeBucketedPacked is State.TakeInto on the BucketedSlidingWindow state that
// PackBucketed wrote to w, deciding on the three words without unpacking them:
// it writes the Decision to *d and, when the check is admitted with hits, the
// new state to w. It returns ok false, and leaves w and *d alone, when l is not
// a BucketedSlidingWindow Limit or when the check would be admitted into a
// later bucket while w's bucket still counts: the result would hold hits in
// two buckets, which do not pack; the caller then takes the check on
// UnpackBucketed(w) instead. The Decision and the state are those of the
// unpacked State (TestTakeBucketedPackedMatchesTakeInto). It returns the
// error of TakeInto for an invalid Limit, hits or now (ErrInvalidLimit), with
// w and *d unchanged.
func TakeBucketedPacked(w []int64, d *Decision, now, hits int64, l Limit) (ok bool, err error) {
	if ok, err := packedCheck(now, hits, l, BucketedSlidingWindow); !ok {
		return false, err
	}
	_ = w[BucketedPackedWords-1]
	width, head, cnt := w[0], w[1], w[2]
	wd := bucketWidth(int64(l.Period))
	if width != wd {
		// BucketedWindowState.rebucketed, for one bucket: the hits move to the
		// bucket under wd that holds the end of head; none left is a fresh state.
		if width == 0 || cnt == 0 {
			head, cnt = 0, 0
		} else {
			head = bucketOf(head*width+(width-1), wd)
		}
	}
	cur := bucketOf(now, wd)
	e := cur
	if head > cur && cnt > 0 {
		e = head // time never runs backwards inside a state
	}
	var c int64 // the hits that count in bucket e: head's, while it is in [e-WindowBuckets, e]
	if head <= e && e-head <= WindowBuckets {
		c = cnt
	}
	rem := now - cur*wd
	r := Decision{Limit: l.Limit}
	switch {
	case hits == 0:
		r.Allowed = true
	case hits > l.Limit:
		r.RetryAfter = RetryNever
	case c > l.Limit || hits > l.Limit-c:
		// Only head holds hits: it is the oldest bucket whose expiry frees them.
		r.RetryAfter = expiry(head, cur, rem, wd)
	default:
		r.Allowed = true
		switch {
		case cnt == 0 || e-head > WindowBuckets:
			head, cnt = e, hits // every stored hit has expired: a new first bucket
		case e > head:
			return false, nil // head still counts: hits in two buckets
		default:
			cnt += hits
		}
		c += hits
	}
	if c < l.Limit {
		r.Remaining = l.Limit - c
	}
	if c > 0 {
		r.ResetAfter = expiry(head, cur, rem, wd)
	}
	*d = r
	if r.Allowed && hits > 0 {
		w[0], w[1], w[2] = wd, head, cnt
	}
	return true, nil
}

// packedCheck validates a check as TakeInto does (its error when invalid) and
// reports whether l is of Kind k, the Kind of the packed state at hand.
func packedCheck(now, hits int64, l Limit, k Kind) (bool, error) {
	if _, valid := l.fastCheck(now, hits, 0); !valid {
		return false, takeError(now, hits, l)
	}
	return l.Kind == k, nil
}
