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
// twice, so the bounds must still hold: algo decides a now earlier than the
// latest time a state has seen at that latest time (FixedWindow and
// SlidingWindowCounter in their stored window, SlidingWindowLog at its newest
// entry, TokenBucket at its last refill), whose effective times all lie within
// the span, and GCRA at now against a TAT it never caps, which admits at most
// span/T + Burst + 1 between the earliest and the latest now.
func TestMaxAdmittedHoldsWithBackwardClock(t *testing.T) {
	t.Parallel()
	checkBound(t, 13, false)
}
