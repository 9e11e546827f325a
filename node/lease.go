package node

import (
	"context"
	"fmt"
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
// (lease.Holds.Grant's renewHold says why this never admits more). While a key stays hot, its
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

// newLeases builds, in New, the lease table and the holds (both nil when
// leases are off) with what they need of n.
func (n *Node) newLeases() {
	n.leases = lease.New(lease.Config{Size: n.cfg.Lease.Size, Threshold: n.cfg.Lease.Threshold, Period: n.cfg.Lease.Period,
		Clock: n.clock, Timeout: n.cfg.ForwardTimeout,
		Owner: func(h uint64) (string, string, bool) {
			o, ok := n.rs.Load().Snap.OwnerOfHash(h)
			return o.Name, o.Addr, ok && o.Name != n.cfg.Name && !n.stopping.Load() && !n.breakers.Skip(o.Name)
		},
		Forward: func(ctx context.Context, addr string, c transport.Check) (transport.Result, error) {
			return n.peers.Forward(ctx, addr, c)
		}})
	if n.leases == nil {
		return
	}
	n.holds = &lease.Holds{Store: n.owned, Clock: n.clock, Period: n.cfg.Lease.Period, MaxShare: n.cfg.Lease.MaxShare, Log: n.log,
		Owns: func(h uint64) func() bool {
			if rs := n.rs.Load(); n.owns(rs, h) {
				return func() bool { return n.owns(rs, h) }
			}
			return nil
		}}
}

// leasable reports whether c may be admitted from a lease, or ask for one.
func (c *Check) leasable() bool {
	return c.cacheable() && c.Penalty.IsZero() && lease.Supports(c.Limit.Kind)
}

// answerLease admits c (ring hash h) at now (node clock) from a lease and
// fills *out, or returns false with the hits to ask for on its forward
// (0: none) and the lease table's epoch. A check that finds the leases used
// up while their renewal is in flight waits for it (lease.Table.Await); one
// admitted while they run low starts their renewal in the background
// (lease.Table.Renew).
func (n *Node) answerLease(c *Check, h uint64, now int64, out *Decision) (ok bool, ask int64, epoch uint64) {
	var a lease.Answer
	if ok, ask, epoch = n.leases.Decide(h, c.Limit, c.Hits, now, &a); !ok && ask == 0 {
		ok, ask, epoch = n.leases.Await(h, c.Limit, c.Hits, epoch, &a)
	}
	if !ok {
		return false, ask, epoch
	}
	if ask > 0 {
		n.leases.Renew(h, c.wire(false), ask, epoch, now, &a)
	}
	a.Fill(&out.Decision, c.Limit)
	out.Route, out.Owner = RouteLease, a.Owner
	return true, 0, epoch
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
	a.Fill(&out.Decision, c.Limit)
	out.Route, out.Owner = RouteLease, a.Owner
	return true
}

// grantLease is the owner's side (lease.Holds.Grant): c, a forwarded check
// of a key this node owns (ring hash h, under rs), asked for a lease and
// was decided as r; a grant reaches the key's backup before r carries it.
func (n *Node) grantLease(ctx context.Context, rs *ringState, c *transport.Check, h uint64, r *transport.Result) {
	n.holds.Grant(ctx, c, h, r, rs.Snap.Len(), func() bool { return n.owns(rs, h) },
		func(ctx context.Context, m *store.Moved) error { return n.replicateGrant(ctx, rs, h, m) })
}

// takeOwnedInto decides a check of hits of the key with ring hash h under l
// on this node as its owner (store.TakeInto), holding back the slices lent
// out (lease.Holds.TakeInto) while any is: the owner-local hot path tests
// that with one atomic load and goes to the store directly.
func (n *Node) takeOwnedInto(out *algo.Decision, h uint64, l algo.Limit, hits, now, wall int64, owns func() bool) error {
	if n.holds.Any() {
		return n.holds.TakeInto(out, h, l, hits, now, wall, owns)
	}
	return n.owned.TakeInto(out, h, l, hits, now, wall, owns)
}

// takeOwned is takeOwnedInto returning the Decision.
func (n *Node) takeOwned(h uint64, l algo.Limit, hits, now, wall int64, owns func() bool) (algo.Decision, error) {
	var d algo.Decision
	err := n.takeOwnedInto(&d, h, l, hits, now, wall, owns)
	return d, err
}

// sweepHolds records the ended slices of keys no check touched since, and
// forgets those of keys this node no longer owns (lease.Holds.Sweep).
func (n *Node) sweepHolds(now int64) { n.holds.Sweep(now) }

// handOffHolds records in the state, as admitted now, every slice still
// held of a key this node does not own under ns (a ring change or a leave),
// and forgets the holds (lease.Holds.HandOff).
func (n *Node) handOffHolds(ns *ringState) {
	n.holds.HandOff(func(h uint64) bool {
		o, ok := ns.Snap.OwnerOfHash(h)
		return ok && o.Name == n.cfg.Name && !ns.Leaving
	})
}

// replicateGrant sends the key's state m (ring hash h) after a grant to the
// key's backup and waits for its answer, bounded by ForwardTimeout. Without
// a backup (one member, or ReplicationOff) there is nothing to wait for.
func (n *Node) replicateGrant(ctx context.Context, rs *ringState, h uint64, m *store.Moved) error {
	b, ok := rs.Backup(h)
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
func (n *Node) leaseStats() (admitted, granted uint64) { return n.leases.Stats() }
