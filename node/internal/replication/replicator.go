package replication

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/node/internal/peerinput"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// Breakers is what a Replicator needs of the per-peer circuit breakers.
type Breakers interface {
	// Refusing reports whether the breaker of the member named peer refuses
	// sends now (it is known unreachable).
	Refusing(peer string) bool
	// Fail records a failed call to the member named peer.
	Fail(peer string)
}

// Metrics receives the outcome of each replication send (node's
// ReplicationMetrics): the backup's member name, the number of key states
// sent and the send's error (nil on success).
type Metrics interface {
	Replicated(backup string, states int, err error)
}

// Config is what a Replicator needs of its node, built once when the node is
// made: nothing in it is made per send.
type Config struct {
	// Self is the node's member name.
	Self string
	// Owned is the node's store (owned states and replicas alike), Bans its
	// ban states.
	Owned *store.Store
	Bans  *store.Bans
	// Ring returns the node's current ring: its snapshot, its backup table
	// (nil: no backups) and whether the node is leaving (then it sends
	// nothing: its keys are being handed off).
	Ring func() (snap *ring.Snapshot, backups *Backups, leaving bool)
	// Send makes the Replicate call of b to the backup at addr; it returns
	// the ring hashes the backup asks for again, whole (need_full), and an
	// error wrapping transport.ErrUnavailable when the backup cannot be
	// reached.
	Send func(ctx context.Context, addr string, b transport.TransferBatch) (needFull []uint64, err error)
	// Breakers are the node's per-peer circuit breakers.
	Breakers Breakers
	// Clock returns the node's clock (Unix ns), the now of the states taken
	// from Owned.
	Clock func() int64
	// Lag is the time between sends (node's Config.ReplicationLag), Timeout
	// the bound of one send (Config.ForwardTimeout).
	Lag, Timeout time.Duration
	// Sync is true under ReplicationSync: the sends to the backups go
	// concurrently and Await waits for them; else (ReplicationAsync) one
	// after another and Await returns at once.
	Sync bool
	// Metrics receives each send's outcome; nil: none.
	Metrics Metrics
	// Log receives the lines of failed sends.
	Log *slog.Logger
	// Stop is closed when the node stops; Await then returns Stopped.
	Stop    <-chan struct{}
	Stopped error
}

// Replicator sends the changed states of the keys this node owns to their
// backups, and installs the replicas the owners send to it (Accept). Owners
// and replicas share one store: a node is never owner and backup of the same
// key, and when a crash makes the backup the owner its replica simply is the
// owned state (no copy, no window).
type Replicator struct {
	cfg Config
	// kick asks the loop for a send at once (Await).
	kick chan struct{}
	// started counts sends begun, done the sends finished (successfully or
	// not); doneCh is closed and replaced when a send finishes, to wake Await.
	started atomic.Uint64
	done    atomic.Uint64
	doneCh  atomic.Pointer[chan struct{}]
	// scratch is reused by every send; only the loop (the one caller of
	// replicate) touches it.
	scratch Scratch
	// backoff holds, per backup, the sends that failed in a row; only the
	// loop touches the map (a send's goroutine its own entry).
	backoff map[string]*Backoff
	// failLog holds back repeated warnings of refused sends.
	failLog peerinput.LogEvery
}

// New returns a Replicator for the node cfg describes; Loop runs its sends.
func New(cfg Config) *Replicator {
	r := &Replicator{cfg: cfg, kick: make(chan struct{}, 1)}
	ch := make(chan struct{})
	r.doneCh.Store(&ch)
	return r
}

// Loop sends the changed states every Lag, and at once when an Await caller
// waits, until Stop is closed; then it calls done.
func (r *Replicator) Loop(done func()) {
	defer done()
	t := time.NewTicker(r.cfg.Lag)
	defer t.Stop()
	for {
		select {
		case <-r.cfg.Stop:
			return
		case <-t.C:
		case <-r.kick:
		}
		r.replicate()
	}
}

