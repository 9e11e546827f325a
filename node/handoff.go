// Handoff: what a ring change does with the states this node holds, and the
// markers that open a new owner's gate.

package node

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/ringlimit/ringlimit/node/internal/handoff"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// changeFrom returns the ring change from old to ns as this node sees it
// (restarted: the members restarted since old).
func (n *Node) changeFrom(old, ns *ringState, restarted map[string]bool) *handoff.Change {
	return &handoff.Change{Self: n.cfg.Name, Old: old.Snap, Cur: ns.Snap, OldBackups: old.Backups, CurBackups: ns.Backups, Leaving: ns.Leaving, Restarted: restarted}
}

// resync lists as changed the states of the keys this node owns after
// change c whose backup changed (see handoff.Change.Resync), so that the
// next replication send gives the new backup every one of them.
func (n *Node) resync(c *handoff.Change) {
	if !n.owned.Track {
		return
	}
	if parts := c.Resync(); parts != nil {
		snap := c.Cur
		n.owned.MarkWhere(func(h uint64) bool { return parts[snap.PartitionOfHash(h)] })
		n.bans.MarkWhere(func(key string) bool { return parts[snap.Partition(key)] })
	}
}

// handoff moves the states of keys this node no longer owns after change c
// (to ring state ns) to their new owners, then tells every other member of
// the new ring that its handoff for this ring is complete, naming the
// members its recent changes passed their partitions to (handoff.Plan,
// handoff.Successors). This node keeps a copy of what it hands
// off where it is the key's new backup, keeps the replicas it is still the
// backup of, and hands a restarted member the replicas of its keys. States a
// member refuses (it is leaving too) go to their owners in the ring without
// it (handoff.Batches.Deliver).
func (n *Node) handoff(ns *ringState, c *handoff.Change) {
	self := n.cfg.Name
	snap := ns.Snap
	if n.hellos.Len() > 2*snap.Len()+16 {
		live := n.Members()
		names := make([]string, len(live))
		for i := range live {
			names[i] = live[i].Name
		}
		n.hellos.Keep(names)
	}
	n.handOffHolds(ns)
	// States handed here by mistake that strayLoop has not passed on yet go
	// with this handoff, before its markers (handoff.Change.MoveListed).
	listed := n.strays.Take()
	moved := n.owned.Extract(func(h uint64) store.MoveAction {
		return c.MoveListed(h, listed[h] || h == 1 && listed[0], store.MoveSend) // a hash 0 is stored as 1
	}, n.clock())
	// Ban states move as key states do, except that a replica this node no
	// longer backs up is dropped: its owner holds the whole of it, and a
	// handed-off ban state is merged (its denials would count twice).
	movedBans := n.bans.Extract(func(key string) store.MoveAction {
		return c.Move(snap.Hash(key), store.MoveDrop)
	})
	bt := handoff.Plan(c, moved, movedBans)
	n.successors.Note(c)
	after := n.successors.After(snap, self, n.cfg.HandoffTimeout+n.cfg.ForwardTimeout)
	lost := bt.Lost
	if len(bt.States) == 0 {
		if lost > 0 {
			// The whole cluster is stopping (or this was its last member): there is
			// no one to take these states. Expected, so INFO, but said.
			n.log.Info("handoff: no member left to take the keys; their state ends with this node", "keys", lost)
		}
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.HandoffTimeout)
	defer cancel()
	more, err := bt.Deliver(ctx, snap.Members(), n.cfg.Ring, func(ctx context.Context, name, addr string, states []transport.KeyState, bans []transport.PenaltyState) error {
		return n.peers.Handoff(ctx, addr, transport.TransferBatch{From: self, RingDigest: snap.Digest(), States: states, Done: true, Penalties: bans, After: after[name], Leaving: ns.Leaving})
	}, n.sendHandoff(snap), func(failed []string, err error) {
		n.log.Info("handoff: sending again the keys of members that did not take them", "members", failed, "err", err)
	})
	lost += more
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.Handoff(len(moved), time.Since(start), err)
	}
	switch {
	case errors.Is(err, handoff.ErrNoneLeft):
		// Every member is leaving too (the whole cluster stops): expected, so
		// INFO, but said.
		n.log.Info("handoff: every member is leaving; these keys' states end with them", "keys", len(moved), "lost", lost)
		return
	case err != nil || lost > 0:
		n.log.Warn("handoff incomplete", "keys", len(moved), "lost", lost, "err", err)
		return
	}
	n.log.Info("handoff", "keys", len(moved), "to", len(bt.States), "took", time.Since(start))
}

