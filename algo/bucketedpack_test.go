package algo

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A bucketed-window State kept packed whenever PackBucketed accepts it (and
// whole otherwise, as the node keeps it) decides every check of random
// sequences as the State that was never packed; an accepted State unpacks to
// exactly the same width, newest bucket and counts; PackBucketed refuses
// exactly the States with hits in two buckets or more. Both answers occur.
func TestPackBucketedRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(21, 22))
	var packs, refusals int
	for range 400 {
		l := randLimit(r, BucketedSlidingWindow)
		var kept, cur State
		var buf BucketedWindowState
		for i, o := range randOps(r, l, 60) {
			if i%17 == 16 {
				l.Period = time.Duration(1 + r.Int64N(int64(l.Period)*3)) // new bucket width
			}
			want, err1 := kept.Take(o.t, o.hits, l)
			got, err2 := cur.Take(o.t, o.hits, l)
			if got != want || (err1 == nil) != (err2 == nil) {
				t.Fatalf("%+v check %d %+v: packed %+v %v, kept %+v %v", l, i, o, got, err2, want, err1)
			}
			var w [BucketedPackedWords]int64
			live := 0
			if cur.bw != nil {
				for _, c := range cur.bw.counts {
					if c != 0 {
						live++
					}
				}
			}
			if !cur.PackBucketed(w[:]) {
				if live < 2 {
					t.Fatalf("%+v check %d: refused a state with %d buckets of hits: %+v", l, i, live, *cur.bw)
				}
				refusals++
				continue // kept whole, as the node boxes it
			}
			if live > 1 {
				t.Fatalf("%+v check %d: packed a state with %d buckets of hits: %+v", l, i, live, *cur.bw)
			}
			packs++
			u := UnpackBucketed(w[:], &buf)
			if cur.bw != nil && *u.bw != *cur.bw {
				t.Fatalf("%+v check %d: unpacked %+v, packed %+v", l, i, *u.bw, *cur.bw)
			}
			if b1, b2 := mustMarshal(t, &u), mustMarshal(t, &cur); string(b1) != string(b2) {
				t.Fatalf("%+v check %d: unpacked state marshals to %x, packed one to %x", l, i, b1, b2)
			}
			cur = u // go on from the unpacked copy, in buf
		}
	}
	if packs == 0 || refusals == 0 {
		t.Fatalf("%d packs, %d refusals: both forms must be exercised", packs, refusals)
	}
}

// PackBucketed refuses a State of another Kind and leaves w alone; a fresh
// bucketed State packs as zeros, which unpack to a fresh State.
func TestPackBucketedOtherKindsAndFresh(t *testing.T) {
	t.Parallel()
	l := Limit{Kind: GCRA, Limit: 5, Period: time.Second}
	var g State
	mustTake(t, &g, 1, 1, l)
	w := [BucketedPackedWords]int64{7, 8, 9}
	if g.PackBucketed(w[:]) || w != [BucketedPackedWords]int64{7, 8, 9} {
		t.Fatalf("a GCRA State packed as a bucketed window: %v", w)
	}
	fresh := State{kind: BucketedSlidingWindow}
	if !fresh.PackBucketed(w[:]) || w != [BucketedPackedWords]int64{} {
		t.Fatalf("a fresh bucketed State packed as %v, want zeros", w)
	}
	var buf BucketedWindowState
	u := UnpackBucketed(w[:], &buf)
	bl := Limit{Kind: BucketedSlidingWindow, Limit: 3, Period: time.Minute}
	var ref State
	for i := range 5 {
		now := int64(i) * int64(time.Second)
		if got, want := mustTake(t, &u, now, 1, bl), mustTake(t, &ref, now, 1, bl); got != want {
			t.Fatalf("check %d: unpacked fresh state %+v, fresh state %+v", i, got, want)
		}
	}
}