// replicate sends every state changed since the last send to its key's backup
// (one request per backup: one after another under ReplicationAsync,
// concurrently under ReplicationSync), then wakes the callers waiting for
// this send. A send that fails lists its keys as changed again, so the next
// send retries them; a ring change lists every key whose backup changed.
func (r *Replicator) replicate() {
	gen := r.started.Add(1)
	defer func() {
		r.done.Store(gen)
		ch := make(chan struct{})
		close(*r.doneCh.Swap(&ch))
	}()
	snap, backups, leaving := r.cfg.Ring()
	if backups == nil {
		// No backup (one member, or replication off): forget the changes
		// without copying them; a ring change that brings backups lists every
		// owned key again (resync).
		r.cfg.Owned.ClearDirty()
		return
	}
	sc := &r.scratch
	sc.Ms = r.cfg.Owned.TakeDirtyInto(r.cfg.Clock(), sc.Ms[:0])
	ms := sc.Ms
	pens := r.cfg.Bans.TakeDirty()
	if len(ms) == 0 && len(pens) == 0 {
		return
	}
	defer sc.Done()
	sc.Reset()
	self := r.cfg.Self
	// Every state's bytes back to back in one buffer: a state's slice of it
	// stays valid if a later append moves the buffer (it keeps the old array).
	buf := sc.Buf[:0]
	for i := range ms {
		m := &ms[i]
		owner, ok := snap.OwnerOfHash(m.H)
		if !ok || owner.Name != self || leaving {
			continue // a replica held here, or a key handed off meanwhile
		}
		b, ok := backups.OfHash(m.H)
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
		h := snap.Hash(ps.Key)
		owner, ok := snap.OwnerOfHash(h)
		if !ok || owner.Name != self || leaving {
			continue
		}
		b, ok := backups.OfHash(h)
		if !ok {
			continue
		}
		d := sc.Dest(b.Name, b.Addr)
		d.Pens = append(d.Pens, transport.PenaltyState(ps))
		d.PenH = append(d.PenH, h)
	}
	sc.Buf = buf
	if r.backoff == nil {
		r.backoff = make(map[string]*Backoff)
	}
	now := time.Now()
	// Under ReplicationAsync the sends go one after another on this
	// goroutine: a goroutine per backup per send, and waking this one when
	// the last finished, cost more than the sends themselves at a 5 ms lag.
	// The next send waits for all of them either way, and each is bounded
	// by Timeout of its own. Under ReplicationSync callers wait for the
	// slowest, so the backups get theirs at once.
	var wg sync.WaitGroup
	for name, d := range sc.Dests {
		if len(d.States) == 0 && len(d.Pens) == 0 {
			continue
		}
		bo := r.backoff[name]
		if r.cfg.Breakers.Refusing(name) || bo != nil && now.Before(bo.Until) {
			// Known unreachable, or refusing sends: keep the states for a
			// later send (or for the new backup after the ring drops this
			// one), and do not make a sync caller wait out a send that cannot
			// succeed.
			d.Resend(r.cfg.Owned, r.cfg.Bans, ms, nil)
			continue
		}
		if bo == nil {
			bo = &Backoff{}
			r.backoff[name] = bo
		}
		if r.cfg.Sync {
			wg.Go(func() { r.replicateTo(name, d, bo, ms) })
		} else {
			r.replicateTo(name, d, bo, ms)
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
// backup's retry schedule. The send is bounded by Timeout.
func (r *Replicator) replicateTo(name string, d *Dest, bo *Backoff, ms []store.Moved) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	needFull, err := r.cfg.Send(ctx, d.Addr, transport.TransferBatch{From: r.cfg.Self, Replica: true, States: d.States, Penalties: d.Pens})
	if len(needFull) > 0 {
		want := make(map[uint64]bool, len(needFull))
		for _, h := range needFull {
			want[h] = true
		}
		d.Resend(r.cfg.Owned, r.cfg.Bans, ms, want)
	}
	if errors.Is(err, transport.ErrUnavailable) {
		r.cfg.Breakers.Fail(name)
	}
	if r.cfg.Metrics != nil {
		r.cfg.Metrics.Replicated(name, len(d.States), err)
	}
	if err != nil {
		if errors.Is(err, transport.ErrUnavailable) {
			// The breaker spaces the sends to an unreachable backup.
			r.cfg.Log.Debug("replication send failed; retrying with the next send", "backup", name, "keys", len(d.States), "err", err)
		} else {
			bo.Failed(time.Now(), r.cfg.Lag)
			if ok, held := r.failLog.Allow(); ok {
				r.cfg.Log.Warn("replication send refused; its states are sent again later", "backup", name, "keys", len(d.States), "err", err, "retry_in", time.Until(bo.Until).Round(time.Millisecond), "not_logged", held)
			}
		}
		d.Resend(r.cfg.Owned, r.cfg.Bans, ms, nil)
		return
	}
	bo.Succeeded()
}

// Await waits, under ReplicationSync, until a replication send that began
// after this call has finished: every state changed before the call has then
// reached its backup, or its send failed (it is retried with the next send;
// the decision stands: availability first). Each send is bounded by Timeout,
// so the wait is at most about twice that. It returns Stopped if Stop is
// closed first, or ctx's error: the decision then must not be reported as
// made (the backup may never learn of it). Without Sync, or without backups,
// it returns nil at once.
func (r *Replicator) Await(ctx context.Context) error {
	if !r.cfg.Sync {
		return nil
	}
	if _, backups, _ := r.cfg.Ring(); backups == nil {
		return nil
	}
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
		case <-r.cfg.Stop:
			return r.cfg.Stopped
		}
	}
}

