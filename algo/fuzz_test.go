package algo

import (
	"errors"
	"math/big"
	"testing"
	"time"
)

// fuzzLimit maps arbitrary fuzz inputs to a Limit of every Kind, valid most of
// the time: raw values are reduced to small ranges unless raw is set, when
// they are used as they are (to fuzz validation).
func fuzzLimit(kind uint8, limit, period, burst int64, raw bool) Limit {
	l := Limit{Kind: Kind(kind), Limit: limit, Period: time.Duration(period), Burst: burst}
	if !raw {
		abs := func(v int64) int64 { return int64(uint64(v) >> 1) }
		l.Kind = Kinds()[int(kind)%len(Kinds())]
		l.Limit = 1 + abs(limit)%40
		l.Period = time.Duration(1 + abs(period)%int64(3*time.Second))
		l.Burst = abs(burst) % 40
		if l.Kind == TokenBucket {
			l.Burst++
		}
		if l.Kind == GCRA {
			l.Limit = min(l.Limit, int64(l.Period))
		}
	}
	return l
}

// FuzzTake drives State.Take with arbitrary parameters and arrival sequences,
// including clocks that go backwards, and checks that nothing panics, every
// Decision is well-formed, and on every stretch where the clock does not go
// back the exact algorithms admit no more than they may: SlidingWindowLog at
// most Limit in any window of length Period, FixedWindow at most Limit in any
// aligned window, GCRA and TokenBucket at most their capacity plus the refill
// over any interval, SlidingWindowCounter at most Limit per aligned window.
// Each op is 3 bytes: the time step (with a flag to step back), the hits, and
// a flag to round-trip the state through its binary form.
func FuzzTake(f *testing.F) {
	f.Add(uint8(0), int64(5), int64(sec), int64(2), int64(0), false, []byte{0, 1, 0, 10, 1, 0, 200, 1, 1, 0, 9, 0})
	f.Add(uint8(1), int64(10), int64(7), int64(0), int64(-5), false, []byte{1, 1, 0, 1, 3, 0, 2, 1, 1, 3, 0, 0})
	f.Add(uint8(2), int64(3), int64(1000), int64(0), int64(-1), false, []byte{255, 3, 0, 129, 1, 1, 1, 2, 0})
	f.Add(uint8(3), int64(30), int64(60*sec), int64(15), t0, false, []byte{0, 1, 0, 0, 1, 0, 0, 17, 0, 100, 1, 1})
	f.Add(uint8(4), int64(1), int64(sec), int64(3), MaxTime-10, false, []byte{1, 4, 0, 2, 1, 0, 3, 1, 1})
	f.Add(uint8(4), int64(0), int64(-1), int64(-1), int64(0), true, []byte{1, 1, 0})
	f.Add(uint8(3), int64(1<<62), int64(1), int64(1<<62), MinTime, true, []byte{0, 1, 0})
	f.Add(uint8(9), int64(1), int64(1), int64(1), int64(0), true, []byte{0, 1, 0})
	f.Fuzz(func(t *testing.T, kind uint8, limit, period, burst, start int64, raw bool, ops []byte) {
		l := fuzzLimit(kind, limit, period, burst, raw)
		now := start
		if !raw {
			now = MinTime + int64(uint64(start)%uint64(MaxTime-MinTime))
		}
		var s State
		if err := l.Validate(); err != nil {
			if !errors.Is(err, ErrInvalidLimit) {
				t.Fatalf("Validate(%+v): got %v, want ErrInvalidLimit", l, err)
			}
			if _, err2 := s.Take(now, 1, l); !errors.Is(err2, ErrInvalidLimit) || s.Kind() != 0 {
				t.Fatalf("Take with %+v: got %v, kind %v", l, err2, s.Kind())
			}
			return
		}
		if err := validateNow(now); err != nil {
			if _, err2 := s.Take(now, 1, l); !errors.Is(err2, ErrInvalidLimit) {
				t.Fatalf("Take at %d: got %v, want ErrInvalidLimit", now, err2)
			}
			return
		}
		p := int64(l.Period)
		var admitted []op // since the clock last went back
		for i := 0; i+2 < len(ops) && i < 3*500; i += 3 {
			step, hb, flags := ops[i], ops[i+1], ops[i+2]
			dt := int64(step&0x7f) * max(1, p/32)
			if step&0x7f == 0x7f {
				dt = 10 * p
			}
			if step&0x80 != 0 {
				dt = -dt
				admitted = admitted[:0]
			}
			if now+dt < MinTime || now+dt > MaxTime {
				dt = 0
			}
			now += dt
			hits := int64(hb) % (l.Limit + l.Burst + 3)
			if flags&1 != 0 {
				b, err := s.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				var c State
				if err := c.UnmarshalBinary(b); err != nil {
					t.Fatalf("UnmarshalBinary(MarshalBinary()): %v", err)
				}
				s = c
			}
			d, err := s.Take(now, hits, l)
			if err != nil {
				t.Fatalf("Take(%d, %d, %+v): %v", now, hits, l, err)
			}
			checkDecision(t, l, hits, d)
			if d.Allowed && hits > 0 {
				admitted = append(admitted, op{now, hits})
				checkAdmitted(t, l, admitted)
			}
		}
	})
}

