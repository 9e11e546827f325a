// Handoff: what a ring change does with the states this node holds, and the
// markers that open a new owner's gate.

package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/node/internal/handoff"
	"github.com/ringlimit/ringlimit/node/internal/membership"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// moveOf says what the ring change from old to ns does with the state this
// node holds of the key with ring hash h: keep it (owned, or still its
// replica), hand it to the new owner (and keep a copy where this node is the
// key's new backup, or the new owner is a restarted member it backs up), or,
// for a state that is neither, stray (stale replica or handed to it by
// mistake): stray, store.MoveSend or store.MoveDrop.
func (n *Node) moveOf(ns *ringState, old *ring.Snapshot, restarted map[string]bool, h uint64, stray store.MoveAction) store.MoveAction {
	self := n.cfg.Name
	m, ok := ns.snap.OwnerOfHash(h)
	switch {
	case !ok || ns.leaving:
		return store.MoveSend
	case m.Name == self:
		return store.MoveKeep
	}
	wasOwner := old.Len() == 0
	if !wasOwner {
		o, _ := old.OwnerOfHash(h)
		wasOwner = o.Name == self
	}
	if b, ok := ns.backupOfHash(h); ok && b.Name == self {
		if wasOwner || restarted[m.Name] {
			return store.MoveSendCopy
		}
		return store.MoveKeep // still its replica
	}
	if wasOwner {
		return store.MoveSend
	}
	return stray
}

// restartedMembers returns the names of the members of cur that are also in
// old under another instance id: processes restarted under the same name.
func restartedMembers(old, cur *ring.Snapshot) map[string]bool {
	return membership.Restarted(old.Members(), cur.Members(), func(m ring.Member) (string, string) { return m.Name, m.ID })
}

// resync lists as changed the states of the keys this node owns under ns
// whose backup differs from old's (or restarted), so that the next
// replication send gives the new backup every one of them.
func (n *Node) resync(old, ns *ringState, restarted map[string]bool) {
	if ns.backups == nil || ns.leaving || !n.owned.Track {
		return
	}
	self := n.cfg.Name
	snap := ns.snap
	parts := make([]bool, snap.PartitionCount())
	any := false
	for p := range parts {
		if snap.PartitionOwner(p).Name != self {
			continue
		}
		b := ns.backups.of(p).Name
		prevOwner, prevBackup := "", ""
		if old.snap.Len() > 0 && old.snap.PartitionCount() == len(parts) {
			prevOwner = old.snap.PartitionOwner(p).Name
		}
		if old.backups != nil && old.backups.partitions() == len(parts) {
			prevBackup = old.backups.of(p).Name
		}
		if prevOwner != self || prevBackup != b || restarted[b] {
			parts[p] = true
			any = true
		}
	}
	if any {
		n.owned.MarkWhere(func(h uint64) bool { return parts[snap.PartitionOfHash(h)] })
		n.bans.MarkWhere(func(key string) bool { return parts[snap.Partition(key)] })
	}
}

