package bench

import (
	"fmt"
	"math/rand/v2"
)

// Dist is a key distribution.
type Dist uint8

const (
	// Uniform picks each of the K keys with probability 1/K.
	Uniform Dist = iota + 1
	// Zipf picks key k (0-based) with probability proportional to 1/(k+1)^s:
	// key 0 is the hottest. math/rand/v2's Zipf with v = 1.
	Zipf
)

// String returns "uniform" or "zipf".
func (d Dist) String() string {
	switch d {
	case Uniform:
		return "uniform"
	case Zipf:
		return "zipf"
	}
	return fmt.Sprintf("dist(%d)", uint8(d))
}

// ParseDist maps "uniform" or "zipf" to its Dist.
func ParseDist(s string) (Dist, error) {
	switch s {
	case "uniform":
		return Uniform, nil
	case "zipf":
		return Zipf, nil
	}
	return 0, fmt.Errorf("bench: distribution %q (want uniform or zipf)", s)
}

// KeyGen draws key indexes in [0, K). A KeyGen is not safe for concurrent use:
// give each goroutine its own, from its own seeded source.
type KeyGen interface {
	Next() int
}

// NewKeyGen returns a generator of dist over keys indexes, drawing from rng.
// s is the Zipf exponent and must be > 1 (math/rand/v2's requirement); it is
// ignored for Uniform. keys must be >= 1.
func NewKeyGen(dist Dist, keys int, s float64, rng *rand.Rand) (KeyGen, error) {
	if keys < 1 {
		return nil, fmt.Errorf("bench: keys %d must be >= 1", keys)
	}
	switch dist {
	case Uniform:
		return uniformGen{rng: rng, n: keys}, nil
	case Zipf:
		if !(s > 1) {
			return nil, fmt.Errorf("bench: zipf exponent %v must be > 1", s)
		}
		return zipfGen{rand.NewZipf(rng, s, 1, uint64(keys-1))}, nil
	}
	return nil, fmt.Errorf("bench: unknown distribution %v", dist)
}

type uniformGen struct {
	rng *rand.Rand
	n   int
}

func (g uniformGen) Next() int { return g.rng.IntN(g.n) }

type zipfGen struct{ z *rand.Zipf }

func (g zipfGen) Next() int { return int(g.z.Uint64()) }