// checkDecision checks the invariants of any Decision.
func checkDecision(t *testing.T, l Limit, hits int64, d Decision) {
	t.Helper()
	capacity := l.Limit
	switch l.Kind {
	case GCRA:
		capacity = l.Burst + 1
	case TokenBucket:
		capacity = l.Burst
	}
	switch {
	case d.Limit != capacity:
		t.Fatalf("%+v: got Limit %d, want %d", l, d.Limit, capacity)
	case d.Remaining < 0 || d.Remaining > d.Limit:
		t.Fatalf("%+v: got Remaining %d, want in [0, %d]", l, d.Remaining, d.Limit)
	case d.ResetAfter < 0:
		t.Fatalf("%+v: got ResetAfter %v, want >= 0", l, d.ResetAfter)
	case hits == 0 && !d.Allowed:
		t.Fatalf("%+v: got a peek denied", l)
	case d.Allowed && d.RetryAfter != 0:
		t.Fatalf("%+v: got RetryAfter %v when allowed", l, d.RetryAfter)
	case !d.Allowed && (hits > capacity) != (d.RetryAfter == RetryNever):
		t.Fatalf("%+v: hits %d: got RetryAfter %v", l, hits, d.RetryAfter)
	case !d.Allowed && d.RetryAfter != RetryNever && d.RetryAfter <= 0:
		t.Fatalf("%+v: got RetryAfter %v when denied", l, d.RetryAfter)
	}
}

// checkAdmitted checks the windows ending at the last admitted hit.
func checkAdmitted(t *testing.T, l Limit, admitted []op) {
	t.Helper()
	last := admitted[len(admitted)-1].t
	p := int64(l.Period)
	var sliding, aligned int64
	for i := len(admitted) - 1; i >= 0; i-- {
		a := admitted[i]
		if a.t > last-p {
			sliding += a.hits
		}
		if floorDiv(a.t, p) == floorDiv(last, p) {
			aligned += a.hits
		}
		switch l.Kind {
		case GCRA:
			// In [a.t, last]: at most Burst+1 plus one per T.
			tt := p / l.Limit
			if n := suffix(admitted, i); n > l.Burst+1+(last-a.t)/tt {
				t.Fatalf("%+v: %d hits admitted in %d ns", l, n, last-a.t)
			}
		case TokenBucket:
			// In [a.t, last]: n*Period <= Burst*Period + (last-a.t)*Limit.
			n := suffix(admitted, i)
			lhs := new(big.Int).Mul(big.NewInt(n), big.NewInt(p))
			rhs := new(big.Int).Mul(big.NewInt(last-a.t), big.NewInt(l.Limit))
			rhs.Add(rhs, new(big.Int).Mul(big.NewInt(l.Burst), big.NewInt(p)))
			if lhs.Cmp(rhs) > 0 {
				t.Fatalf("%+v: %d hits admitted in %d ns", l, n, last-a.t)
			}
		}
		if len(admitted)-i > 64 || (a.t < last-3*p && l.Kind != GCRA && l.Kind != TokenBucket) {
			break
		}
	}
	switch l.Kind {
	case SlidingWindowLog:
		if sliding > l.Limit {
			t.Fatalf("%+v: %d hits admitted in (%d, %d]", l, sliding, last-p, last)
		}
	case FixedWindow, SlidingWindowCounter:
		if aligned > l.Limit {
			t.Fatalf("%+v: %d hits admitted in window %d", l, aligned, floorDiv(last, p))
		}
	}
}

func suffix(admitted []op, i int) int64 {
	var n int64
	for _, a := range admitted[i:] {
		n += a.hits
	}
	return n
}

