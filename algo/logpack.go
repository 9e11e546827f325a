package algo

// LogPackedWords is how many int64 words PackLog writes: a SlidingWindowLog
// state of at most two entries kept as its entry count and the entries
// (Unix ns, oldest first), instead of a SlidingWindowLogState and its buffer.
// A key that took one or two hits in its last Period, the usual key among tens
// of millions, never needs more; this is the compact encoding Redis's ZSET
// recipe gets from a small sorted set.
const LogPackedWords = 3

// maxPackedLog is the most entries PackLog packs.
const maxPackedLog = LogPackedWords - 1

// maxKeptLogBuf is the largest buffer (entries) UnpackLog keeps using in its
// buf: a larger one, which only a check that left more than two entries can
// have grown, is replaced by a small one.
const maxKeptLogBuf = 4 * minLogCap

// PackLog writes s into w[:LogPackedWords] and returns true when s is a
// SlidingWindowLog State of at most two entries: w[0] the count, w[1] and
// w[2] the entries oldest first (0 where there is none). UnpackLog reads it
// back with the same entries, so every later Decision is the same. A fresh
// State of that Kind packs as three zeros. It returns false and leaves w alone
// for a longer log, or a State of another Kind: keep that one whole. It panics
// if w is shorter than LogPackedWords.
func (s *State) PackLog(w []int64) bool {
	if s.kind != SlidingWindowLog {
		return false
	}
	_ = w[LogPackedWords-1]
	lg := s.log
	if lg == nil || lg.n == 0 {
		w[0], w[1], w[2] = 0, 0, 0
		return true
	}
	if lg.n > maxPackedLog {
		return false
	}
	w[0], w[1], w[2] = int64(lg.n), lg.at(0), 0
	if lg.n == 2 {
		w[2] = lg.at(1)
	}
	return true
}

// UnpackLog returns the SlidingWindowLog State that PackLog wrote to w, with
// its log in *buf, which it overwrites: the State refers to buf (a Take changes
// it in place, and may give it a larger buffer, which buf keeps for the next
// unpack) until a Merge or an assignment replaces it, so buf must outlive
// every use of the State, and a State to keep beyond buf's next use must be a
// Clone. limit is the Limit of the next Take when known, else 0: the buffer is
// sized so that an admitted check under it that leaves at most two entries
// needs no allocation. A caller that unpacks under a lock can keep one buf for
// every key it guards. w must come from PackLog: it is not validated (use
// MarshalBinary for state that crosses a trust boundary).
func UnpackLog(w []int64, buf *SlidingWindowLogState, limit int64) State {
	_ = w[LogPackedWords-1]
	n := int32(min(max(w[0], 0), maxPackedLog))
	if c := cap(buf.buf); c < minLogCap || c > maxKeptLogBuf {
		// Once per buf, kept across unpacks; and again after a check that grew
		// it past two entries (and was boxed), so that one large check does not
		// pin a large buffer in buf.
		buf.buf = make([]int64, minLogCap)
	}
	// A buffer no longer than the Limit and at most minLogCap: take neither
	// shrinks it (fit) nor grows it (push) for a check it admits within two
	// entries. Its length is only the ring's capacity, never a decision's input.
	c := int32(minLogCap)
	if limit > 0 && limit < minLogCap {
		c = int32(limit)
	}
	buf.buf = buf.buf[:max(c, n)]
	buf.head, buf.n = 0, n
	if n > 0 {
		buf.buf[0] = w[1]
	}
	if n > 1 {
		buf.buf[1] = w[2]
	}
	return State{kind: SlidingWindowLog, log: buf}
}

// TakeLogPacked is State.TakeInto on the SlidingWindowLog state that PackLog
// wrote to w, deciding on the three words without unpacking them: it writes
// the Decision to *d and, when the check is admitted with hits, the new state
// to w. It returns ok false, and leaves w and *d alone, when l is not a
// SlidingWindowLog Limit or when the check would be admitted with more than
// two entries left in the log, which do not pack: the caller then takes the
// check on UnpackLog(w) instead. The Decision and the entries are those of the
// unpacked State (TestTakeLogPackedMatchesTakeInto, FuzzPackedStates). It
// returns the error of TakeInto for an invalid Limit, hits or now
// (ErrInvalidLimit), with w and *d unchanged.
func TakeLogPacked(w []int64, d *Decision, now, hits int64, l Limit) (ok bool, err error) {
	if ok, err := packedCheck(now, hits, l, SlidingWindowLog); !ok {
		return false, err
	}
	_ = w[LogPackedWords-1]
	n := min(max(w[0], 0), maxPackedLog)
	e := [maxPackedLog]int64{w[1], w[2]} // oldest first
	p := int64(l.Period)
	eff := now
	if n > 0 {
		eff = max(now, e[n-1]) // time never runs backwards inside a state
	}
	lo := int64(0) // the entries at or before eff-Period have expired
	for lo < n && e[lo] <= eff-p {
		lo++
	}
	count := n - lo
	r := Decision{Limit: l.Limit}
	switch {
	case hits == 0:
		r.Allowed = true
	case hits > l.Limit:
		r.RetryAfter = RetryNever
	case hits > l.Limit-count:
		// The (count+hits-Limit)-th oldest entry that counts must expire first.
		r.RetryAfter = until(e[lo+count+hits-l.Limit-1]+p, now)
	default:
		if count+hits > maxPackedLog {
			return false, nil // more than two entries: the caller unpacks
		}
		r.Allowed = true
		var kept [maxPackedLog]int64 // the entries that count, then hits stamped at eff
		k := copy(kept[:], e[lo:n])
		for range hits {
			kept[k] = eff
			k++
		}
		n, e = int64(k), kept
		count += hits
	}
	r.Remaining = max(0, l.Limit-count)
	if count > 0 {
		r.ResetAfter = until(e[n-1]+p, now)
	}
	*d = r
	if r.Allowed && hits > 0 {
		w[0], w[1], w[2] = n, e[0], 0
		if n > 1 {
			w[2] = e[1]
		}
	}
	return true, nil
}
