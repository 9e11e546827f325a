package node

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/lease"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

// This file is capacity leases (the mechanism is node/internal/lease): a
// member that forwards checks of one key often asks the key's owner, on one
// of those forwards, for a slice of the key's capacity; the owner lends what
// the key can spare, and the member then admits checks of that key and
// limit itself from its slice (RouteLease), without a forward, until the
// slice is used or the lease ends (Config.Lease.Period, or the end of a
// fixed window). While the key stays hot the member renews ahead: when
// half of its slice is used or half of the lease's time has gone, a check
// admitted from the slice starts a forward of its own in the background (a
// peek of the key carrying the ask; one per key at a time), so no caller
// waits for a renewal.
//
// Why the members together never admit more than one limiter would. The
// owner lends a slice only if the key's state could admit it on top of
// every slice still out, and counts every lent hit as admitted while any
// lessee may still admit it:
//
//   - Fixed window: the slice is taken from the current window's count at
//     the grant, and the lease ends with that window (the lessee measures
//     the window's end from the instant it sent its forward, which is no
//     later than the owner's decision), so every admission is counted in
//     its own window.
//   - GCRA and token bucket: their states forget admitted hits at the
//     limit's rate, so a slice taken at the grant and admitted later would
//     be forgotten before its admissions are. The owner therefore holds the
//     slice back instead (lease.Holds): every check of the key is admitted
//     only if the state could take its hits plus every slice still held,
//     and a slice is recorded in the state, as admitted then, at the first
//     decision after its lease ended (a slice the state cannot take yet
//     stays held). Over any interval, the owner's last decision in it
//     counted every slice a lessee could still use in full, and every slice
//     that ended in it is recorded in it: the admissions of all members stay
//     within burst + rate × interval.
//   - The sliding windows (log, counter, bucketed) get no leases: a hit
//     lent now and admitted later would have to be counted in the window at
//     the time it is admitted, which the owner does not know, and counted
//     at the grant it leaves the window before the admission it stands for
//     does, breaking "at most Limit in any Period".
//
// Checks with a Penalty (the owner counts denials toward a ban, and a ban
// denies at once), a CreatedAt, a MaxWait or a cancel are never admitted
// from a lease, nor ask for one.
//
// Renewal and what is lost. A renewal of a GCRA or token-bucket lease
// names it (its id, Result.LeaseID) and the hits its lessee can still admit
// of it: the owner records only the used rest of the slice in the state (at
// the renewal, after every admission it stands for), carries the hits left
// into the new lease, and tops them up to what the lessee asked for in all
// (renewHold says why this never admits more). While a key stays hot, its
// lessees therefore give back every unused hit, exactly. What a lessee does
// not use of its last lease (it stopped checking, or its renewal failed) is
// recorded in full when that lease ends: under-admission, at most one
// slice per member per lease period; a fixed window's slice is taken at the
// grant and not given back either. A slice is at most twice the member's
// own rate × Config.Lease.Period and at most Config.Lease.MaxShare of the
// key's capacity shared among the other members, and the owner lends only
// what the key can spare after the check, so a member that stops checking
// stops holding capacity within one period.
//
// Exactness events. A reset (Node.ResetKey) drops the key's state on the
// owner and the key's leases on every member before it is acknowledged
// (the invalidation the denial cache uses; a lease answer in flight during
// it is not installed). If some member did not acknowledge it (the reset
// then fails with ErrInvalidationIncomplete), the owner keeps holding the
// slices still out against the fresh state, so nothing is admitted twice. A
// limit change needs nothing: a lease is for one key and limit, a check
// under another limit is forwarded, and the holds stay on the key's state.
// A lessee that crashes loses its slice (under, never over). Before it
// answers a grant, the owner replicates to the key's backup a state that
// counts the new slice and every slice still held as admitted at the grant
// (a grant it cannot replicate is not answered), so a backup that takes
// over after the owner's crash starts from a state that counts them.
//
// Limits, said plainly. The holds live on the owner only: a backup that
// takes over after a crash counts the slices still out as admitted at their
// grant (the state replicated with the grant), and a new owner after a ring
// change or a leave as admitted at the handoff (the old owner records its
// holds in the states it hands off), not at their use. The total admitted from the start of the
// limit's history still never exceeds one limiter's bound, but over the
// rest of those slices' leases (at most Config.Lease.Period) a burst on
// the new owner can exceed the burst bound of a short interval by at most
// the slices still out.

