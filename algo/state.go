package algo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// ErrInvalidState is returned, wrapped with what is wrong, by
// State.UnmarshalBinary for input that is not a State in a known version of
// the binary form: corrupt, truncated, oversized, or with values no State holds.
var ErrInvalidState = errors.New("algo: invalid state")

// State is the per-key state of any of the six algorithms, a tagged union of
// GCRAState, TokenBucketState, FixedWindowState, SlidingWindowCounterState,
// SlidingWindowLogState and BucketedWindowState. The zero value is a fresh
// state of no Kind; the first Take gives it the Kind of its Limit. It is 48
// bytes: a Kind, three int64, a pointer to the log of a SlidingWindowLog, which
// holds 8 bytes per stored hit, and a pointer to the 152-byte buckets of a
// BucketedSlidingWindow (both nil for the other Kinds). A store that keeps
// millions of keys keeps the fixed-size Kinds packed (see Pack).
//
// A State is not safe for concurrent use; the node serializes the checks of a
// key. Copying a State copies the pointer to a SlidingWindowLog's log, so two
// copies would share it: keep one copy in use, or copy with Clone.
type State struct {
	kind Kind
	// a, b, c hold the value type's fields (see take). Fields a value type
	// does not use cache what saves a division on the next check: GCRA's
	// emission interval in b, FixedWindow's Period in c. Caches are verified
	// before use and are not part of the binary form.
	a, b, c int64
	log     *SlidingWindowLogState // SlidingWindowLog only
	bw      *BucketedWindowState   // BucketedSlidingWindow only
}

// Take validates l, hits and now, then applies a check of hits (0 peeks) at now
// (Unix ns) under l and returns the Decision. If s holds another Kind than
// l.Kind, or is the zero State, it starts fresh for l.Kind first.
//
// It returns an error wrapping ErrInvalidLimit, and leaves s untouched, when
// l.Validate() or ValidateHits(hits) fails or now is outside [MinTime,
// MaxTime]. Being over the limit is not an error: it is a Decision with Allowed
// false. For GCRA, TokenBucket, FixedWindow and SlidingWindowCounter, Take does
// not allocate; a SlidingWindowLog allocates its log as it grows.
func (s *State) Take(now, hits int64, l Limit) (Decision, error) {
	var d Decision
	err := s.TakeInto(&d, now, hits, l)
	return d, err
}

// TakeInto is Take writing the Decision to *d (left unchanged on error)
// instead of returning it: for callers that keep the Decision in a larger
// value, which saves a copy per check.
func (s *State) TakeInto(d *Decision, now, hits int64, l Limit) error {
	var hint int64
	if s.kind == GCRA {
		hint = s.b // the emission interval of the last check
	}
	t, ok := l.fastCheck(now, hits, hint)
	if !ok {
		return takeError(now, hits, l)
	}
	if s.kind != l.Kind {
		*s = State{kind: l.Kind}
	}
	s.take(d, now, hits, l, t)
	return nil
}

// fastCheck is l.fast(hint) that also refuses hits outside [0, MaxHits] and
// now outside [MinTime, MaxTime]: false exactly when Take returns an error
// (takeError).
func (l Limit) fastCheck(now, hits, hint int64) (t int64, ok bool) {
	t, ok = l.fast(hint)
	return t, ok && uint64(hits) <= uint64(MaxHits) && uint64(now-MinTime) <= uint64(MaxTime-MinTime)
}

// takeError returns the error of a check that Take rejects.
func takeError(now, hits int64, l Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if err := ValidateHits(hits); err != nil {
		return err
	}
	return validateNow(now)
}

