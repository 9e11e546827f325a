// Package ringview is one published view of the cluster as a node sees it:
// the ring snapshot, whether the node is leaving, the partitions it gained
// from a live previous owner that still wait for that owner's handoff, the
// backups, and a channel closed when a newer view replaces this one. A node
// publishes a new View on every ring change and never modifies one once
// published; readers load the current one with an atomic pointer.
package ringview

import (
	"time"

	"github.com/ringlimit/ringlimit/node/internal/replication"
	"github.com/ringlimit/ringlimit/ring"
)

// View is one published ring state. Its fields are set before it is
// published and read-only after.
type View struct {
	Snap    *ring.Snapshot
	Leaving bool // the node is leaving: it owns nothing
	// Gates[p] is closed when the handoff for partition p has arrived; nil
	// (or a nil slice) means p is open. Deadline bounds the wait (the
	// publication plus HandoffTimeout).
	Gates    []chan struct{}
	Pending  map[string]chan struct{} // previous owner -> its gate
	Deadline time.Time
	// Next is closed when a newer View replaces this one.
	Next chan struct{}
	// Backups holds every partition's backup (see node.Node.Backup); nil
	// when the ring has fewer than two members or replication is off.
	Backups *replication.Backups
	// Mine[p] reports that the node owns partition p (and is not leaving):
	// the owner-local fast path reads it instead of copying the owner's
	// Member and comparing names. nil (views built in tests) means unknown.
	Mine []bool
}

// SetMine fills Mine for the member named self.
func (v *View) SetMine(self string) {
	if v.Snap.Len() == 0 {
		return
	}
	v.Mine = make([]bool, v.Snap.PartitionCount())
	if v.Leaving {
		return
	}
	for p := range v.Mine {
		v.Mine[p] = v.Snap.PartitionOwner(p).Name == self
	}
}

// Gate returns the channel of the partition of a key whose ring hash is h,
// nil when that partition is open.
func (v *View) Gate(h uint64) chan struct{} {
	if v.Gates == nil {
		return nil
	}
	return v.GateOf(v.Snap.PartitionOfHash(h))
}

// GateOf is Gate for partition p.
func (v *View) GateOf(p int) chan struct{} {
	if v.Gates == nil {
		return nil
	}
	g := v.Gates[p]
	if g == nil {
		return nil
	}
	select {
	case <-g:
		return nil
	default:
		return g
	}
}

// Hash returns the ring hash of key.
func (v *View) Hash(key string) uint64 { return v.Snap.Hash(key) }

// Owner returns the owner of the key whose ring hash is h; false when the
// ring is empty.
func (v *View) Owner(h uint64) (ring.Member, bool) { return v.Snap.OwnerOfHash(h) }

// Backup returns the backup of the key whose ring hash is h; false when it
// has none (fewer than two members, or replication off).
func (v *View) Backup(h uint64) (ring.Member, bool) { return v.Backups.OfHash(h) }

// IsLeaving reports Leaving.
func (v *View) IsLeaving() bool { return v.Leaving }

// Members returns the number of members of the ring.
func (v *View) Members() int { return v.Snap.Len() }