// LeaseConfig configures capacity leases (see Config.Lease).
type LeaseConfig struct {
	// Size is the number of keys (each under one limit) this member can
	// hold leases of at once: a fixed-size direct-mapped table of about 150
	// bytes per slot (rounded up to a power of two), which also measures
	// the rate of forwarded checks per key. Default 0: leases off on this
	// member, as lessee and as owner (its keys are then decided by
	// forwards only); 1024 is a good start.
	Size int
	// Threshold is the rate of checks of one key and limit on this member
	// (checks per second, measured over Period) from which it asks the
	// key's owner for leases. Default 100. Lower values lend capacity to
	// members that check a key rarely, which costs more under-admission
	// than it saves forwards. A member whose lease of the key ended less
	// than ten periods ago asks whatever its rate (its forwarded checks may
	// be answered too slowly for its callers to reach the threshold).
	Threshold float64
	// Period is the longest a lease lives and what a slice is sized for:
	// a member asks for twice its observed rate × Period hits (it asks for
	// the next slice when half is left). Default 100 ms.
	// Longer periods save more forwards and leave more capacity idle on
	// members whose callers stop; a fixed-window lease ends with its window
	// anyway.
	Period time.Duration
	// MaxShare bounds one grant to MaxShare × the key's capacity (GCRA's
	// Burst+1, a token bucket's Burst, a fixed window's Limit) divided by
	// the number of other members, in (0, 1]. Default 0.5: the members'
	// slices together hold at most half of a full key.
	MaxShare float64
}

// leasable reports whether c may be admitted from a lease, or ask for one.
func (c *Check) leasable() bool {
	return c.cacheable() && c.Penalty.IsZero() && lease.Supports(c.Limit.Kind)
}

// answerLease admits c (ring hash h) at now (node clock) from a lease and
// fills *out, or returns false with the hits to ask for on its forward
// (0: none) and the lease table's epoch. A check admitted while its key's
// leases run low starts their renewal in the background (renewLease); one
// that finds them used up while their renewal is in flight waits for it.
func (n *Node) answerLease(c *Check, h uint64, now int64, out *Decision) (ok bool, ask int64, epoch uint64) {
	var a lease.Answer
	ok, ask, epoch = n.leases.Decide(h, c.Limit, c.Hits, now, &a)
	if !ok && ask == 0 {
		// The leases ran out while their renewal is in flight: wait for it
		// (at most a lease period) rather than forward too, then decide at
		// that instant.
		if ch := n.leases.Pending(h, c.Limit); ch != nil {
			t := time.NewTimer(n.cfg.Lease.Period)
			select {
			case <-ch:
			case <-t.C:
			}
			t.Stop()
			ok, ask, epoch = n.leases.Decide(h, c.Limit, c.Hits, n.clock(), &a)
		}
	}
	if !ok {
		return false, ask, epoch
	}
	if ask > 0 {
		n.renewLease(c, h, ask, epoch, now, &a)
	}
	out.Allowed = true
	out.Limit = lease.Capacity(c.Limit)
	out.Remaining, out.ResetAfter = a.Remaining, a.ResetAfter
	out.Route, out.Owner = RouteLease, a.Owner
	return true, 0, epoch
}

// renewLease asks the owner of c's key (ring hash h) for the next lease of
// ask hits, in the background: a forward of a peek of the key (0 hits,
// nothing taken) that carries the ask and a's account of the lease it
// renews (its id and the hits still usable of it; named only to the owner
// that lent it), whose grant is installed when it returns
// (lease.Table.Install with epoch and sent, the node clock before the
// send). The caller's check does not wait for it. Without a reachable owner
// other than this node, nothing is asked.
func (n *Node) renewLease(c *Check, h uint64, ask int64, epoch uint64, sent int64, a *lease.Answer) {
	rs := n.rs.Load()
	owner, ok := rs.snap.OwnerOfHash(h)
	if !ok || owner.Name == n.cfg.Name || n.stopping.Load() || n.breakers.Skip(owner.Name) {
		n.leases.Answered(h, c.Limit, epoch, sent, 0, 0, "")
		return
	}
	w := c.wire(false)
	w.Hits, w.LeaseHits = 0, ask
	if a.RenewID != 0 && a.Owner == owner.Name {
		w.LeaseID, w.LeaseLeft = a.RenewID, a.RenewLeft
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ForwardTimeout)
		defer cancel()
		res, err := n.peers.Forward(ctx, owner.Addr, w)
		n.leaseAnswered(h, w.Limit, epoch, sent, w.LeaseID, &res, err, owner.Name)
	}()
}

