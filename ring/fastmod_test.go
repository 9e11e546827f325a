package ring

import (
	"math"
	"math/rand/v2"
	"testing"
)

func checkMod(t *testing.T, h, d uint64) {
	t.Helper()
	if got, want := newModulus(d).mod(h), h%d; got != want {
		t.Fatalf("%d %% %d: fastmod %d, want %d", h, d, got, want)
	}
}

// The partition of a key is hash % PartitionCount on every member, whatever
// its version: fastmod must equal the division for every hash and count.
func TestModulusEqualsRemainder(t *testing.T) {
	t.Parallel()
	ds := []uint64{1, 2, 3, 7, 271, 1024, 4093, 4096, 65521, 1<<31 - 1, 1 << 32, 1<<32 + 15, 1<<63 - 25, 1 << 63, math.MaxUint64 - 1, math.MaxUint64}
	hs := []uint64{0, 1, 2, 4092, 4093, 4094, 1<<32 - 1, 1 << 32, 1<<63 - 1, 1 << 63, math.MaxUint64 - 1, math.MaxUint64}
	for _, d := range ds {
		for _, h := range hs {
			checkMod(t, h, d)
			checkMod(t, h*d, d) // multiples (mod 2^64) and their neighbours
			checkMod(t, h*d+1, d)
			checkMod(t, h*d-1, d)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		d := rng.Uint64() >> rng.UintN(64)
		if d == 0 {
			d = 1
		}
		checkMod(t, rng.Uint64(), d)
	}
}

func FuzzModulus(f *testing.F) {
	f.Add(uint64(12345678901234567), uint64(4093))
	f.Add(uint64(math.MaxUint64), uint64(3))
	f.Fuzz(func(t *testing.T, h, d uint64) {
		if d == 0 {
			return
		}
		checkMod(t, h, d)
	})
}