// take dispatches a validated check to the value type of s.kind == l.Kind; t
// is GCRA's emission interval from l.fast. It writes the Decision to d.
func (s *State) take(d *Decision, now, hits int64, l Limit, t int64) {
	switch l.Kind {
	case GCRA:
		g := GCRAState{tat: uint64(s.a)}
		g.take(d, now, hits, l.Burst+1, t, t*(l.Burst+1))
		s.a, s.b = int64(g.tat), t
	case TokenBucket:
		tb := TokenBucketState{debt: s.a, last: uint64(s.b)}
		tb.take(d, now, hits, l)
		s.a, s.b = tb.debt, int64(tb.last)
	case FixedWindow:
		p := int64(l.Period)
		var off int64
		if s.c == p && now >= s.a && uint64(now)-uint64(s.a) < uint64(p) {
			off = now - s.a // s.a is a window start aligned to p: no division
		} else {
			off = floorMod(now, p)
		}
		f := FixedWindowState{start: s.a, count: s.b}
		f.take(d, now, off, hits, l)
		if f.start != s.a || now-off == s.a {
			s.c = p // s.a is (or becomes) a window start aligned to p
		}
		s.a, s.b = f.start, f.count
	case SlidingWindowCounter:
		w := SlidingWindowCounterState{start: s.a, prev: s.b, cur: s.c}
		w.take(d, now, hits, l)
		s.a, s.b, s.c = w.start, w.prev, w.cur
	case SlidingWindowLog:
		if s.log == nil {
			s.log = new(SlidingWindowLogState)
		}
		s.log.take(d, now, hits, l)
	case BucketedSlidingWindow:
		if s.bw == nil {
			s.bw = new(BucketedWindowState)
		}
		s.bw.take(d, now, hits, l)
	}
}

// peek returns the Decision of a check of 0 hits at now under a validated l,
// without changing s. A State of another Kind peeks as a fresh one.
func (s *State) peek(now int64, l Limit) Decision {
	if s.kind != l.Kind {
		var fresh State
		var d Decision
		fresh.take(&d, now, 0, l, int64(l.Period)/l.Limit)
		return d
	}
	if l.Kind == SlidingWindowLog {
		if s.log == nil {
			return Decision{Allowed: true, Limit: l.Limit, Remaining: l.Limit}
		}
		return s.log.peek(now, l)
	}
	if l.Kind == BucketedSlidingWindow {
		if s.bw == nil {
			return Decision{Allowed: true, Limit: l.Limit, Remaining: l.Limit}
		}
		var d Decision
		s.bw.take(&d, now, 0, l) // a peek changes nothing
		return d
	}
	c := *s
	var d Decision
	c.take(&d, now, 0, l, int64(l.Period)/l.Limit)
	return d
}

// Kind returns the algorithm s holds, or 0 for a zero State.
func (s *State) Kind() Kind { return s.kind }

// Idle reports whether s is back to full capacity at now (Unix ns) under l: no
// recorded hit affects the decision of any check at a time >= now that is also
// >= the latest time s has seen (see the package doc; for GCRA, any time >=
// now), so dropping s and starting fresh changes none of them. A now earlier
// than that latest time is judged at the latest time, as Take does. A State of
// another Kind than l.Kind (or the zero State) is idle, since Take would start it
// fresh. Idle returns false for an invalid l or now (see Take), so that an
// invalid policy never drops a state. It does not change s.
//
// A fresh state decides checks at earlier times than s would (s decides them
// at its latest time; a fresh one at their own now), so a caller that may feed a
// key times earlier than those of the checks it already took (clocks that step
// back, or several nodes' clocks) must not drop states on Idle alone.
func (s *State) Idle(now int64, l Limit) bool {
	if l.Validate() != nil || validateNow(now) != nil {
		return false
	}
	switch {
	case s.kind != l.Kind:
		return true
	case l.Kind == GCRA:
		return GCRAState{tat: uint64(s.a)}.idle(now)
	case l.Kind == FixedWindow:
		return FixedWindowState{start: s.a, count: s.b}.idle(now, l)
	case l.Kind == SlidingWindowCounter:
		return SlidingWindowCounterState{start: s.a, prev: s.b, cur: s.c}.idle(now, l)
	}
	return s.peek(now, l).ResetAfter == 0 // TokenBucket, SlidingWindowLog, BucketedSlidingWindow
}

