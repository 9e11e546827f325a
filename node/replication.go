package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/node/internal/replication"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// Replication and backups (see Config.Replication).
//
// The backup of a key is its owner in the ring without the key's owner: the
// member that becomes the owner when the owner leaves or is declared dead.
// Every node computes the same backups from the same member set (the ring is a
// function of the member names), so the backup already holds the state of
// every key it gains in a crash. Owners and replicas share one store: a node
// is never owner and backup of the same key, and when a crash makes the backup
// the owner its replica simply is the owned state (no copy, no window).

// backupTable is the backup of every partition of one ring snapshot: the
// snapshot's own table (ring.Snapshot.PartitionBackup), an index per
// partition into its members, so a lookup touches 4 bytes per partition (a
// Member per partition, 196 KiB at 4,093 partitions, missed the cache on
// every replication send).
type backupTable struct {
	snap *ring.Snapshot
}

// of returns the backup of partition p (the zero Member when it has none).
func (t *backupTable) of(p int) ring.Member {
	m, _ := t.snap.PartitionBackup(p)
	return m
}

// partitions returns the number of partitions t covers.
func (t *backupTable) partitions() int { return t.snap.PartitionCount() }

// computeBackups returns the backup table of snap (nil when snap has fewer
// than two members or replication is off). The snapshot computes every
// partition's backup once, one bounded-load pass per member over its circle:
// O(members × partitions), 1,000 members in well under a second (see
// BenchmarkMembershipChange); the ring per member this used to build cost
// O(members² × virtual nodes). Called under rebuildMu.
func (n *Node) computeBackups(snap *ring.Snapshot) *backupTable {
	if snap.Len() < 2 || n.cfg.Replication == ReplicationOff {
		return nil
	}
	if _, ok := snap.PartitionBackup(0); !ok {
		n.log.Error("backup table: partition 0 has no backup; the ring without its owner cannot be placed")
	}
	return &backupTable{snap: snap}
}

// backupOfHash returns the backup of the key whose ring hash is h.
func (rs *ringState) backupOfHash(h uint64) (ring.Member, bool) {
	if rs.backups == nil {
		return ring.Member{}, false
	}
	m := rs.backups.of(rs.snap.PartitionOfHash(h))
	return m, m.Name != ""
}

// Backup returns the member that holds key's replica and would own key if its
// owner disappeared: its owner in the ring without its owner. False when the
// ring has fewer than two members or Replication is ReplicationOff.
func (n *Node) Backup(key string) (Member, bool) {
	rs := n.rs.Load()
	m, ok := rs.backupOfHash(rs.snap.Hash(key))
	if !ok {
		return Member{}, false
	}
	return Member{Name: m.Name, Addr: m.Addr, ID: m.ID, Self: m.Name == n.cfg.Name}, true
}

// replicator sends changed states to their backups. started counts sends
// begun, done the sends finished (successfully or not); doneCh is closed and
// replaced when a send finishes, to wake ReplicationSync callers.
type replicator struct {
	kick    chan struct{}
	started atomic.Uint64
	done    atomic.Uint64
	doneCh  atomic.Pointer[chan struct{}]
	// scratch is reused by every send; only the replication loop (the one
	// caller of replicate) touches it.
	scratch replication.Scratch
	// backoff holds, per backup, the sends that failed in a row; only the
	// replication loop touches the map (a send's goroutine its own entry).
	backoff map[string]*replication.Backoff
}

func newReplicator() *replicator {
	r := &replicator{kick: make(chan struct{}, 1)}
	ch := make(chan struct{})
	r.doneCh.Store(&ch)
	return r
}

// replicationLoop sends the changed states every ReplicationLag, and at once
// when a ReplicationSync caller waits.
func (n *Node) replicationLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.ReplicationLag)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		case <-n.repl.kick:
		}
		n.replicate()
	}
}

