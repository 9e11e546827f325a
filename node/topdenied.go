package node

// This file is the most-limited keys: each node counts the denials its own
// callers got (owner-decided, forwarded and cached denials alike) in a
// bounded summary (node/internal/topdenied). The counts are never metric
// labels (keys are unbounded).

// DeniedKey is one of the most-limited keys: Denials counted over the last
// minute on this node (an overestimate by at most Error, space-saving's
// bound: a key that entered the summary late inherits the count of the key
// it replaced).
type DeniedKey struct {
	Key     string
	Denials int64
	Error   int64
}

// TopDenied returns up to count (1..Config.TopDeniedKeys) of the keys this
// node's callers were denied most over the last minute, most denied first
// (ties by key). Empty when Config.TopDeniedKeys is 0. Keys are the callers'
// own strings: show them to operators, never as metric labels.
func (n *Node) TopDenied(count int) []DeniedKey {
	if n.top == nil || count <= 0 {
		return nil
	}
	es := n.top.Top(min(count, n.top.K()), n.clock())
	out := make([]DeniedKey, len(es))
	for i, e := range es {
		out[i] = DeniedKey(e)
	}
	return out
}

// noteDenied counts a denied check of c for TopDenied (not peeks: a
// denial of 0 hits is a full key looked at, not a caller limited).
func (n *Node) noteDenied(c *Check) {
	if n.top != nil && c.Hits > 0 {
		n.top.Note(c.Key, n.clock())
	}
}