// IdleAfter returns how long after now (Unix ns) s becomes Idle under l if no
// further check comes: 0 when it is idle at now, else the peek's ResetAfter
// (the time until the key is back to full capacity), at least 1 ns. A check
// under another Limit, or a clock that steps back, may move that time; the
// caller treats it as an estimate. An invalid l or now returns MaxDuration, as
// Idle never reports such a state idle. It does not change s.
func (s *State) IdleAfter(now int64, l Limit) time.Duration {
	if l.Validate() != nil || validateNow(now) != nil {
		return MaxDuration
	}
	if s.Idle(now, l) {
		return 0
	}
	return max(s.peek(now, l).ResetAfter, 1)
}

// Hold returns the longest a state stays not Idle after its last check under
// l if no check comes (what IdleAfter returns at most, right after a check):
// Period for SlidingWindowLog and FixedWindow; 2·Period for
// SlidingWindowCounter (the previous window still weighs through the next);
// (WindowBuckets+1)·w for BucketedSlidingWindow (w its bucket width, about
// Period·17/16); for GCRA tau = T·(Burst+1), T = Period/Limit, and for
// TokenBucket ceil(Burst·Period/Limit): the time the burst takes to drain.
// It saturates at MaxDuration, which it also returns for an invalid l.
func (l Limit) Hold() time.Duration {
	if l.Validate() != nil {
		return MaxDuration
	}
	p := int64(l.Period)
	var h uint64
	switch l.Kind {
	case SlidingWindowCounter:
		h = 2 * uint64(p)
	case BucketedSlidingWindow:
		h = (WindowBuckets + 1) * uint64(bucketWidth(p))
	case GCRA:
		hi, lo := bits.Mul64(uint64(p/l.Limit), uint64(l.Burst)+1)
		if hi != 0 {
			return MaxDuration
		}
		h = lo
	case TokenBucket:
		hi, lo := bits.Mul64(uint64(l.Burst), uint64(p))
		if hi >= uint64(l.Limit) {
			return MaxDuration
		}
		q, r := bits.Div64(hi, lo, uint64(l.Limit))
		if r != 0 {
			q++
		}
		h = q
	default:
		h = uint64(p)
	}
	return time.Duration(min(h, uint64(MaxDuration)))
}

// Merge keeps in s the more restrictive of s and other at now (Unix ns) under
// l; the node calls it when it receives a handed-off key it already holds. Both
// are peeked under l (a State of another Kind peeks as fresh): the one with
// fewer Remaining wins, on a tie the one with the larger ResetAfter, on a tie s.
// If other wins, s becomes a deep copy of it (other is not changed and shares
// nothing with s). An invalid l or now leaves s unchanged, as does a nil other.
func (s *State) Merge(other *State, now int64, l Limit) {
	if other == nil || other == s || l.Validate() != nil || validateNow(now) != nil {
		return
	}
	if other.kind != l.Kind {
		return // fresh: never more restrictive than s
	}
	ds, do := s.peek(now, l), other.peek(now, l)
	if do.Remaining < ds.Remaining || (do.Remaining == ds.Remaining && do.ResetAfter > ds.ResetAfter) {
		*s = other.Clone()
	}
}

// Clone returns a deep copy of s that shares no SlidingWindowLog log and no
// BucketedSlidingWindow buckets with it.
func (s *State) Clone() State {
	c := *s
	if s.log != nil {
		c.log = s.log.clone()
	}
	if s.bw != nil {
		bw := *s.bw
		c.bw = &bw
	}
	return c
}

// stateVersion is the first byte of the binary form of a State.
const stateVersion = 1

