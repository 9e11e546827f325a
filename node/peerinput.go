package node

import (
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// Peer input judged by this node's own bounds: the maxima every Limit must
// respect (Config.MaxPeriod, Config.MaxLimit), in a check or under a peer's key
// state, and the rate-limited log of what is refused.

// withinMaxima returns nil if l is within this node's maxima, else an
// *InputError (Err ErrLimitAboveMax) naming the field: Period at most
// MaxPeriod, Limit and Burst at most MaxLimit, and a burst whose length (the
// time the key takes to drain it, see burstWithin) at most MaxPeriod. A client's
// check, a peer's forwarded check and a peer's key state (handoff, replica)
// are judged by it alike, so no caller or peer holds a key longer than
// MaxPeriod after its last check by a large burst at a slow rate.
func (n *Node) withinMaxima(l algo.Limit) error {
	maxP, maxL := n.cfg.MaxPeriod, n.cfg.MaxLimit
	switch {
	case l.Period > maxP:
		return &InputError{Field: "period", Value: fmt.Sprintf("%d ns", int64(l.Period)), Allowed: fmt.Sprintf("must be at most this node's MaxPeriod, %d ns (%v)", int64(maxP), maxP), Err: ErrLimitAboveMax}
	case l.Limit > maxL:
		return &InputError{Field: "limit", Value: fmt.Sprint(l.Limit), Allowed: fmt.Sprintf("must be at most this node's MaxLimit, %d", maxL), Err: ErrLimitAboveMax}
	case l.Burst > maxL:
		return &InputError{Field: "burst", Value: fmt.Sprint(l.Burst), Allowed: fmt.Sprintf("must be at most this node's MaxLimit, %d", maxL), Err: ErrLimitAboveMax}
	}
	if l.Burst < l.Limit || l.Limit <= 0 || l.Period <= 0 {
		// A burst below the limit drains within Period (checked above); an
		// invalid Limit is algo's to refuse.
		return nil
	}
	return burstWithin(l, maxP)
}

// WithinMaxima returns nil if this node accepts a check under l as to its
// size, else the *InputError (matching ErrLimitAboveMax and ErrInvalid) such
// a check gets: Period above MaxPeriod, Limit or Burst above MaxLimit, or a
// GCRA or TokenBucket burst that takes longer than MaxPeriod to drain. A
// layer that decides some checks elsewhere (the failover limiter's Redis)
// calls it first, so that every path refuses what the node refuses.
func (n *Node) WithinMaxima(l algo.Limit) error { return n.withinMaxima(l) }

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
		return &InputError{Field: "burst", Value: fmt.Sprint(l.Burst), Allowed: fmt.Sprintf("must be at most %d at limit %d per %v: the burst takes %s to drain, above this node's MaxPeriod, %v", most, l.Limit, l.Period, length, maxP), Err: ErrLimitAboveMax}
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

// logEvery lets a log line through at most once per second: a peer that sends
// a refused state with every replication send must not fill the log. The
// lines held back are counted and reported with the next one let through.
type logEvery struct {
	next atomic.Int64 // Unix ns before which lines are held back
	held atomic.Int64 // lines held back since the last one let through
}

// allow reports whether a line may be logged now, and how many were held back
// before it.
func (l *logEvery) allow() (ok bool, held int64) {
	now := time.Now().UnixNano()
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+int64(time.Second)) {
		l.held.Add(1)
		return false, 0
	}
	return true, l.held.Swap(0)
}

// refusedState counts a key state (or ban state) refused from peer from, and
// logs it at most once a second.
func (n *Node) refusedState(from, key string, err error) {
	n.refusedStates.Add(1)
	n.refused("state")
	if ok, held := n.refusedLog.allow(); ok {
		n.log.Warn("refused a peer's key state; the rest of its batch is kept", "from", from, "key", key, "err", err, "refused_total", n.refusedStates.Load(), "not_logged", held)
	}
}
