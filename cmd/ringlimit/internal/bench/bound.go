package bench

import (
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// MaxAdmitted returns an upper bound on the hits the algorithm of l can admit to
// one key starting from a fresh state, when every check of that key is decided
// at a time within an interval of length span (ns, >= 0). The bound holds
// whatever the sizes and order of the checks. Per algorithm, with L = l.Limit,
// P = l.Period, B = l.Burst:
//
//   - FixedWindow: windows are [kP, (k+1)P) and admit at most L each; a closed
//     interval of length span meets at most ceil(span/P)+1 of them, so
//     L·(ceil(span/P)+1).
//   - SlidingWindowCounter: a hit is admitted only if prev·weight + cur + hits ≤ L
//     with prev·weight ≥ 0, so again at most L per fixed window:
//     L·(ceil(span/P)+1). (Looser than the estimate's real behaviour, never below.)
//   - SlidingWindowLog: any half-open interval (t−P, t] holds at most L admitted
//     hits (that is the rule), and floor(span/P)+1 such intervals cover a closed
//     interval of length span (span is integer ns): L·(floor(span/P)+1).
//   - BucketedSlidingWindow: a hit counts at least as long as in the log (until
//     the end of the 16th bucket after its own), so the log's bound holds:
//     L·(floor(span/P)+1).
//   - GCRA: with emission interval T = P/L and tolerance τ = T·(B+1), the k-th
//     admitted hit raises TAT to at least t0 + k·T and needs now ≥ TAT − τ, so
//     t0 + span ≥ t0 + k·T − (B+1)·T, i.e. k ≤ span/T + B + 1. The bound uses
//     the integer T = floor(P/L) (an implementation's T is never smaller), so
//     floor(span/floor(P/L)) + B + 1.
//   - TokenBucket: B tokens at the start plus the refill over span, L per P:
//     B + floor(span/floor(P/L)) (≥ B + span·L/P, covering an implementation that
//     refills one token per floor(P/L) ns as well as an exact one).
//
// The result saturates at math.MaxInt64. It returns an error wrapping
// algo.ErrInvalidLimit for a Limit no algorithm accepts (non-positive Limit or
// Period, negative Burst, unknown Kind, P/L below 1 ns for GCRA and TokenBucket)
// or a negative span.
func MaxAdmitted(l algo.Limit, span time.Duration) (int64, error) {
	switch {
	case !l.Kind.Valid():
		return 0, fmt.Errorf("%w: kind %v", algo.ErrInvalidLimit, l.Kind)
	case l.Limit <= 0:
		return 0, fmt.Errorf("%w: limit %d must be > 0", algo.ErrInvalidLimit, l.Limit)
	case l.Period <= 0:
		return 0, fmt.Errorf("%w: period %v must be > 0", algo.ErrInvalidLimit, l.Period)
	case l.Burst < 0:
		return 0, fmt.Errorf("%w: burst %d must be >= 0", algo.ErrInvalidLimit, l.Burst)
	case span < 0:
		return 0, fmt.Errorf("bench: span %v must be >= 0", span)
	}
	L, P, B, S := big.NewInt(l.Limit), big.NewInt(int64(l.Period)), big.NewInt(l.Burst), big.NewInt(int64(span))
	one := big.NewInt(1)
	n := new(big.Int)
	switch l.Kind {
	case algo.FixedWindow, algo.SlidingWindowCounter:
		// ceil(S/P) = (S+P-1)/P
		n.Add(S, P).Sub(n, one).Quo(n, P).Add(n, one).Mul(n, L)
	case algo.SlidingWindowLog, algo.BucketedSlidingWindow:
		n.Quo(S, P).Add(n, one).Mul(n, L)
	case algo.GCRA, algo.TokenBucket:
		T := new(big.Int).Quo(P, L)
		if T.Sign() == 0 {
			return 0, fmt.Errorf("%w: period %v / limit %d is below 1 ns", algo.ErrInvalidLimit, l.Period, l.Limit)
		}
		n.Quo(S, T).Add(n, B)
		if l.Kind == algo.GCRA {
			n.Add(n, one)
		}
	default: // an algorithm added to algo without its bound here
		return 0, fmt.Errorf("bench: no admission bound for algorithm %v", l.Kind)
	}
	if !n.IsInt64() {
		return math.MaxInt64, nil
	}
	return n.Int64(), nil
}