// MarshalBinary encodes s in the versioned binary form read by UnmarshalBinary
// (encoding.BinaryMarshaler). Version 1 is: the version byte 1, the Kind byte
// (0 for the zero State), then per Kind, as Go varints (encoding/binary):
//   - GCRA: uvarint TAT-MinTime (ns);
//   - TokenBucket: uvarint missing tokens*Period (token*ns), uvarint last-MinTime (ns);
//   - FixedWindow: varint window start (Unix ns), uvarint count;
//   - SlidingWindowCounter: varint window start (Unix ns), uvarint prev, uvarint cur;
//   - SlidingWindowLog: uvarint n (<= MaxLogLimit), then if n > 0 the varint
//     oldest timestamp (Unix ns) and n-1 uvarint gaps to the next one;
//   - BucketedSlidingWindow: uvarint bucket width (ns, 0 for a fresh state),
//     then if not 0 the varint index of the newest bucket (head) and
//     WindowBuckets+1 uvarint counts, of buckets head-WindowBuckets to head.
//
// A fresh GCRA key takes about 11 bytes, a log of n hits about 12+n bytes when
// hits are less than 128 ns apart and up to 12+9n bytes otherwise. The error is
// always nil for a State built by this package.
func (s State) MarshalBinary() ([]byte, error) {
	return s.AppendBinary(make([]byte, 0, 2+3*binary.MaxVarintLen64))
}

// AppendBinary appends the binary form of MarshalBinary to b and returns the
// extended slice (encoding.BinaryAppender), so that many states can share one
// buffer. On error (a State of no valid Kind, never one built by this
// package) it returns b unchanged and the error.
func (s State) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, stateVersion, byte(s.kind))
	switch s.kind {
	case 0:
	case GCRA:
		b = binary.AppendUvarint(b, uint64(s.a))
	case TokenBucket:
		b = binary.AppendUvarint(b, uint64(s.a))
		b = binary.AppendUvarint(b, uint64(s.b))
	case FixedWindow:
		b = binary.AppendVarint(b, s.a)
		b = binary.AppendUvarint(b, uint64(s.b))
	case SlidingWindowCounter:
		b = binary.AppendVarint(b, s.a)
		b = binary.AppendUvarint(b, uint64(s.b))
		b = binary.AppendUvarint(b, uint64(s.c))
	case SlidingWindowLog:
		var n int32
		if s.log != nil {
			n = s.log.n
		}
		b = binary.AppendUvarint(b, uint64(n))
		var prev int64
		for i := range n {
			t := s.log.at(i)
			if i == 0 {
				b = binary.AppendVarint(b, t)
			} else {
				b = binary.AppendUvarint(b, uint64(t-prev))
			}
			prev = t
		}
	case BucketedSlidingWindow:
		if s.bw == nil || s.bw.width == 0 {
			b = binary.AppendUvarint(b, 0)
			break
		}
		b = binary.AppendUvarint(b, uint64(s.bw.width))
		b = binary.AppendVarint(b, s.bw.head)
		for k := s.bw.head - WindowBuckets; k <= s.bw.head; k++ {
			b = binary.AppendUvarint(b, uint64(s.bw.counts[slot(k)]))
		}
	default:
		return b[:start], fmt.Errorf("%w: kind %d", ErrInvalidState, uint8(s.kind))
	}
	return b, nil
}

