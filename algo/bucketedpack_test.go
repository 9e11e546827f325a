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