func mustMarshal(t *testing.T, s *State) []byte {
	t.Helper()
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatalf("MarshalBinary: %v", err)
	}
	return b
}

// TakeBucketedPacked, falling back to the unpacked State when it declines (as
// the node does), decides every check of random sequences as TakeInto on a
// State that was never packed, leaves the same state behind, and returns the
// same errors; sequences include clocks that step back, new Periods (which
// rebucket) and invalid checks. Both its answers occur.
func TestTakeBucketedPackedMatchesTakeInto(t *testing.T) {
	t.Parallel()
	var buf BucketedWindowState
	checkPackedTake(t, packedForm{
		kind:   BucketedSlidingWindow,
		seed:   51,
		take:   TakeBucketedPacked,
		unpack: func(w []int64, _ int64) State { return UnpackBucketed(w, &buf) },
		pack:   (*State).PackBucketed,
		change: func(r *rand.Rand, l *Limit) { l.Period = time.Duration(1 + r.Int64N(int64(l.Period)*3)) },
	})
}

// packedForm is one packed form under test in checkPackedTake.
type packedForm struct {
	kind   Kind
	seed   uint64
	take   func(w []int64, d *Decision, now, hits int64, l Limit) (bool, error)
	unpack func(w []int64, limit int64) State
	pack   func(s *State, w []int64) bool
	change func(r *rand.Rand, l *Limit) // a Limit change mid-sequence
}

// checkPackedTake runs f.take, falling back to f.unpack when it declines,
// against TakeInto on a State that was never packed (see the callers).
func checkPackedTake(t *testing.T, f packedForm) {
	t.Helper()
	r := rand.New(rand.NewPCG(f.seed, f.seed+1))
	var direct, declined int
	for range 600 {
		l := randLimit(r, f.kind)
		ref := State{kind: f.kind} // fresh, as three zero words unpack
		var whole State
		var w [3]int64
		packed := true // w holds the state, else whole does
		for i, o := range randOps(r, l, 80) {
			switch r.IntN(20) {
			case 0:
				f.change(r, &l)
			case 1:
				o.t -= r.Int64N(3*int64(l.Period) + 1) // the clock steps back
			case 2:
				o.hits = -1 // invalid
			}
			var want, got Decision
			err1 := ref.TakeInto(&want, o.t, o.hits, l)
			var err2 error
			if packed {
				before := w
				var ok bool
				ok, err2 = f.take(w[:], &got, o.t, o.hits, l)
				if !ok {
					if w != before {
						t.Fatalf("%+v check %d: declined but changed w from %v to %v", l, i, before, w)
					}
					if err2 == nil {
						declined++
						u := f.unpack(w[:], l.Limit)
						whole = u.Clone()
						err2 = whole.TakeInto(&got, o.t, o.hits, l)
						packed = f.pack(&whole, w[:])
					}
				} else {
					direct++
				}
			} else {
				err2 = whole.TakeInto(&got, o.t, o.hits, l)
			}
			if (err1 == nil) != (err2 == nil) || (err1 == nil && got != want) {
				t.Fatalf("%+v check %d %+v: packed %+v %v, whole %+v %v", l, i, o, got, err2, want, err1)
			}
			cur := whole
			if packed {
				cur = f.unpack(w[:], 0)
			}
			if b1, b2 := mustMarshal(t, &cur), mustMarshal(t, &ref); string(b1) != string(b2) {
				t.Fatalf("%+v check %d %+v: state %x, want %x", l, i, o, b1, b2)
			}
		}
	}
	if direct == 0 || declined == 0 {
		t.Fatalf("%d direct, %d declined: both must occur", direct, declined)
	}
	var d Decision
	w := [3]int64{1, 2, 0}
	if ok, err := f.take(w[:], &d, 0, 1, Limit{Kind: GCRA, Limit: 1, Period: time.Second}); ok || err != nil {
		t.Fatalf("a GCRA Limit: ok %v, err %v; want false, nil", ok, err)
	}
}
