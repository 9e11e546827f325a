package algo

import (
	"math/rand/v2"
	"testing"
)

// A State packed and unpacked after every check decides every later check as
// the State that was never packed (the caches it drops are recomputed), for
// every Kind with a packed form.
func TestPackRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(12, 13))
	for _, k := range Kinds() {
		if k.PackedWords() == 0 {
			if k != SlidingWindowLog && k != BucketedSlidingWindow {
				t.Errorf("%v has no packed form", k)
			}
			continue
		}
		for range 200 {
			l := randLimit(r, k)
			var kept, packed State
			var w [3]int64
			for i, o := range randOps(r, l, 40) {
				hint := int64(0)
				if i%2 == 1 {
					hint = int64(l.Period) / l.Limit // right for GCRA, ignored by the others
				}
				if i%5 == 4 {
					hint = 7 // wrong: must be detected
				}
				got, err1 := UnpackState(k, w[:], hint).take2(&packed, o, l)
				want, err2 := kept.Take(o.t, o.hits, l)
				if got != want || (err1 == nil) != (err2 == nil) {
					t.Fatalf("%v %+v check %d %+v: packed %+v %v, kept %+v %v", k, l, i, o, got, err1, want, err2)
				}
				packed.Pack(w[:])
			}
		}
	}
	if got := Kind(0).PackedWords(); got != 0 {
		t.Errorf("Kind(0).PackedWords() = %d, want 0", got)
	}
}

// take2 copies the unpacked u into *dst and takes o on it.
func (u State) take2(dst *State, o op, l Limit) (Decision, error) {
	*dst = u
	return dst.Take(o.t, o.hits, l)
}
