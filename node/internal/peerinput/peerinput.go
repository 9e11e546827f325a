// Package peerinput holds the bounds a node judges input by beyond algo's
// own validation: the maxima every Limit must respect (node.Config.MaxPeriod,
// node.Config.MaxLimit), in a caller's check, a peer's forwarded check or a
// peer's key state alike, and the rate-limited log of what is refused. It
// knows algo, not the node.
package peerinput

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// ErrLimitAboveMax is the Err of the *algo.InputError of a Limit above the
// maxima; node re-exports it as node.ErrLimitAboveMax.
var ErrLimitAboveMax = errors.New("node: limit above this node's maxima")

// Within returns nil if l is within the maxima maxP (Period) and maxL
// (Limit and Burst), else an *algo.InputError (Err ErrLimitAboveMax) naming
// the field: Period at most maxP, Limit and Burst at most maxL, and a burst
// whose length (the time the key takes to drain it, see burstWithin) at most
// maxP, so that no caller or peer holds a key longer than maxP after its
// last check by a large burst at a slow rate. An invalid Limit is algo's to
// refuse (Within does not).
func Within(l algo.Limit, maxP time.Duration, maxL int64) error {
	switch {
	case l.Period > maxP:
		return &algo.InputError{Field: "period", Value: fmt.Sprintf("%d ns", int64(l.Period)), Allowed: fmt.Sprintf("must be at most this node's MaxPeriod, %d ns (%v)", int64(maxP), maxP), Err: ErrLimitAboveMax}
	case l.Limit > maxL:
		return &algo.InputError{Field: "limit", Value: fmt.Sprint(l.Limit), Allowed: fmt.Sprintf("must be at most this node's MaxLimit, %d", maxL), Err: ErrLimitAboveMax}
	case l.Burst > maxL:
		return &algo.InputError{Field: "burst", Value: fmt.Sprint(l.Burst), Allowed: fmt.Sprintf("must be at most this node's MaxLimit, %d", maxL), Err: ErrLimitAboveMax}
	}
	if l.Burst < l.Limit || l.Limit <= 0 || l.Period <= 0 {
		// A burst below the limit drains within Period (checked above); an
		// invalid Limit is algo's to refuse.
		return nil
	}
	return burstWithin(l, maxP)
}

// burstWithin returns nil if the burst of a GCRA or TokenBucket Limit with
// Limit, Period > 0 drains within maxP, else an *InputError (field "burst",
// Err ErrLimitAboveMax) giving the largest burst that does:
//
//   - GCRA: tau = T·(Burst+1), T = Period/Limit rounded down (the emission
//     interval, as algo's GCRA computes it); a key's TAT lies at most tau
//     after its last check, so tau <= maxP, Burst <= maxP/T - 1;
//   - TokenBucket: an empty bucket refills in Burst·Period/Limit, so
//     Burst·Period <= maxP·Limit (compared in 128 bits).
//
// The window algorithms ignore Burst.
func burstWithin(l algo.Limit, maxP time.Duration) error {
	refuse := func(most uint64, length string) error {
		return &algo.InputError{Field: "burst", Value: fmt.Sprint(l.Burst), Allowed: fmt.Sprintf("must be at most %d at limit %d per %v: the burst takes %s to drain, above this node's MaxPeriod, %v", most, l.Limit, l.Period, length, maxP), Err: ErrLimitAboveMax}
	}
	switch l.Kind {
	case algo.GCRA:
		t := uint64(l.Period) / uint64(l.Limit) // >= 1: algo refuses T < 1
		if t == 0 {
			return nil
		}
		hi, tau := bits.Mul64(t, uint64(l.Burst)+1)
		if hi != 0 || tau > uint64(maxP) {
			length := "longer than int64 ns"
			if hi == 0 {
				length = time.Duration(tau).String()
			}
			return refuse(uint64(maxP)/t-1, length)
		}
	case algo.TokenBucket:
		hiB, loB := bits.Mul64(uint64(l.Burst), uint64(l.Period))
		hiM, loM := bits.Mul64(uint64(maxP), uint64(l.Limit))
		if hiB > hiM || hiB == hiM && loB > loM {
			most, _ := bits.Div64(hiM, loM, uint64(l.Period)) // < Burst: no overflow
			length := "longer than int64 ns"
			if hiB < uint64(l.Limit) {
				if q, _ := bits.Div64(hiB, loB, uint64(l.Limit)); q <= uint64(math.MaxInt64) {
					length = time.Duration(q).String()
				}
			}
			return refuse(most, length)
		}
	}
	return nil
}

// LogEvery lets a log line through at most once per second (its zero value
// is ready): a peer that sends
// a refused state with every replication send must not fill the log. The
// lines held back are counted and reported with the next one let through.
type LogEvery struct {
	next atomic.Int64 // Unix ns before which lines are held back
	held atomic.Int64 // lines held back since the last one let through
}

// Allow reports whether a line may be logged now, and how many were held back
// before it.
func (l *LogEvery) Allow() (ok bool, held int64) {
	now := time.Now().UnixNano()
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+int64(time.Second)) {
		l.held.Add(1)
		return false, 0
	}
	return true, l.held.Swap(0)
}
