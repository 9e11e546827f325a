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