// leaseAnswered installs the lease that res, the answer (or err) of a
// forward of the key with ring hash h under l that asked for one at epoch
// and was sent at sent (node clock), carries from owner; named is the id of
// the lease the forward renewed (0: none), which the new lease replaces
// when res says the owner renewed it. With an error or without a grant it
// only ends the request.
func (n *Node) leaseAnswered(h uint64, l algo.Limit, epoch uint64, sent, named int64, res *transport.Result, err error, owner string) {
	if err != nil || res.Code != transport.CodeOK {
		n.leases.Answered(h, l, epoch, sent, 0, 0, "")
		return
	}
	g := lease.Grant{Hits: res.LeaseHits, For: res.LeaseFor, ID: res.LeaseID, Owner: owner}
	if res.LeaseRenewed {
		g.Renewed = named
	}
	n.leases.Install(h, l, epoch, sent, g)
}

// useLease admits c (ring hash h) at now from a lease whatever the ask
// policy (lease.Table.Use) and fills *out: c went to the owner to ask for
// the next lease and was denied there while this member still held a slice.
func (n *Node) useLease(c *Check, h uint64, now int64, out *Decision) bool {
	var a lease.Answer
	if !n.leases.Use(h, c.Limit, c.Hits, now, &a) {
		return false
	}
	*out = Decision{}
	out.Allowed = true
	out.Limit = lease.Capacity(c.Limit)
	out.Remaining, out.ResetAfter = a.Remaining, a.ResetAfter
	out.Route, out.Owner = RouteLease, a.Owner
	return true
}

// grantLease is the owner's side: c, a forwarded check of a key this node
// owns (ring hash h, under rs), asked for a lease and was decided as r. It
// lends what the key can spare (see the file comment), replicates to the
// key's backup a state that counts the slice (and every slice still out)
// as admitted now, and only then sets r's lease fields (and lowers r's
// Remaining by the slice). Nothing is lent when leases are off here, the
// check cannot be leased, the key lacks the capacity, or the backup cannot
// be reached.
func (n *Node) grantLease(ctx context.Context, rs *ringState, c *transport.Check, h uint64, r *transport.Result) {
	if n.leases == nil || c.LeaseHits <= 0 || r.Code != transport.CodeOK || !r.Decision.Allowed || r.Banned ||
		c.Hits < 0 || c.CreatedAt != 0 || c.MaxWait != 0 || c.CancelAt != 0 || !c.Penalty.IsZero() || !lease.Supports(c.Limit.Kind) {
		return
	}
	l := c.Limit
	others := max(rs.snap.Len()-1, 1)
	most := int64(float64(lease.Capacity(l)) * n.cfg.Lease.MaxShare / float64(others))
	want := min(c.LeaseHits, most, r.Decision.Remaining)
	if want <= 0 && c.LeaseID <= 0 {
		return
	}
	now := n.clock()
	owns := func() bool { return n.owns(rs, h) }
	leaseFor := n.cfg.Lease.Period
	var m store.Moved
	var id, renewed uint64
	var carried int64
	if l.Kind == algo.FixedWindow {
		if want <= 0 {
			return
		}
		// Taken from the window now: the lease ends with the window.
		d, probe, err := n.owned.Probe(h, l, want, now, owns)
		if err != nil || !d.Allowed || d.ResetAfter <= 0 {
			return
		}
		m, leaseFor = probe, min(leaseFor, d.ResetAfter)
	} else {
		sh := n.holds.Lock(h)
		n.recordEnded(sh, h, l.Kind, now, owns)
		if c.LeaseID > 0 {
			// A renewal asks for LeaseHits in all: what it still holds of
			// the lease it renews, topped up.
			renewed, carried = n.renewHold(sh, h, l, uint64(c.LeaseID), c.LeaseLeft, now, owns)
			want = max(0, min(want, c.LeaseHits-carried, most-carried))
		}
		if want <= 0 && renewed == 0 {
			sh.Unlock()
			return
		}
		held := sh.Held(h, l.Kind)
		d, probe, err := n.owned.Probe(h, l, min(want+held, algo.MaxHits), now, owns)
		if err != nil || !d.Allowed {
			// Nothing lent; a renewed slice holds what its lessee can
			// still admit of it, until its own end.
			sh.Unlock()
			return
		}
		if renewed != 0 {
			sh.Remove(h, l.Kind, renewed)
		}
		id = sh.Add(h, l, carried+want, now+int64(leaseFor))
		sh.Unlock()
		m = probe
	}
	if err := n.replicateGrant(ctx, rs, h, &m); err != nil {
		// Not lent: a slice the backup would not count after a crash. The
		// hits carried from a renewed slice stay held (its lessee still
		// admits them under the old lease), under the new id until the new
		// end: longer than needed, never shorter.
		n.log.Debug("lease not granted: its state did not reach the key's backup", "err", err)
		if id != 0 {
			sh := n.holds.Lock(h)
			if renewed != 0 && carried > 0 {
				sh.Set(h, l.Kind, id, carried)
			} else {
				sh.Remove(h, l.Kind, id)
			}
			sh.Unlock()
		}
		return
	}
	if l.Kind == algo.FixedWindow {
		d, err := n.owned.Take(h, l, want, now, now, owns)
		if err != nil || !d.Allowed {
			return // the window filled meanwhile: nothing lent
		}
	}
	r.LeaseHits, r.LeaseFor = want, leaseFor
	r.LeaseID, r.LeaseRenewed = int64(id), renewed != 0
	r.Decision.Remaining = max(0, r.Decision.Remaining-want)
}