// sendHandoff returns the send of handed-off states with no marker under
// ring snap: to a peer, or installed here when the ring without the
// members that refused gives them to this node.
func (n *Node) sendHandoff(snap *ring.Snapshot) handoff.SendFunc {
	return func(ctx context.Context, name, addr string, states []transport.KeyState, bans []transport.PenaltyState) error {
		b := transport.TransferBatch{From: n.cfg.Name, Sender: n.cfg.Name, RingDigest: snap.Digest(), States: states, Penalties: bans}
		if name == n.cfg.Name {
			return peerService{n}.Transfer(ctx, b)
		}
		return n.peers.Handoff(ctx, addr, b)
	}
}

// markHandoffDone records that from finished handing off for the ring with
// the given digest, naming in after the members that may still hold states
// of the partitions it passed on (see handoff.Marks.Done), and opens the
// partitions of the current ring waiting for it.
func (n *Node) markHandoffDone(from string, digest uint64, after []string) {
	var rs *ringState
	opened := n.marks.Done(from, digest, after, func() (*ring.Snapshot, map[string]chan struct{}) {
		rs = n.rs.Load()
		return rs.Snap, rs.Pending
	})
	if opened && n.log.Enabled(context.Background(), slog.LevelDebug) {
		n.log.Debug("handoff gate opened", "from", from, "after", time.Since(rs.Deadline.Add(-n.cfg.HandoffTimeout)))
	}
}

// noteStrays lists for strayLoop the handed-off states just installed (ring
// hashes hs) of keys this node does not own under rs: that happens when the
// sender's ring was older than this node's (members joining at once, a
// member restoring its snapshot while the others' rings still change). This
// node's handoff for its current ring has run already, so without strayLoop
// such a state would stay here until the next ring change, unseen by its
// owner, who would decide the key on what it holds (this node may be the
// key's backup: replication goes from owner to backup only).
func (n *Node) noteStrays(rs *ringState, hs []uint64) {
	if rs.Snap.Len() == 0 || rs.Leaving {
		return // before the first ring (restore): the first ring's handoff moves them
	}
	n.strays.Add(hs, func(h uint64) bool {
		m, ok := rs.Snap.OwnerOfHash(h)
		return ok && m.Name != n.cfg.Name
	})
}

// strayLoop passes the states noteStrays listed on to their owners under the
// current ring: after MembershipDebounce (rings that disagree settle first,
// so a state is not sent back and forth), under rebuildMu (after the handoff
// of the current ring), it extracts them, keeping a copy where this node is
// the key's backup, and hands them to their owners, who merge them as any
// handoff, with no end-of-handoff marker. A listed state this node now owns
// stays; so does a copy of every state passed on, so a pass-on never loses a
// state (a failed send is logged).
func (n *Node) strayLoop() {
	defer n.wg.Done()
	n.strays.Run(n.stop, n.cfg.MembershipDebounce, func() {
		n.rebuildMu.Lock()
		defer n.rebuildMu.Unlock()
		n.passOnStrays()
	})
}