// UnmarshalBinary decodes a State written by MarshalBinary
// (encoding.BinaryUnmarshaler). Input that is empty, truncated, longer than its
// content, of an unknown version or Kind, or holding values no State can hold
// (a negative count, a time outside the valid range, a log longer than
// MaxLogLimit or out of order) returns an error wrapping ErrInvalidState and
// leaves s unchanged. It never panics and allocates at most 8 bytes per input
// byte.
func (s *State) UnmarshalBinary(b []byte) error {
	r := reader{b: b}
	if v := r.byte(); r.bad || v != stateVersion {
		if r.bad {
			return fmt.Errorf("%w: empty", ErrInvalidState)
		}
		return fmt.Errorf("%w: version %d, want %d", ErrInvalidState, v, stateVersion)
	}
	kb := r.byte()
	if r.bad {
		return fmt.Errorf("%w: truncated before kind", ErrInvalidState)
	}
	k := Kind(kb)
	if k != 0 && !k.Valid() {
		return fmt.Errorf("%w: kind %d", ErrInvalidState, kb)
	}
	n := State{kind: k}
	const (
		maxOff = uint64(MaxTime - MinTime)    // a now, minus MinTime
		maxTat = maxOff + uint64(MaxDuration) // a TAT, minus MinTime
		minWin = MinTime - int64(MaxDuration) // earliest window start
		maxCnt = uint64(math.MaxInt64)        // a count
	)
	switch k {
	case GCRA:
		n.a = int64(r.uvarint(maxTat))
	case TokenBucket:
		n.a = int64(r.uvarint(uint64(MaxDuration)))
		n.b = int64(r.uvarint(maxOff))
	case FixedWindow:
		n.a = r.varint(minWin, MaxTime)
		n.b = int64(r.uvarint(maxCnt))
	case SlidingWindowCounter:
		n.a = r.varint(minWin, MaxTime)
		n.b = int64(r.uvarint(maxCnt))
		n.c = int64(r.uvarint(maxCnt))
	case SlidingWindowLog:
		cnt := r.uvarint(uint64(MaxLogLimit))
		if cnt > uint64(len(r.b)) { // each entry takes at least one byte
			r.bad = true
		}
		if !r.bad && cnt > 0 {
			buf := make([]int64, cnt)
			buf[0] = r.varint(MinTime, MaxTime)
			for i := 1; i < len(buf) && !r.bad; i++ {
				buf[i] = buf[i-1] + int64(r.uvarint(uint64(MaxTime-buf[i-1])))
			}
			n.log = &SlidingWindowLogState{buf: buf, n: int32(cnt)}
		}
	case BucketedSlidingWindow:
		n.bw = r.buckets()
	}
	if r.bad {
		return fmt.Errorf("%w: truncated or out-of-range %v", ErrInvalidState, k)
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes after %v", ErrInvalidState, len(r.b), k)
	}
	*s = n
	return nil
}

// buckets reads the BucketedWindowState of the binary form: a width of at most
// the widest bucket (bucketWidth(MaxDuration)), a head whose bucket starts in
// [MinTime-width, MaxTime], counts summing to at most math.MaxInt64, and a
// head count > 0 unless every count is 0.
func (r *reader) buckets() *BucketedWindowState {
	bw := &BucketedWindowState{width: int64(r.uvarint(uint64(bucketWidth(int64(MaxDuration)))))}
	if r.bad || bw.width == 0 {
		return bw
	}
	bw.head = r.varint(bucketOf(MinTime, bw.width)-1, MaxTime/bw.width)
	var sum uint64
	for k := bw.head - WindowBuckets; k <= bw.head && !r.bad; k++ {
		c := r.uvarint(math.MaxInt64 - sum)
		sum += c
		bw.counts[slot(k)] = int64(c)
	}
	if sum > 0 && bw.counts[slot(bw.head)] == 0 {
		r.bad = true
	}
	return bw
}

// reader decodes varints; bad records the first failure and sticks.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) byte() byte {
	if r.bad || len(r.b) == 0 {
		r.bad = true
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// uvarint reads a uvarint <= max.
func (r *reader) uvarint(max uint64) uint64 {
	if r.bad {
		return 0
	}
	v, k := binary.Uvarint(r.b)
	if k <= 0 || v > max {
		r.bad = true
		return 0
	}
	r.b = r.b[k:]
	return v
}

// varint reads a varint in [lo, hi].
func (r *reader) varint(lo, hi int64) int64 {
	if r.bad {
		return 0
	}
	v, k := binary.Varint(r.b)
	if k <= 0 || v < lo || v > hi {
		r.bad = true
		return 0
	}
	r.b = r.b[k:]
	return v
}
