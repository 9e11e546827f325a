package algo

// Incremental copies of a SlidingWindowLog state, for replicas (a node keeps a
// copy of each key's state on another member). A log only changes at its ends:
// entries are appended in time order (never before the newest one) and
// expired ones are dropped from the front. So a copy that held the log up to
// its tail (newest entry t, n entries at t) is brought up to date by the
// entries appended since, instead of the whole log: O(new hits) instead of
// O(Limit) per update.

// LogTail returns the newest entry (Unix ns) of a SlidingWindowLog state and
// the number of entries at that time: the tail that LogSince and AppendLog
// take. It returns 0, 0 for an empty log and for a State of another Kind.
func (s *State) LogTail() (newest, n int64) {
	if s.kind != SlidingWindowLog || s.log == nil || s.log.n == 0 {
		return 0, 0
	}
	l := s.log
	newest = l.at(l.n - 1)
	return newest, int64(l.n - l.first(newest-1))
}

// LogSince returns a SlidingWindowLog State holding the entries s gained since
// it had the tail (t, n) (from an earlier LogTail of s): its entries after t,
// and those at t beyond the first n. ok is false when s is not a
// SlidingWindowLog state or cannot have grown from that tail (it holds fewer
// than n entries at t, but some): the whole state must then be copied. When
// the entries at t have all expired, every entry s holds is newer and is
// returned.
func (s *State) LogSince(t, n int64) (delta State, ok bool) {
	if s.kind != SlidingWindowLog || n < 0 {
		return State{}, false
	}
	delta = State{kind: SlidingWindowLog, log: &SlidingWindowLogState{}}
	if s.log == nil || s.log.n == 0 {
		return delta, true
	}
	l := s.log
	from := int32(0) // n == 0: the log was empty, every entry is new
	if n > 0 {
		from = l.first(t - 1) // the first entry at or after t
		switch at := l.first(t) - from; {
		case int64(at) >= n:
			from += int32(n)
		case at == 0:
			// The entries at t expired, and so did every older one: all that
			// is held was appended since.
		default:
			return State{}, false
		}
	}
	if k := l.n - from; k > 0 {
		d := delta.log
		d.buf = make([]int64, k)
		for i := range k {
			d.buf[i] = l.at(from + i)
		}
		d.n = k
	}
	return delta, true
}

// AppendLog brings s, a copy of a SlidingWindowLog state whose tail is (t, n)
// as LogTail reports, up to date with delta (LogSince(t, n) of the original):
// it appends delta's entries and then drops those expired by the newest one
// under l, as the original did when it admitted it. It returns false and
// leaves s unchanged when s's tail is not (t, n), delta is not a
// SlidingWindowLog state whose entries start at or after t in order, l is
// invalid, or the result would hold more than l.Limit entries (or
// MaxLogLimit): the whole state must then be copied.
func (s *State) AppendLog(t, n int64, delta *State, l Limit) bool {
	if delta == nil || delta.kind != SlidingWindowLog || l.Kind != SlidingWindowLog || l.Validate() != nil {
		return false
	}
	if s.kind != SlidingWindowLog && !(s.kind == 0 && t == 0 && n == 0) {
		return false
	}
	if tt, tn := s.LogTail(); tt != t || tn != n {
		return false
	}
	d := delta.log
	if d == nil || d.n == 0 {
		s.kind = SlidingWindowLog
		return true
	}
	prev := t
	for i := range d.n {
		v := d.at(i)
		if v < prev || validateNow(v) != nil {
			return false
		}
		prev = v
	}
	cur := s.log
	newest := d.at(d.n - 1)
	cut := newest - int64(l.Period)
	var drop int32
	if cur != nil {
		drop = cur.first(cut) // entries of s expired by newest
		if int64(cur.n-drop)+int64(d.n-d.first(cut)) > min(l.Limit, MaxLogLimit) {
			return false
		}
	} else if int64(d.n-d.first(cut)) > min(l.Limit, MaxLogLimit) {
		return false
	}
	if cur == nil {
		cur = &SlidingWindowLogState{}
		s.kind, s.log = SlidingWindowLog, cur
	}
	cur.drop(drop)
	limit := int32(min(l.Limit, MaxLogLimit))
	for i := d.first(cut); i < d.n; i++ {
		cur.push(d.at(i), 1, limit)
	}
	return true
}