// passOnStrays is one pass of strayLoop; rebuildMu is held.
func (n *Node) passOnStrays() {
	listed := n.strays.Take()
	rs := n.rs.Load()
	if len(listed) == 0 || rs.Leaving || n.stopping.Load() || rs.Snap.Len() == 0 {
		return
	}
	self := n.cfg.Name
	moved := n.owned.Extract(func(h uint64) store.MoveAction {
		if !listed[h] && !(h == 1 && listed[0]) { // a hash 0 is stored as 1
			return store.MoveKeep
		}
		if m, ok := rs.Snap.OwnerOfHash(h); !ok || m.Name == self {
			return store.MoveKeep
		}
		// Always a copy: the owner merges it (the more restrictive state
		// wins), and this node keeps what it had, as it did before passing
		// strays on. Moving it instead lost it whenever this node's ring was
		// the stale one: in a rolling restart the leaver's handoff arrives
		// before its leave, the key's owner is then still the leaver, and a
		// state sent back to it was gone with it (keys up to +87 over at 20
		// members).
		return store.MoveSendCopy
	}, n.clock())
	if len(moved) == 0 {
		return
	}
	bt := handoff.NewBatches()
	for i := range moved {
		if m, ok := rs.Snap.OwnerOfHash(moved[i].H); ok {
			bt.AddState(m.Name, m.Addr, &moved[i])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.HandoffTimeout)
	defer cancel()
	// An owner that refuses (it is leaving) is left out, as in a handoff:
	// the copy kept here would reach the key's next owner only with this
	// node's next ring change, and that owner, gaining the key from a member
	// that is gone, decides it at once (keys up to twice their limit when
	// 10 of 20 members left at once).
	lost, err := bt.Deliver(ctx, rs.Snap.Members(), n.cfg.Ring, n.sendHandoff(rs.Snap), n.sendHandoff(rs.Snap), func([]string, error) {})
	if err != nil || lost > 0 {
		n.log.Warn("passing handed-off states on to their owner failed", "keys", len(moved), "not_taken", lost, "err", err)
		return
	}
	n.log.Info("passed handed-off states on to their owners", "keys", len(moved), "to", len(bt.States))
}

// waitHandoff waits until gate g of partition p in ring state rs opens (its
// previous owner's handoff arrived), ctx ends (its error) or the node stops
// (ErrStopped); a gate given up (see handoff.Hellos.Wait for when: a member
// joining a large fleet under load is heard of by the last members seconds
// after its first ring) returns nil, and the partition is decided on the
// state at hand. When rs is replaced meanwhile, the wait goes on on p's gate
// in the new ring, if it has one, still bounded by rs's deadline (a check
// does not wait HandoffTimeout again for each ring of a burst); errNotOwner
// when the new ring gives p to another member (the caller routes again).
func (n *Node) waitHandoff(ctx context.Context, rs *ringState, p int, g chan struct{}) error {
	deadline := rs.Deadline
	for {
		err := n.waitGate(ctx, rs, g, deadline)
		if !errors.Is(err, errRingMoved) {
			return err
		}
		rs = n.rs.Load()
		if m := rs.Snap.PartitionOwner(p); rs.Leaving || m.Name != n.cfg.Name {
			return errNotOwner
		}
		if g = rs.GateOf(p); g == nil {
			return nil // open in the new ring
		}
	}
}

// errRingMoved is waitGate's error when the gate's ring was replaced.
var errRingMoved = errors.New("node: ring replaced while waiting for a handoff")

// waitGate is one ring's part of waitHandoff, with the deadline of the
// first ring's gate: errRingMoved when rs is replaced before g opens or is
// given up.
func (n *Node) waitGate(ctx context.Context, rs *ringState, g chan struct{}, deadline time.Time) error {
	if rs.Deadline.Before(deadline) {
		deadline = rs.Deadline
	}
	from, id := "", ""
	for name, pg := range rs.Pending {
		if pg == g {
			from = name
			break
		}
	}
	for _, m := range rs.Snap.Members() {
		if m.Name == from {
			id = m.ID
		}
	}
	ft := n.cfg.ForwardTimeout
	if from == handoff.Everyone {
		ft = 0 // no one member to hear from: given up at the deadline
	}
	out, err := n.hellos.Wait(ctx, handoff.Gate{
		C: g, From: from, ID: id, Deadline: deadline, HandoffTimeout: n.cfg.HandoffTimeout, ForwardTimeout: ft,
		Moved: rs.Next,
	}, n.stop, ErrStopped, n.log)
	if err != nil || out == handoff.Opened {
		return err
	}
	if out == handoff.Moved {
		return errRingMoved
	}
	reason := "its previous owner never said hello"
	if out == handoff.ExpiredHeard {
		reason = "its previous owner said hello"
	}
	if mk, ok := n.marks.Kept(from); ok && mk.Digest != rs.Snap.Digest() {
		reason += "; its marker came for another ring"
	}
	n.log.Debug("handoff gate expired: deciding on the state at hand", "from", from, "reason", reason, "waited", time.Since(deadline.Add(-n.cfg.HandoffTimeout)).Round(time.Millisecond))
	return nil
}
