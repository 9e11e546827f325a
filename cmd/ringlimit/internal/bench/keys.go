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
	// Hot sends a share F of the checks to the first H keys (uniform among
	// them) and the rest uniformly over all K keys (the hot ones included): a
	// few keys that one owner decides for everybody, as a login or tenant key
	// under attack would be. Key k < H is drawn with probability F/H + (1-F)/K,
	// any other with (1-F)/K.
	Hot
)

// Defaults of KeySpec's hot-key fields.
const (
	// DefaultHotKeys is how many keys are hot under Hot.
	DefaultHotKeys = 1
	// DefaultHotShare is the share of checks sent to the hot keys under Hot.
	DefaultHotShare = 0.9
)

// String returns "uniform", "zipf" or "hot".
func (d Dist) String() string {
	switch d {
	case Uniform:
		return "uniform"
	case Zipf:
		return "zipf"
	case Hot:
		return "hot"
	}
	return fmt.Sprintf("dist(%d)", uint8(d))
}

// ParseDist maps "uniform", "zipf" or "hot" to its Dist.
func ParseDist(s string) (Dist, error) {
	for _, d := range []Dist{Uniform, Zipf, Hot} {
		if s == d.String() {
			return d, nil
		}
	}
	return 0, fmt.Errorf("bench: distribution %q (want uniform, zipf or hot)", s)
}

// KeySpec describes a key distribution; NewKeyGen draws from it. Unlike
// Options, it takes no defaults: every field the distribution reads must be
// valid.
type KeySpec struct {
	// Dist is the distribution.
	Dist Dist
	// Keys is the number of distinct keys, >= 1: indexes [0, Keys).
	Keys int
	// ZipfS is Zipf's exponent, > 1 (math/rand/v2's requirement); read by Zipf
	// only.
	ZipfS float64
	// HotKeys (1..Keys) and HotShare (in (0, 1]) are read by Hot only: a check
	// goes to one of the first HotKeys keys with probability HotShare, else to
	// any of the Keys keys.
	HotKeys  int
	HotShare float64
}

// validate returns an error naming the first invalid field the distribution
// reads.
func (s KeySpec) validate() error {
	if s.Keys < 1 {
		return fmt.Errorf("bench: keys %d must be >= 1", s.Keys)
	}
	switch s.Dist {
	case Uniform:
	case Zipf:
		if !(s.ZipfS > 1) {
			return fmt.Errorf("bench: zipf exponent %v must be > 1", s.ZipfS)
		}
	case Hot:
		if s.HotKeys < 1 || s.HotKeys > s.Keys {
			return fmt.Errorf("bench: hot keys %d outside 1..%d (the keys)", s.HotKeys, s.Keys)
		}
		if !(s.HotShare > 0 && s.HotShare <= 1) {
			return fmt.Errorf("bench: hot share %v outside (0, 1]", s.HotShare)
		}
	default:
		return fmt.Errorf("bench: unknown distribution %v", s.Dist)
	}
	return nil
}

// KeyGen draws key indexes in [0, K). A KeyGen is not safe for concurrent use:
// give each goroutine its own, from its own seeded source.
type KeyGen interface {
	Next() int
}

// NewKeyGen returns a generator of spec's distribution drawing from rng, or an
// error if spec is invalid (see KeySpec).
func NewKeyGen(spec KeySpec, rng *rand.Rand) (KeyGen, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	switch spec.Dist {
	case Zipf:
		return zipfGen{rand.NewZipf(rng, spec.ZipfS, 1, uint64(spec.Keys-1))}, nil
	case Hot:
		return hotGen{rng: rng, n: spec.Keys, hot: spec.HotKeys, share: spec.HotShare}, nil
	}
	return uniformGen{rng: rng, n: spec.Keys}, nil
}

type uniformGen struct {
	rng *rand.Rand
	n   int
}

func (g uniformGen) Next() int { return g.rng.IntN(g.n) }

type zipfGen struct{ z *rand.Zipf }

func (g zipfGen) Next() int { return int(g.z.Uint64()) }

// hotGen draws one of the first hot keys when a draw in [0, 1) falls below
// share (always when share is 1), else one of all n.
type hotGen struct {
	rng    *rand.Rand
	n, hot int
	share  float64
}

func (g hotGen) Next() int {
	if g.rng.Float64() < g.share {
		return g.rng.IntN(g.hot)
	}
	return g.rng.IntN(g.n)
}
