package node

import (
	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/peerinput"
)

// Peer input judged by this node's own bounds (node/internal/peerinput): the
// maxima every Limit must respect (Config.MaxPeriod, Config.MaxLimit), in a
// check or under a peer's key state, and the rate-limited log of what is
// refused.

// withinMaxima returns nil if l is within this node's maxima, else an
// *InputError (Err ErrLimitAboveMax) naming the field (see
// peerinput.Within). A client's check, a peer's forwarded check and a peer's
// key state (handoff, replica) are judged by it alike.
func (n *Node) withinMaxima(l algo.Limit) error {
	return peerinput.Within(l, n.cfg.MaxPeriod, n.cfg.MaxLimit)
}

// WithinMaxima returns nil if this node accepts a check under l as to its
// size, else the *InputError (matching ErrLimitAboveMax and ErrInvalid) such
// a check gets: Period above MaxPeriod, Limit or Burst above MaxLimit, or a
// GCRA or TokenBucket burst that takes longer than MaxPeriod to drain. A
// layer that decides some checks elsewhere (the failover limiter's Redis)
// calls it first, so that every path refuses what the node refuses.
func (n *Node) WithinMaxima(l algo.Limit) error { return n.withinMaxima(l) }

// logEvery lets a log line through at most once per second (see
// peerinput.LogEvery).
type logEvery struct{ peerinput.LogEvery }

// allow reports whether a line may be logged now, and how many were held
// back before it.
func (l *logEvery) allow() (ok bool, held int64) { return l.Allow() }

// refusedState counts a key state (or ban state) refused from peer from, and
// logs it at most once a second.
func (n *Node) refusedState(from, key string, err error) {
	n.refusedStates.Add(1)
	n.refused("state")
	if ok, held := n.refusedLog.allow(); ok {
		n.log.Warn("refused a peer's key state; the rest of its batch is kept", "from", from, "key", key, "err", err, "refused_total", n.refusedStates.Load(), "not_logged", held)
	}
}