// FuzzUnmarshalBinary feeds arbitrary bytes to State.UnmarshalBinary: it must
// never panic; what it accepts must marshal back to an equivalent state and
// take checks without panicking.
func FuzzUnmarshalBinary(f *testing.F) {
	for _, k := range Kinds() {
		l := Limit{Kind: k, Limit: 5, Period: time.Second, Burst: 2}
		var s State
		b, _ := s.MarshalBinary()
		f.Add(b)
		for i := range int64(4) {
			s.Take(t0+i*100*ms, 2, l)
		}
		b, _ = s.MarshalBinary()
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(append(b, 0))
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{2, 3, 0})
	f.Add([]byte{1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{1, 1, 0x80, 0x80, 0x04, 1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		var s State
		if err := s.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrInvalidState) {
				t.Fatalf("UnmarshalBinary: got %v, want ErrInvalidState", err)
			}
			if s.Kind() != 0 {
				t.Fatalf("UnmarshalBinary failed but changed s")
			}
			return
		}
		b2, err := s.MarshalBinary()
		if err != nil {
			t.Fatalf("MarshalBinary after UnmarshalBinary: %v", err)
		}
		var s2 State
		if err := s2.UnmarshalBinary(b2); err != nil {
			t.Fatalf("UnmarshalBinary(MarshalBinary()): %v", err)
		}
		if b3, _ := s2.MarshalBinary(); string(b3) != string(b2) {
			t.Fatalf("not canonical after one round: %x then %x", b2, b3)
		}
		for _, k := range Kinds() {
			for _, l := range []Limit{
				{Kind: k, Limit: 3, Period: time.Second, Burst: 2},
				{Kind: k, Limit: 1, Period: 1, Burst: 1},
			} {
				for _, now := range []int64{MinTime, 0, t0, MaxTime} {
					c := s.Clone()
					c.Idle(now, l)
					c.Merge(&s2, now, l)
					d, err := c.Take(now, 1, l)
					if err != nil {
						t.Fatal(err)
					}
					checkDecision(t, l, 1, d)
				}
			}
		}
	})
}

// FuzzPackedStates drives the packed forms a store keeps (a log of at most two
// entries, a bucketed window with hits in one bucket, decided on their words by
// TakeLogPacked and TakeBucketedPacked) with arbitrary limits, clocks (also stepping back,
// also invalid) and hits, falling back to the unpacked State as the node does,
// and checks every Decision, error and resulting state against a State that
// was never packed.
func FuzzPackedStates(f *testing.F) {
	f.Add(false, int64(3), int64(sec), t0, []byte{0, 1, 1, 5, 1, 1, 40, 2, 0, 129, 1, 1})
	f.Add(true, int64(2), int64(160), int64(0), []byte{1, 1, 0, 16, 3, 2, 17, 1, 0, 255, 1, 1, 3, 0, 0})
	f.Add(true, int64(1<<40), int64(3*sec), MaxTime-int64(sec), []byte{0, 0xff, 0xff, 1, 7, 1})
	f.Fuzz(func(t *testing.T, bucketed bool, limit, period, start int64, ops []byte) {
		kind := SlidingWindowLog
		if bucketed {
			kind = BucketedSlidingWindow
		}
		abs := func(v int64) int64 { return int64(uint64(v) >> 1) }
		l := Limit{Kind: kind, Limit: 1 + abs(limit)%MaxLogLimit, Period: time.Duration(1 + abs(period)%int64(MaxDuration))}
		now := MinTime + int64(uint64(start)%uint64(MaxTime-MinTime))
		ref := State{kind: kind}
		var whole State
		var w [LogPackedWords]int64 // as long as BucketedPackedWords
		var lbuf SlidingWindowLogState
		var bbuf BucketedWindowState
		packed := true
		for i := 0; i+2 < len(ops) && i < 3*300; i += 3 {
			step, hb, flags := ops[i], ops[i+1], ops[i+2]
			dt := int64(step&0x7f) * max(1, int64(l.Period)/16)
			if step&0x80 != 0 {
				dt = -dt
			}
			now += dt
			hits := int64(hb % 4)
			if flags&1 != 0 {
				hits = -int64(hb) // invalid
			}
			var want, got Decision
			err1 := ref.TakeInto(&want, now, hits, l)
			var err2 error
			switch {
			case !packed:
				err2 = whole.TakeInto(&got, now, hits, l)
			case bucketed:
				var ok bool
				if ok, err2 = TakeBucketedPacked(w[:], &got, now, hits, l); !ok && err2 == nil {
					u := UnpackBucketed(w[:], &bbuf)
					whole = u.Clone()
					err2 = whole.TakeInto(&got, now, hits, l)
					packed = whole.PackBucketed(w[:])
				}
			default:
				var ok bool
				if ok, err2 = TakeLogPacked(w[:], &got, now, hits, l); !ok && err2 == nil {
					u := UnpackLog(w[:], &lbuf, l.Limit)
					whole = u.Clone()
					err2 = whole.TakeInto(&got, now, hits, l)
					packed = whole.PackLog(w[:])
				}
			}
			if (err1 == nil) != (err2 == nil) || (err1 == nil && got != want) {
				t.Fatalf("%+v check %d at %d, %d hits: packed %+v %v, whole %+v %v", l, i/3, now, hits, got, err2, want, err1)
			}
			cur := whole
			switch {
			case packed && bucketed:
				cur = UnpackBucketed(w[:], &bbuf)
			case packed:
				cur = UnpackLog(w[:], &lbuf, 0)
			}
			b1, _ := cur.MarshalBinary()
			b2, _ := ref.MarshalBinary()
			if string(b1) != string(b2) {
				t.Fatalf("%+v check %d: state %x, want %x", l, i/3, b1, b2)
			}
			if err1 != nil {
				now -= dt // an invalid clock: go on from the last valid one
			}
		}
	})
}
