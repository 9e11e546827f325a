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
	if cap(buf.buf) < minLogCap {
		buf.buf = make([]int64, minLogCap) // once per buf: kept across unpacks
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
