package node

import (
	"context"

	"github.com/ringlimit/ringlimit/node/internal/replication"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// Replication and backups (see Config.Replication): the sends to the backups
// and the replicas' installation are replication.Replicator's; the node holds
// the glue.
//
// The backup of a key is its owner in the ring without the key's owner: the
// member that becomes the owner when the owner leaves or is declared dead.
// Every node computes the same backups from the same member set (the ring is a
// function of the member names), so the backup already holds the state of
// every key it gains in a crash.

// backupTable is the backup of every partition of one ring snapshot
// (ringState.backups).
type backupTable = replication.Backups

// computeBackups returns the backup table of snap (nil when snap has fewer
// than two members or replication is off). Called under rebuildMu.
func (n *Node) computeBackups(snap *ring.Snapshot) *backupTable {
	return replication.NewBackups(snap, n.cfg.Replication != ReplicationOff, n.log)
}

// Backup returns the member that holds key's replica and would own key if its
// owner disappeared: its owner in the ring without its owner. False when the
// ring has fewer than two members or Replication is ReplicationOff.
func (n *Node) Backup(key string) (Member, bool) {
	rs := n.rs.Load()
	m, ok := rs.Backup(rs.Snap.Hash(key))
	if !ok {
		return Member{}, false
	}
	return Member{Name: m.Name, Addr: m.Addr, ID: m.ID, Self: m.Name == n.cfg.Name}, true
}

// newReplicator returns the node's replicator (replication.Config); n.log,
// n.owned, n.bans and n.breakers must be set, n.peers is read per send.
func (n *Node) newReplicator() *replication.Replicator {
	c := replication.Config{
		Self: n.cfg.Name, Owned: n.owned, Bans: n.bans, Breakers: n.breakers, Clock: n.clock, Log: n.log,
		Lag: n.cfg.ReplicationLag, Timeout: n.cfg.ForwardTimeout, Sync: n.cfg.Replication == ReplicationSync,
		Stop: n.stop, Stopped: ErrStopped,
		Ring: func() (*ring.Snapshot, *backupTable, bool) {
			rs := n.rs.Load()
			return rs.Snap, rs.Backups, rs.Leaving
		},
		Send: func(ctx context.Context, addr string, b transport.TransferBatch) ([]uint64, error) {
			return n.peers.Replicate(ctx, addr, b)
		},
	}
	if rm, ok := n.cfg.Metrics.(ReplicationMetrics); ok {
		c.Metrics = rm
	}
	return replication.New(c)
}

// ReplicationMetrics is an optional interface of Config.Metrics: Replicated is
// called after each replication send to a backup with the number of key
// states sent and the send's error (nil on success).
type ReplicationMetrics interface {
	Replicated(backup string, states int, err error)
}

// awaitReplicated waits, under ReplicationSync, until a replication send that
// began after this call has finished (replication.Replicator.Await): nil, or
// ErrStopped if the node stops first, or ctx's error: the decision then must
// not be reported as made (the backup may never learn of it).
func (n *Node) awaitReplicated(ctx context.Context) error { return n.repl.Await(ctx) }