// renewHold is the owner's side of a renewal's account: the lessee of slice
// id of the key with ring hash h under l (GCRA or token bucket; sh is the
// key's locked hold shard) can still admit at most left of its hits. It
// records the rest, which the lessee admitted before now, in the key's
// state as admitted at now, and holds only left: it returns id and the
// hits held (0, 0 when the slice is not held any more, or the state cannot
// take the used hits: then nothing changes).
//
// Why this never admits more than one limiter would. The slice was never
// recorded in the state: it was held, counted in full in every decision of
// the key since the grant (lease.Holds). Its used hits were all admitted
// before now, so recording them at now counts them no earlier than they
// happened; a GCRA TAT or token count that records hits later only admits
// less (max(a, t) + d grows with t). The lessee admits no more than left
// of the slice from here on (it counts down from what it reported), and
// left stays held. A report that arrives after the owner recorded the slice
// (its lease ended on the owner's clock, a reset, a handoff) finds no
// slice of that id and changes nothing: nothing recorded is ever given
// back, so a late report cannot free what the state already counts.
func (n *Node) renewHold(sh *lease.Shard, h uint64, l algo.Limit, id uint64, left, now int64, owns func() bool) (uint64, int64) {
	held, ok := sh.Hits(h, l.Kind, id)
	if !ok {
		return 0, 0
	}
	left = min(max(left, 0), held)
	if used := held - left; used > 0 {
		if d, err := n.owned.Take(h, l, used, now, now, owns); err != nil || !d.Allowed {
			return 0, 0
		}
	}
	sh.Set(h, l.Kind, id, left)
	return id, left
}

// takeOwnedInto decides a check of hits of the key with ring hash h under l
// on this node as its owner (store.TakeInto), holding back the hits of the
// GCRA and token-bucket slices lent out and still unrecorded, and recording
// those whose lease ended.
func (n *Node) takeOwnedInto(out *algo.Decision, h uint64, l algo.Limit, hits, now, wall int64, owns func() bool) error {
	if !n.holds.Any() || (l.Kind != algo.GCRA && l.Kind != algo.TokenBucket) {
		return n.owned.TakeInto(out, h, l, hits, now, wall, owns)
	}
	sh := n.holds.Lock(h)
	defer sh.Unlock()
	n.recordEnded(sh, h, l.Kind, wall, owns)
	if held := sh.Held(h, l.Kind); held > 0 {
		return n.owned.TakeHeldInto(out, h, l, hits, held, int64(n.cfg.Lease.Period), now, wall, owns)
	}
	return n.owned.TakeInto(out, h, l, hits, now, wall, owns)
}