// replicate sends every state changed since the last send to its key's backup
// (one request per backup: one after another under ReplicationAsync,
// concurrently under ReplicationSync), then wakes the callers waiting for
// this send. A send that fails lists its keys as changed again, so the next
// send retries them; a ring change lists every key whose backup changed.
func (n *Node) replicate() {
	r := n.repl
	gen := r.started.Add(1)
	defer func() {
		r.done.Store(gen)
		ch := make(chan struct{})
		close(*r.doneCh.Swap(&ch))
	}()
	rs := n.rs.Load()
	if rs.backups == nil {
		// No backup (one member, or replication off): forget the changes
		// without copying them; a ring change that brings backups lists every
		// owned key again (resync).
		n.owned.ClearDirty()
		return
	}
	sc := &r.scratch
	sc.Ms = n.owned.TakeDirtyInto(n.clock(), sc.Ms[:0])
	ms := sc.Ms
	pens := n.bans.TakeDirty()
	if len(ms) == 0 && len(pens) == 0 {
		return
	}
	defer sc.Done()
	sc.Reset()
	self := n.cfg.Name
	// Every state's bytes back to back in one buffer: a state's slice of it
	// stays valid if a later append moves the buffer (it keeps the old array).
	buf := sc.Buf[:0]
	for i := range ms {
		m := &ms[i]
		owner, ok := rs.snap.OwnerOfHash(m.H)
		if !ok || owner.Name != self || rs.leaving {
			continue // a replica held here, or a key handed off meanwhile
		}
		b, ok := rs.backupOfHash(m.H)
		if !ok {
			continue
		}
		start := len(buf)
		var err error
		if buf, err = m.St.AppendBinary(buf); err != nil {
			continue
		}
		st := buf[start:len(buf):len(buf)]
		d := sc.Dest(b.Name, b.Addr)
		d.Idx = append(d.Idx, int32(i))
		d.States = append(d.States, transport.KeyState{
			KeyHash: m.H, Limit: m.Limit, State: st, LastNow: m.LastNow, CallerClock: m.CallerClock,
			LogDelta: m.Delta, LogAfter: m.After, LogAfterCount: m.AfterN,
		})
	}
	for _, ps := range pens {
		h := rs.snap.Hash(ps.Key)
		owner, ok := rs.snap.OwnerOfHash(h)
		if !ok || owner.Name != self || rs.leaving {
			continue
		}
		b, ok := rs.backupOfHash(h)
		if !ok {
			continue
		}
		d := sc.Dest(b.Name, b.Addr)
		d.Pens = append(d.Pens, transport.PenaltyState(ps))
		d.PenH = append(d.PenH, h)
	}
	sc.Buf = buf
	if r.backoff == nil {
		r.backoff = make(map[string]*replication.Backoff)
	}
	now := time.Now()
	// Under ReplicationAsync the sends go one after another on this
	// goroutine: a goroutine per backup per send, and waking this one when
	// the last finished, cost more than the sends themselves at a 5 ms lag.
	// The next send waits for all of them either way, and each is bounded
	// by ForwardTimeout of its own. Under ReplicationSync
	// callers wait for the slowest, so the backups get theirs at once.
	concurrent := n.cfg.Replication == ReplicationSync
	var wg sync.WaitGroup
	for name, d := range sc.Dests {
		if len(d.States) == 0 && len(d.Pens) == 0 {
			continue
		}
		bo := r.backoff[name]
		if n.breakers.Refusing(name) || bo != nil && now.Before(bo.Until) {
			// Known unreachable, or refusing sends: keep the states for a
			// later send (or for the new backup after the ring drops this
			// one), and do not make a sync caller wait out a send that cannot
			// succeed.
			d.Resend(n.owned, n.bans, ms, nil)
			continue
		}
		if bo == nil {
			bo = &replication.Backoff{}
			r.backoff[name] = bo
		}
		if concurrent {
			wg.Go(func() { n.replicateTo(name, d, bo, ms) })
		} else {
			n.replicateTo(name, d, bo, ms)
		}
	}
	wg.Wait()
	for name, bo := range r.backoff {
		if bo.Fails == 0 && sc.Dests[name] == nil {
			delete(r.backoff, name) // a backup gone from the sends
		}
	}
}

// replicateTo sends d, the part of a replication send for backup name, and
// handles its answer: the states the backup asks for again (need_full) and,
// when the send fails, all of them are listed as changed again; bo is the
// backup's retry schedule. The send is bounded by ForwardTimeout.
func (n *Node) replicateTo(name string, d *replication.Dest, bo *replication.Backoff, ms []store.Moved) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ForwardTimeout)
	defer cancel()
	needFull, err := n.peers.Replicate(ctx, d.Addr, transport.TransferBatch{From: n.cfg.Name, Replica: true, States: d.States, Penalties: d.Pens})
	if len(needFull) > 0 {
		want := make(map[uint64]bool, len(needFull))
		for _, h := range needFull {
			want[h] = true
		}
		d.Resend(n.owned, n.bans, ms, want)
	}
	if errors.Is(err, transport.ErrUnavailable) {
		n.breakers.Fail(name)
	}
	if n.cfg.Metrics != nil {
		if rm, ok := n.cfg.Metrics.(ReplicationMetrics); ok {
			rm.Replicated(name, len(d.States), err)
		}
	}
	if err != nil {
		if errors.Is(err, transport.ErrUnavailable) {
			// The breaker spaces the sends to an unreachable backup.
			n.log.Debug("replication send failed; retrying with the next send", "backup", name, "keys", len(d.States), "err", err)
		} else {
			bo.Failed(time.Now(), n.cfg.ReplicationLag)
			if ok, held := n.replFailLog.allow(); ok {
				n.log.Warn("replication send refused; its states are sent again later", "backup", name, "keys", len(d.States), "err", err, "retry_in", time.Until(bo.Until).Round(time.Millisecond), "not_logged", held)
			}
		}
		d.Resend(n.owned, n.bans, ms, nil)
		return
	}
	bo.Succeeded()
}