// Accept installs the replicated states of a checked batch b (cb, see
// peerinput.CheckBatch) that were not refused: a state is kept only when this
// node is the key's backup and the sender its owner in this node's ring; ban
// states likewise. The others, a state of a key this node owns included (a
// replica may come only from the owner, and the previous owner's state
// reaches a new owner by its handoff), are skipped and listed in needFull
// (by ring hash) with the log deltas that could not be applied: the rings
// disagree for a moment (this node joined and has not yet seen the ring that
// makes it the backup, or the sender has not yet seen the one that made this
// node the owner), and the owner sends them again, whole, with its next
// send; a sender that is not the owner drops them once its own ring says
// so. A new key that does not fit under the store's MaxKeys is not
// installed (store.InstallScan) and not asked for again.
func (r *Replicator) Accept(b transport.TransferBatch, cb peerinput.Batch) (needFull []uint64) {
	snap, backups, _ := r.cfg.Ring()
	owned, self := r.cfg.Owned, r.cfg.Self
	states, wall := cb.States, cb.Wall
	scanned := false // one scan for idle keys per batch at the MaxKeys bound
	// Start loading the slots of the first states before installing any
	// (store.Prefetch; a replica's slot is a cache miss at a million keys),
	// then keep prefetchAhead states ahead of the one installed.
	const prefetchAhead = 16
	for i := range min(len(b.States), prefetchAhead) {
		if ks := &b.States[i]; ks.Key == "" {
			owned.Prefetch(ks.KeyHash, ks.Limit.Kind)
		}
	}
	for i := range b.States {
		ks := &b.States[i]
		if j := i + prefetchAhead; j < len(b.States) && b.States[j].Key == "" {
			owned.Prefetch(b.States[j].KeyHash, b.States[j].Limit.Kind)
		}
		if cb.RefusedAt(i) {
			continue
		}
		h := ks.KeyHash
		if ks.Key != "" {
			h = owned.Hash(ks.Key)
		}
		owner, ok := snap.OwnerOfHash(h)
		bk, hasB := backups.OfHash(h)
		switch {
		case !ok || owner.Name == self || !(hasB && bk.Name == self && owner.Name == b.From):
			// The rings disagree (this node owns the key in its ring, or has
			// not yet seen the ring change that made it the backup, or has
			// no ring yet right after it joined): nothing is installed, and
			// the state is asked for again, whole, with the next send (a log
			// delta dropped for good would leave the replica short of its
			// entries once the rings agree). The sender drops it from its
			// sends once its own ring says it is no longer the owner. A
			// replica of a key this node owns never overwrites its state,
			// and is not counted as refused: every member sees some at each
			// membership change of a large fleet (hundreds per member in a
			// rolling restart of 50), while their rings differ.
			needFull = append(needFull, h)
		case ks.LogDelta:
			if !owned.AppendLog(h, ks.Limit, states[i], ks.LogAfter, ks.LogAfterCount, ks.LastNow, ks.CallerClock, wall) {
				needFull = append(needFull, h)
			}
		default:
			owned.InstallScan(h, ks.Limit, states[i], ks.LastNow, ks.CallerClock, wall, false, &scanned)
		}
	}
	for i, ps := range b.Penalties {
		if cb.PenRefusedAt(i) {
			continue
		}
		h := snap.Hash(ps.Key)
		owner, ok := snap.OwnerOfHash(h)
		bk, hasB := backups.OfHash(h)
		switch {
		case ok && owner.Name != self && hasB && bk.Name == self && owner.Name == b.From:
			r.cfg.Bans.Replace(h, store.BanState(ps))
		default:
			needFull = append(needFull, h) // the rings disagree, as for states (a key owned here included)
		}
	}
	return needFull
}