// takeOwned is takeOwnedInto returning the Decision.
func (n *Node) takeOwned(h uint64, l algo.Limit, hits, now, wall int64, owns func() bool) (algo.Decision, error) {
	var d algo.Decision
	err := n.takeOwnedInto(&d, h, l, hits, now, wall, owns)
	return d, err
}

// recordEnded records in the key's state, as admitted at now (node clock),
// the slices of the key (ring hash h, algorithm k) whose lease ended; sh is
// the key's locked hold shard.
func (n *Node) recordEnded(sh *lease.Shard, h uint64, k algo.Kind, now int64, owns func() bool) {
	sh.Record(h, k, now, func(hits int64, l algo.Limit) bool {
		d, err := n.owned.Take(h, l, hits, now, now, owns)
		return err == nil && d.Allowed
	})
}

// sweepHolds records, at now (node clock), the slices whose lease ended of
// keys no check has touched since (so that the holds do not outlive their
// keys, and the owner's checks skip them once none is left), and forgets
// the slices of keys this node no longer owns (their state moved on with
// the ring). Called every IdleScanInterval.
func (n *Node) sweepHolds(now int64) {
	for _, k := range n.holds.Ended(now) {
		rs := n.rs.Load()
		sh := n.holds.Lock(k.H)
		if n.owns(rs, k.H) {
			n.recordEnded(sh, k.H, k.Kind, now, func() bool { return n.owns(rs, k.H) })
		} else {
			sh.Drop(k.H, k.Kind)
		}
		sh.Unlock()
	}
}

// handOffHolds records in the state, as admitted now, every slice still
// held of a key this node does not own under ns (a ring change or a leave),
// and forgets the holds: the handoff that follows then carries the slices
// to the key's new owner, which never saw them lent.
func (n *Node) handOffHolds(ns *ringState) {
	if !n.holds.Any() {
		return
	}
	now := n.clock()
	for _, k := range n.holds.Keys() {
		if o, ok := ns.snap.OwnerOfHash(k.H); ok && o.Name == n.cfg.Name && !ns.leaving {
			continue
		}
		sh := n.holds.Lock(k.H)
		sh.Record(k.H, k.Kind, math.MaxInt64, func(hits int64, l algo.Limit) bool {
			d, err := n.owned.Take(k.H, l, hits, now, now, nil)
			return err == nil && d.Allowed
		})
		sh.Drop(k.H, k.Kind)
		sh.Unlock()
	}
}

// leaseReset is a reset of the key with ring hash h under k (all: every
// algorithm) on its owner: the slices lent of it are forgotten when every
// member dropped its leases of the key (complete), and otherwise stay held
// in full against the fresh state.
func (n *Node) leaseReset(h uint64, k algo.Kind, all, complete bool) {
	if !complete || !n.holds.Any() {
		return
	}
	sh := n.holds.Lock(h)
	defer sh.Unlock()
	for _, kind := range []algo.Kind{algo.GCRA, algo.TokenBucket} {
		if all || kind == k {
			sh.Drop(h, kind)
		}
	}
}

// replicateGrant sends the key's state m (ring hash h) after a grant to the
// key's backup and waits for its answer, bounded by ForwardTimeout. Without
// a backup (one member, or ReplicationOff) there is nothing to wait for.
func (n *Node) replicateGrant(ctx context.Context, rs *ringState, h uint64, m *store.Moved) error {
	b, ok := rs.backupOfHash(h)
	if !ok {
		return nil
	}
	st, err := m.St.AppendBinary(nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ForwardTimeout)
	defer cancel()
	needFull, err := n.peers.Replicate(ctx, b.Addr, transport.TransferBatch{From: n.cfg.Name, Replica: true,
		States: []transport.KeyState{{KeyHash: m.H, Limit: m.Limit, State: st, LastNow: m.LastNow, CallerClock: m.CallerClock}}})
	if err != nil {
		return err
	}
	if len(needFull) > 0 {
		return fmt.Errorf("backup %s did not install the state", b.Name)
	}
	return nil
}

// leaseStats returns the checks admitted from leases and the grants
// installed on this node.
func (n *Node) leaseStats() (admitted, granted uint64) {
	if n.leases == nil {
		return 0, 0
	}
	return n.leases.Admitted(), n.leases.Granted()
}