// ReplicationMetrics is an optional interface of Config.Metrics: Replicated is
// called after each replication send to a backup with the number of key
// states sent and the send's error (nil on success).
type ReplicationMetrics interface {
	Replicated(backup string, states int, err error)
}

// awaitReplicated waits, under ReplicationSync, until a replication send that
// began after this call has finished: every state changed before the call has
// then reached its backup, or its send failed (it is retried with the next
// send; the decision stands: availability first). Each send is bounded by
// ForwardTimeout, so the wait is at most about twice that. It returns
// ErrStopped if the node stops first, or ctx's error: the decision then must
// not be reported as made (the backup may never learn of it).
func (n *Node) awaitReplicated(ctx context.Context) error {
	if n.cfg.Replication != ReplicationSync || n.rs.Load().backups == nil {
		return nil
	}
	r := n.repl
	want := r.started.Load() + 1
	select {
	case r.kick <- struct{}{}:
	default:
	}
	for {
		ch := *r.doneCh.Load()
		if r.done.Load() >= want {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stop:
			return ErrStopped
		}
	}
}

// acceptReplica installs the replicated states of a checked batch (see
// checkTransfer) that were not refused: a state is kept only when this node is
// the key's backup and the sender its owner in this node's ring; ban states
// likewise. A state of a key this node owns is refused (counted and logged as
// a refused state, see Transfer): a replica may come only from the owner, and
// the previous owner's state reaches a new owner by its handoff. The others
// are skipped and listed in needFull (by ring hash) with the log deltas that
// could not be applied: the rings disagree for a moment (this node joined and
// has not yet seen the ring that makes it the backup), and the owner sends
// them again, whole, with its next send; a sender that is not the owner drops
// them once its own ring says so. A new key that does not fit under MaxKeys is
// not installed (store.install) and not asked for again.
func (n *Node) acceptReplica(b transport.TransferBatch, cb checkedBatch) (needFull []uint64) {
	rs := n.rs.Load()
	self := n.cfg.Name
	states, wall := cb.States, cb.Wall
	scanned := false // one scan for idle keys per batch at the MaxKeys bound
	// Start loading the slots of the first states before installing any
	// (store.prefetch; a replica's slot is a cache miss at a million keys),
	// then keep prefetchAhead states ahead of the one installed.
	const prefetchAhead = 16
	for i := range min(len(b.States), prefetchAhead) {
		if ks := &b.States[i]; ks.Key == "" {
			n.owned.Prefetch(ks.KeyHash, ks.Limit.Kind)
		}
	}
	for i := range b.States {
		ks := &b.States[i]
		if j := i + prefetchAhead; j < len(b.States) && b.States[j].Key == "" {
			n.owned.Prefetch(b.States[j].KeyHash, b.States[j].Limit.Kind)
		}
		if cb.RefusedAt(i) {
			continue
		}
		h := ks.KeyHash
		if ks.Key != "" {
			h = n.owned.Hash(ks.Key)
		}
		owner, ok := rs.snap.OwnerOfHash(h)
		bk, hasB := rs.backupOfHash(h)
		switch {
		case ok && owner.Name == self:
			// Refused (nothing installed), but asked for again whole: right
			// after a restart or join the rings may disagree for a moment,
			// and a log delta refused for good would leave the replica short
			// of its entries once the rings agree.
			n.refusedState(b.From, ks.Key, fmt.Errorf("%w: a replica of key hash %#x, which this node owns", ErrRefusedState, h))
			needFull = append(needFull, h)
		case !ok || !(hasB && bk.Name == self && owner.Name == b.From):
			// The rings disagree (this node has not yet seen the ring change
			// that made it the backup, or has no ring yet right after it
			// joined): ask for the state again, whole, with the next send.
			// The sender drops it from its sends once its own ring says it
			// is no longer the owner.
			needFull = append(needFull, h)
		case ks.LogDelta:
			if !n.owned.AppendLog(h, ks.Limit, states[i], ks.LogAfter, ks.LogAfterCount, ks.LastNow, ks.CallerClock, wall) {
				needFull = append(needFull, h)
			}
		default:
			n.owned.InstallScan(h, ks.Limit, states[i], ks.LastNow, ks.CallerClock, wall, false, &scanned)
		}
	}
	for i, ps := range b.Penalties {
		if cb.PenRefusedAt(i) {
			continue
		}
		h := rs.snap.Hash(ps.Key)
		owner, ok := rs.snap.OwnerOfHash(h)
		bk, hasB := rs.backupOfHash(h)
		switch {
		case ok && owner.Name == self:
			n.refusedState(b.From, ps.Key, fmt.Errorf("%w: a replica of the ban state of a key this node owns", ErrRefusedState))
		case ok && hasB && bk.Name == self && owner.Name == b.From:
			n.bans.Replace(h, store.BanState(ps))
		default:
			needFull = append(needFull, h) // the rings disagree, as for states
		}
	}
	return needFull
}

// errNoBackup is returned by decideViaBackup when the key has no backup
// reachable: the OwnerUnreachable policy decides.
var errNoBackup = errors.New("node: no backup reachable")
