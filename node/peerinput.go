package node

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// Peer input judged by this node's own bounds: the maxima every Limit must
// respect (Config.MaxPeriod, Config.MaxLimit), in a check or under a peer's key
// state, and the rate-limited log of what is refused.

// withinMaxima returns nil if l is within this node's maxima, else an
// *InputError (Err ErrLimitAboveMax) naming the field: Period at most
// MaxPeriod, Limit and Burst at most MaxLimit. (A GCRA or TokenBucket burst
// above the Limit may still hold a key for Period·(Burst+1)/Limit after a
// burst, as its caller asked; what a peer may claim is bounded by the same
// maxima.)
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
