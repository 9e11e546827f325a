// Persistence (Config.StateDir): the snapshot of the key states this node
// holds, written periodically and at Close or Abort, and restored at New
// through the handoff path. The file itself (atomic writes, the whole-file
// check before a restore, the counters) is node/internal/persist's.

package node

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/membership"
	"github.com/ringlimit/ringlimit/node/internal/persist"
	"github.com/ringlimit/ringlimit/node/internal/snapshot"
	"github.com/ringlimit/ringlimit/transport"
)

// ErrSnapshot is wrapped by the errors of writing or restoring a snapshot
// (Config.StateDir). They never fail New or Close: a snapshot that cannot be
// written is logged and counted (Stats.SnapshotFailures), and so is one that
// cannot be restored, after which the node starts empty.
var ErrSnapshot = persist.ErrSnapshot

// DefaultSnapshotInterval is Config.SnapshotInterval in DefaultConfig.
const DefaultSnapshotInterval = 30 * time.Second

// openStateDir creates Config.StateDir if needed, checks that a file can be
// created in it (an error wrapping ErrInvalidConfig otherwise) and restores
// the snapshot found there. Called by New before the first ring is built, so
// the restored states are in the store before any check is decided, and the
// first rebuild hands those of keys other members own to them (see restore).
func (n *Node) openStateDir() error {
	p, err := persist.Open(n.cfg.StateDir, n.cfg.Name)
	if err != nil {
		return fmt.Errorf("%w: StateDir: %w", ErrInvalidConfig, err)
	}
	n.persist = p
	n.restore()
	return nil
}

// restore installs the states of the snapshot file as a handoff from this
// node's past self: each is judged by peerinput.CheckKeyState (valid Limit within
// MaxPeriod and MaxLimit, plausible, not later than now + MaxPeerClockSkew,
// caller clocks only with AcceptCallerTimestamps), refused ones are counted
// in Stats.RefusedStates and logged, the rest are merged into the store as
// a handoff's are (peersvc.Service.InstallHandoff: a key held already keeps
// the more restrictive state; new keys count against MaxKeys). Ban states (AllowPenalized) are judged
// and merged as a handoff's too (a key of at most MaxKeyLen bytes, no denial
// after now + MaxPeerClockSkew; the later ban wins). A file that is missing,
// torn, altered, of another format version or of another ClusterLabel
// starts the node empty (see persist.File.Restore).
//
// The states are not this node's to keep: it installs them before its first
// ring, and that ring's handoff sends every state of a key another member
// owns to it (keeping a copy where this node is the key's backup), exactly as
// a ring change sends the states of keys a member no longer owns. The owner
// merges the copies it gets from its own snapshot, from the key's backup and
// from any member that held the key earlier, keeping the more restrictive.
func (n *Node) restore() {
	from := "state snapshot " + n.persist.Path()
	banOK := func(key string) bool {
		if err := algo.ValidateKey(key, n.cfg.MaxKeyLen, ErrInvalid); err != nil {
			n.refusedState(from, key, fmt.Errorf("%w: ban state: %w", ErrRefusedState, err))
			return false
		}
		return true
	}
	n.persist.Restore(n.cfg.ClusterLabel, n.log, banOK, func(b transport.TransferBatch) (ok, refused int) {
		cb, _ := n.psvc.CheckTransfer(b) // Sender is From: no error
		n.psvc.InstallHandoff(b, cb)
		for i := range b.States {
			if cb.RefusedAt(i) {
				refused++
			} else {
				ok++
			}
		}
		for i := range b.Penalties {
			if cb.PenRefusedAt(i) {
				refused++
			} else {
				ok++
			}
		}
		return ok, refused
	})
}

// writeSnapshot saves every state this node holds (as owner or as backup)
// whose window is still open, and every ban state still in force, to the
// snapshot file atomically (persist.File.Write). final marks the last
// snapshot (Close, Abort): every write after it is skipped. Without StateDir
// it does nothing.
func (n *Node) writeSnapshot(why string, final bool) error {
	if n.persist == nil {
		return nil
	}
	h := snapshot.Header{Cluster: n.cfg.ClusterLabel, Node: n.cfg.Name}
	return n.persist.Write(why, final, h, n.clock(), n.owned, n.bans, n.log)
}

// snapshotLoop writes a snapshot every Config.SnapshotInterval until the node
// stops.
func (n *Node) snapshotLoop() {
	defer n.wg.Done()
	membership.Every(n.stop, n.cfg.SnapshotInterval, func() bool {
		_ = n.writeSnapshot("periodic", false)
		return true
	})
}

// persistStats fills the snapshot counters of s.
func (n *Node) persistStats(s *Stats) {
	if p := n.persist; p != nil {
		s.SnapshotWrites, s.SnapshotFailures, s.RestoredStates = p.Counts()
	}
}