// handoff moves the states of keys this node no longer owns under ns to their
// new owners, then tells every member that gained partitions in this change
// (from this node or another) that its handoff for this ring is complete. This
// node keeps a copy of what it hands off where it is the key's new backup,
// keeps the replicas it is still the backup of, and hands a restarted member
// (restarted) the replicas of its keys.
func (n *Node) handoff(ns *ringState, old *ring.Snapshot, restarted map[string]bool) {
	self := n.cfg.Name
	snap := ns.snap
	if n.hellos.size() > 2*snap.Len()+16 {
		n.hellos.keep(n.Members())
	}
	n.handOffHolds(ns)
	moved := n.owned.Extract(func(h uint64) store.MoveAction {
		return n.moveOf(ns, old, restarted, h, store.MoveSend)
	}, n.clock())
	// Ban states move as key states do, except that a replica this node no
	// longer backs up is dropped: its owner holds the whole of it, and a
	// handed-off ban state is merged (its denials would count twice).
	movedBans := n.bans.Extract(func(key string) store.MoveAction {
		return n.moveOf(ns, old, restarted, snap.Hash(key), store.MoveDrop)
	})
	bt := handoff.NewBatches()
	for p := 0; p < snap.PartitionCount(); p++ {
		m := snap.PartitionOwner(p)
		// Every member that gained a partition gets this node's marker, not
		// only those that gained it from this node: the new owner gates the
		// partition on its own previous ring's owner, and when the two nodes
		// came through different rings (a change one of them coalesced or
		// saw later) that may be this node, which then never owned it and
		// had nothing to send; without a marker the gate waited out
		// HandoffTimeout. A marker says only that this node holds nothing
		// more of the new owner's partitions, which is true of every one.
		gained := old.Len() > 0 && old.PartitionOwner(p).Name != m.Name && m.Name != self && m.Name != ""
		// A restarted member waits for a marker from the owner each of its
		// partitions would have without it: its backup.
		gained = gained || restarted[m.Name] && ns.backups != nil && ns.backups.of(p).Name == self
		if gained {
			bt.Mark(m.Name, m.Addr)
		}
	}
	for i := range moved {
		if m, ok := snap.OwnerOfHash(moved[i].H); ok {
			bt.AddState(m.Name, m.Addr, &moved[i])
		} else {
			bt.Lost++
		}
	}
	for _, ps := range movedBans {
		if m, ok := snap.Owner(ps.Key); ok {
			bt.AddBan(m.Name, m.Addr, ps)
		} else {
			bt.Lost++
		}
	}
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
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for name, states := range bt.States {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := n.peers.Handoff(ctx, bt.Addrs[name], transport.TransferBatch{
				From: self, RingDigest: snap.Digest(), States: states, Done: true, Penalties: bt.Bans[name],
			})
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("to %s (%d keys): %w", name, len(states), err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	err := errors.Join(errs...)
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.Handoff(len(moved), time.Since(start), err)
	}
	if err != nil || lost > 0 {
		n.log.Warn("handoff incomplete", "keys", len(moved), "lost", lost, "err", err)
		return
	}
	n.log.Info("handoff", "keys", len(moved), "to", len(bt.States), "took", time.Since(start))
}

// markHandoffDone records that from finished handing off for the ring with the
// given digest, and opens the partitions waiting for it. A marker for the
// current ring opens its gate and is not kept; one for another ring is kept
// for the rebuild that publishes that ring, which uses it only if it arrived
// within HandoffTimeout. A ring's digest is a function of the member names
// alone, so the same digest comes back whenever a member restarts under its
// name: a marker kept for good would open the gate of a later change whose
// handoff has not arrived, and its new owner would decide on no state.
func (n *Node) markHandoffDone(from string, digest uint64) {
	n.marksMu.Lock()
	defer n.marksMu.Unlock()
	rs := n.rs.Load()
	if rs.snap.Digest() != digest {
		n.marks[from] = handoffMark{digest: digest, at: time.Now()}
		return
	}
	delete(n.marks, from)
	if g := rs.pending[from]; g != nil {
		select {
		case <-g:
		default:
			close(g)
			if n.log.Enabled(context.Background(), slog.LevelDebug) {
				n.log.Debug("handoff gate opened", "from", from, "after", time.Since(rs.deadline.Add(-n.cfg.HandoffTimeout)))
			}
		}
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
	if rs.snap.Len() == 0 || rs.leaving {
		return // before the first ring (restore): the first ring's handoff moves them
	}
	self := n.cfg.Name
	added := false
	for _, h := range hs {
		if m, ok := rs.snap.OwnerOfHash(h); ok && m.Name != self {
			n.strayMu.Lock()
			if n.strays == nil {
				n.strays = make(map[uint64]bool)
			}
			n.strays[h] = true
			n.strayMu.Unlock()
			added = true
		}
	}
	if added {
		select {
		case n.straySig <- struct{}{}:
		default: // a pass is pending already
		}
	}
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
	for {
		select {
		case <-n.stop:
			return
		case <-n.straySig:
		}
		if d := n.cfg.MembershipDebounce; d > 0 {
			t := time.NewTimer(d)
			select {
			case <-n.stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		n.rebuildMu.Lock()
		n.passOnStrays()
		n.rebuildMu.Unlock()
	}
}

// passOnStrays is one pass of strayLoop; rebuildMu is held.
func (n *Node) passOnStrays() {
	n.strayMu.Lock()
	listed := n.strays
	n.strays = nil
	n.strayMu.Unlock()
	rs := n.rs.Load()
	if len(listed) == 0 || rs.leaving || n.stopping.Load() || rs.snap.Len() == 0 {
		return
	}
	self := n.cfg.Name
	moved := n.owned.Extract(func(h uint64) store.MoveAction {
		if !listed[h] && !(h == 1 && listed[0]) { // a hash 0 is stored as 1
			return store.MoveKeep
		}
		if m, ok := rs.snap.OwnerOfHash(h); !ok || m.Name == self {
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
		if m, ok := rs.snap.OwnerOfHash(moved[i].H); ok {
			bt.AddState(m.Name, m.Addr, &moved[i])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.HandoffTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for name, states := range bt.States {
		wg.Go(func() {
			err := n.peers.Handoff(ctx, bt.Addrs[name], transport.TransferBatch{From: self, RingDigest: rs.snap.Digest(), States: states})
			if err != nil {
				n.log.Warn("passing handed-off states on to their owner failed", "to", name, "keys", len(states), "err", err)
				return
			}
			n.log.Info("passed handed-off states on to their owner", "to", name, "keys", len(states))
		})
	}
	wg.Wait()
}

// hellos records, per member name, the instance of that member that last
// said Hello to this node (an admission handshake or a probe) and when it
// first did: a member says Hello to this node's instance only once its own
// gossip holds that instance, and only then can it put this node in its ring
// and hand it the partitions it gains. waitHandoff uses it to tell a
// previous owner that is slow to hand off (its gate expires after
// HandoffTimeout) from one that has not heard of this node yet (its gate
// waits for it).
type hellos struct {
	mu   sync.Mutex
	seen map[string]helloSeen
	// sig is closed (and set to nil) when a member is first heard; nil
	// while nobody waits.
	sig chan struct{}
}

type helloSeen struct {
	id string
	at time.Time
}

// note records a Hello from instance id of member name.
func (h *hellos) note(name, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.seen[name]; ok && s.id == id {
		return
	}
	if h.seen == nil {
		h.seen = make(map[string]helloSeen)
	}
	h.seen[name] = helloSeen{id: id, at: time.Now()}
	if h.sig != nil {
		close(h.sig)
		h.sig = nil
	}
}

// heard returns when instance id of member name first said Hello, or false
// and a channel closed when any member is next heard.
func (h *hellos) heard(name, id string) (time.Time, bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.seen[name]; ok && s.id == id {
		return s.at, true, nil
	}
	if h.sig == nil {
		h.sig = make(chan struct{})
	}
	return time.Time{}, false, h.sig
}

// size returns the number of members recorded.
func (h *hellos) size() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// keep forgets the members not in live (gossip's members): a fleet whose
// members take new names on every deploy would otherwise grow it forever.
func (h *hellos) keep(live []Member) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) <= len(live) {
		return
	}
	in := make(map[string]bool, len(live))
	for _, m := range live {
		in[m.Name] = true
	}
	for name := range h.seen {
		if !in[name] {
			delete(h.seen, name)
		}
	}
}

// waitHandoff waits until gate g of ring state rs opens (its previous
// owner's handoff arrived), ctx ends (its error) or the node stops
// (ErrStopped). A gate left closed is given up, and the partition decided
// on the state at hand, HandoffTimeout after the later of the ring's
// publication and the previous owner's first Hello to this instance: until
// that Hello the previous owner has not heard of this node, has not put it
// in its ring, still decides the partition's keys itself, and has handed
// nothing off, so a decision here would be on an empty state beside it. A
// member joining a large fleet under load is heard of by the last members
// seconds after its first ring (gossip's spread, then their handshakes);
// the members that heard first meanwhile forward the partition's checks
// here. A previous owner that never says Hello (it crashed, or refuses this
// node) is waited for at most ForwardTimeout more (the forwarding member
// gives up then anyway).
func (n *Node) waitHandoff(ctx context.Context, rs *ringState, g chan struct{}) error {
	deadline := rs.deadline
	from, id := "", ""
	for name, pg := range rs.pending {
		if pg == g {
			from = name
			break
		}
	}
	for _, m := range rs.snap.Members() {
		if m.Name == from {
			id = m.ID
		}
	}
	limit := deadline.Add(n.cfg.ForwardTimeout)
	for {
		heardAt, heard, sig := n.hellos.heard(from, id)
		dl := limit
		if heard {
			dl = deadline
			if d := heardAt.Add(n.cfg.HandoffTimeout); d.After(dl) {
				dl = d
			}
		}
		t := time.NewTimer(time.Until(dl))
		select {
		case <-g:
			t.Stop()
			return nil
		case <-sig:
			t.Stop()
			if !heard && time.Now().After(deadline) {
				n.log.Debug("handoff gate held past HandoffTimeout: its previous owner said hello late", "from", from)
			}
			continue
		case <-t.C:
			reason := "its previous owner never said hello"
			if heard {
				reason = "its previous owner said hello"
			}
			n.marksMu.Lock()
			if mk, ok := n.marks[from]; ok && mk.digest != rs.snap.Digest() {
				reason += "; its marker came for another ring"
			}
			n.marksMu.Unlock()
			n.log.Debug("handoff gate expired: deciding on the state at hand", "from", from, "reason", reason, "waited", time.Since(deadline.Add(-n.cfg.HandoffTimeout)).Round(time.Millisecond))
			return nil
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-n.stop:
			t.Stop()
			return ErrStopped
		}
	}
}
