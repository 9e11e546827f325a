// Routing: a check's way to its decision — the owner here, a forward to the
// owner, the key's backup, or the local fallback.

package node

import (
	"context"
	"errors"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/route"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// decide routes one check: decide it here if this node owns the key, else forward
// it to the owner, re-resolving after a "not owner" answer until the ring settles
// or ForwardTimeout passes, else fall back.
func (n *Node) decide(ctx context.Context, c *Check) (Decision, error) {
	var d Decision
	err := n.decideInto(ctx, c, &d)
	return d, err
}

// decideInto is decide writing the Decision to *out, which must be the zero
// Decision and stays so on error. The owner-local path fills *out in place
// instead of copying a Decision up through every call (each such copy right
// after its fields were written stalls the CPU's store forwarding).
func (n *Node) decideInto(ctx context.Context, c *Check, out *Decision) error {
	if n.leaving.Load() || n.stopping.Load() {
		return ErrStopped
	}
	if err := c.Validate(n.cfg.MaxKeyLen); err != nil {
		return err
	}
	if err := n.withinMaxima(c.Limit); err != nil {
		return err
	}
	var deadline time.Time
	rs := n.rs.Load()
	for attempt := 0; ; attempt++ { // attempt bounds re-routing after owner-side "not owner"
		h := rs.snap.Hash(c.Key) // one hash: owner, handoff gate and shard
		p := rs.snap.PartitionOfHash(h)
		var owner ring.Member
		local := rs.mine != nil && rs.mine[p]
		if !local {
			ok := rs.snap.Len() > 0
			if ok {
				owner = rs.snap.PartitionOwner(p)
			}
			local = !ok || owner.Name == n.cfg.Name
		}
		if local {
			// Start loading the key's slot (a cache miss at a million keys) so
			// that the clock read and the shard lock overlap it. (A forwarded
			// batch prefetches its checks' slots itself, see peerService.Forward.)
			n.owned.Prefetch(h, c.Limit.Kind)
			// Route and Owner are written first: the last writes before the
			// caller copies *out are then the algorithm's, long finished.
			out.Route, out.Owner = RouteOwner, n.cfg.Name
			var ban bool
			var err error
			if c.booking() {
				ban, err = n.bookOwned(ctx, rs, c, h, p, out)
			} else {
				ban, err = n.decideOwned(ctx, rs, c, h, p, &out.Decision)
			}
			if err != nil {
				*out = Decision{}
			}
			if err != nil && errors.Is(err, errNotOwner) && attempt < 8 {
				rs = n.rs.Load() // the ring changed under us: route again
				continue
			}
			if err != nil {
				if errors.Is(err, errNotOwner) {
					return n.fallbackInto(*c, rs, out)
				}
				return err
			}
			if c.Hits > 0 && out.Allowed {
				if err := n.awaitReplicated(ctx); err != nil {
					*out = Decision{}
					return err
				}
			}
			if c.cancelAt == 0 { // a cancel is not a check
				n.observe(c.Limit.Kind, RouteOwner, out.Allowed)
				if !out.Allowed {
					n.noteDenied(c)
				}
			}
			if ban {
				out.Banned = true
			}
			return nil
		}
		// The pool bounds each forward by ForwardTimeout; the deadline below bounds
		// the retries (set on the first failure, so the fast path reads no clock and
		// makes no context or timer).
		var (
			res transport.Result
			err error
		)
		var sent int64
		var epoch uint64
		// A lease first: it admits what the owner already counted, whatever
		// a cached denial says of the owner's state; then the cached denials.
		var ask int64
		var leaseSent int64
		var leaseEpoch uint64
		if n.leases != nil && attempt == 0 && c.leasable() {
			leaseSent = n.clock()
			sent = leaseSent
			var ok bool
			if ok, ask, leaseEpoch = n.answerLease(c, h, leaseSent, out); ok {
				n.observe(c.Limit.Kind, RouteLease, true)
				return nil
			}
		}
		cache := n.denied != nil && c.cacheable()
		if cache {
			if sent == 0 {
				sent = n.clock()
			}
			ok, flight := n.answerDenied(ctx, c, h, sent, attempt == 0, out)
			if flight != nil {
				defer func() { n.landDenied(h, flight, &res, err) }()
			}
			if ok {
				if ask > 0 {
					n.leases.Answered(h, c.Limit, leaseEpoch, leaseSent, 0, 0, "")
					if n.useLease(c, h, leaseSent, out) { // the slice held admits what the owner would deny
						n.observe(c.Limit.Kind, RouteLease, true)
						return nil
					}
				}
				n.observe(c.Limit.Kind, RouteCachedDenial, false)
				n.noteDenied(c)
				return nil
			}
			epoch = n.denied.Epoch()
		}
		viaBackup := n.breakers.Skip(owner.Name)
		if !viaBackup {
			w := c.wire(false)
			w.LeaseHits = ask
			res, err = n.peers.Forward(ctx, owner.Addr, w)
			if ask > 0 {
				n.leaseAnswered(h, c.Limit, leaseEpoch, leaseSent, 0, &res, err, owner.Name)
				ask = 0
			}
			if err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			switch {
			case err == nil && res.Code == transport.CodeOK:
				n.breakers.Reset(owner.Name)
				if !res.Decision.Allowed && leaseSent != 0 && n.useLease(c, h, leaseSent, out) {
					// Sent to ask for the next lease while the slice held
					// could admit it: the slice admits what the owner denied
					// (and the denial, which the slice outlives, is not cached).
					n.observe(c.Limit.Kind, RouteLease, true)
					return nil
				}
				if c.cancelAt == 0 {
					n.observe(c.Limit.Kind, RouteForwarded, res.Decision.Allowed)
				}
				*out = Decision{Decision: res.Decision, Route: RouteForwarded, Owner: owner.Name, Banned: res.Banned, Delay: res.Delay, at: res.At}
				if cache && !out.Allowed {
					n.storeDenied(c, h, sent, epoch, out)
				}
				if !out.Allowed {
					n.noteDenied(c)
				}
				return nil
			case err == nil && res.Code == transport.CodeInvalidArgument:
				return refusedByPeer(owner.Name, res.Message)
			case err == nil && res.Code == transport.CodeResourceExhausted:
				n.breakers.Reset(owner.Name)
				return fullAt(owner.Name+" (the key's owner)", res)
			}
			if n.stopping.Load() {
				return ErrStopped // our own pool is closing: not the owner's fault
			}
			switch {
			case err != nil && rs.backups != nil:
				// Unreachable: skip the owner for BreakerCooldown and let the
				// backup decide, now, instead of waiting for gossip.
				n.breakers.Fail(owner.Name)
				viaBackup = true
			case err == nil && res.Code == transport.CodeUnavailable && rs.backups != nil:
				// The owner is stopping (it has handed its keys to their new
				// owners, its backups): the backup decides.
				viaBackup = true
			}
		}
		if ask > 0 { // not sent to the owner: no lease this time
			n.leases.Answered(h, c.Limit, leaseEpoch, leaseSent, 0, 0, "")
			ask = 0
		}
		if viaBackup {
			d, err := n.decideViaBackup(ctx, rs, *c, h, owner)
			switch {
			case err == nil:
				*out = d
				return nil
			case errors.Is(err, errNoBackup):
				return n.fallbackInto(*c, rs, out)
			case errors.Is(err, errNotOwner):
				res = transport.Result{Code: transport.CodeNotOwner} // rings disagree: route again below
			default:
				return err
			}
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(n.cfg.ForwardTimeout)
		}
		// The owner answered "not owner" or "stopping", or could not be reached.
		// "Not owner" means two rings disagree for a moment: retry every two gossip
		// rounds (at once when our ring moves on) until the deadline. After a failure,
		// route again if our ring moves on within a few gossip rounds (a leave or a
		// crash being detected); otherwise the owner is unreachable.
		notOwner := err == nil && res.Code == transport.CodeNotOwner
		wait := min(time.Until(deadline), n.rerouteGrace())
		if notOwner {
			wait = min(time.Until(deadline), 2*n.cfg.Gossip.GossipInterval)
		}
		next, changed := n.awaitRingChange(ctx, rs, wait)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if (!changed && !notOwner) || !time.Now().Before(deadline) {
			n.log.Debug("owner unreachable", "owner", owner.Name, "err", err, "code", res.Code)
			return n.fallbackInto(*c, rs, out)
		}
		if changed {
			rs = next
		}
	}
}

// rerouteGrace is how long a sender whose owner failed (unreachable, or stopping)
// waits for its ring to change before the policy decides: two gossip rounds, time
// for a leave that is already spreading to arrive, short enough that checks on a
// crashed owner's keys do not each wait out ForwardTimeout until the crash is
// detected.
func (n *Node) rerouteGrace() time.Duration { return 2 * n.cfg.Gossip.GossipInterval }

// awaitRingChange returns the ring state that replaced rs, waiting up to d for
// one; false if none came (or ctx ended, or the node stopped).
func (n *Node) awaitRingChange(ctx context.Context, rs *ringState, d time.Duration) (*ringState, bool) {
	if cur := n.rs.Load(); cur != rs {
		return cur, true
	}
	if d <= 0 {
		return nil, false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-rs.next:
		return n.rs.Load(), true
	case <-t.C:
	case <-ctx.Done():
	case <-n.stop:
	}
	return nil, false
}

// decideOwned applies c on this node as its owner under ring state rs and
// writes the Decision to *out. h is the key's ring hash and p its partition. It
// first waits, bounded by HandoffTimeout, for the previous owner's handoff when
// the key's partition was just gained from a live member. A check with a
// Penalty is decided with the key's ban state (banned reports that the ban
// decided it).
func (n *Node) decideOwned(ctx context.Context, rs *ringState, c *Check, h uint64, p int, out *algo.Decision) (banned bool, err error) {
	if gate := rs.gateOf(p); gate != nil {
		if err := n.waitHandoff(ctx, rs, gate); err != nil {
			return false, err
		}
	}
	wall := n.clock()
	now := c.CreatedAt
	if now == 0 {
		now = wall
	}
	owns := func() bool { return n.owns(rs, h) }
	if c.Penalty.IsZero() {
		return false, n.takeOwnedInto(out, h, c.Limit, c.Hits, now, wall, owns)
	}
	d, banned, err := n.bans.Take(h, c.Key, store.BanRule(c.Penalty), c.Hits, now, func(hits int64) (algo.Decision, error) {
		return n.takeOwned(h, c.Limit, hits, now, wall, owns)
	})
	if err == nil {
		*out = d
	}
	return banned, err
}

// owns reports, under a shard lock, whether this node still owns the key whose
// ring hash is h: true when the ring has not changed since rs was used to route
// (rs already said so), else the current ring decides. A leaving node owns
// nothing.
func (n *Node) owns(rs *ringState, h uint64) bool {
	cur := n.rs.Load()
	if cur == rs {
		return !cur.leaving
	}
	m, ok := cur.snap.OwnerOfHash(h)
	return ok && m.Name == n.cfg.Name && !cur.leaving
}

// fallbackInto is decideFallback writing the Decision to *out (unchanged on
// error).
func (n *Node) fallbackInto(c Check, rs *ringState, out *Decision) error {
	d, err := n.decideFallback(c, rs)
	if err == nil {
		*out = d
	}
	return err
}

// decideFallback applies the OwnerUnreachable policy; a Local limiter gets
// this node's share of the limit among the members of rs (see Local).
func (n *Node) decideFallback(c Check, rs *ringState) (Decision, error) {
	if c.cancelAt != 0 {
		// A cancel the owner cannot get: nothing is given back, nothing taken.
		return Decision{Decision: algo.Decision{Allowed: true}, Route: RouteFallback, Owner: n.cfg.Name}, nil
	}
	wall := n.clock()
	now := c.CreatedAt
	if now == 0 {
		now = wall
	}
	var d algo.Decision
	switch n.cfg.OwnerUnreachable {
	case Local:
		var err error
		d, err = n.fallback.Take(n.fallback.Hash(c.Key), route.Share(c.Limit, rs.snap.Len()), c.Hits, now, wall, nil)
		if err != nil {
			return Decision{}, err
		}
	case FailOpen, FailClosed:
		var err error
		d, err = route.Fail(c.Limit, now, n.cfg.OwnerUnreachable == FailOpen, n.cfg.ForwardTimeout)
		if err != nil {
			return Decision{}, err
		}
	}
	n.observe(c.Limit.Kind, RouteFallback, d.Allowed)
	return Decision{Decision: d, Route: RouteFallback, Owner: n.cfg.Name}, nil
}

// decideViaBackup sends c, whose owner (in ring state rs) cannot be reached, to
// the key's backup; when this node is the backup it decides c itself.
// errNoBackup: no backup, or it cannot be reached either; errNotOwner: the
// backup does not see itself as the key's backup (rings disagree for a moment).
func (n *Node) decideViaBackup(ctx context.Context, rs *ringState, c Check, h uint64, owner ring.Member) (Decision, error) {
	b, ok := rs.backupOfHash(h)
	if !ok {
		return Decision{}, errNoBackup
	}
	if b.Name == n.cfg.Name {
		d, ban, err := n.decideAsBackup(ctx, c, h)
		if err != nil {
			return Decision{}, err
		}
		n.observe(c.Limit.Kind, RouteBackup, d.Allowed)
		return Decision{Decision: d, Route: RouteBackup, Owner: n.cfg.Name, Banned: ban}, nil
	}
	res, ok, err := n.toPeers().ToBackup(ctx, b, c.wire(true))
	switch {
	case err != nil:
		return Decision{}, err
	case !ok:
		return Decision{}, errNoBackup
	case res.Code == transport.CodeOK:
		route := RouteForwarded // the backup reached the owner itself
		if res.Route == transport.RouteBackup {
			route = RouteBackup
		}
		n.observe(c.Limit.Kind, route, res.Decision.Allowed)
		return Decision{Decision: res.Decision, Route: route, Owner: res.Owner, Banned: res.Banned}, nil
	case res.Code == transport.CodeInvalidArgument:
		return Decision{}, refusedByPeer(b.Name, res.Message)
	case res.Code == transport.CodeResourceExhausted:
		return Decision{}, fullAt(b.Name+" (the key's backup, or the owner it asked)", res)
	case res.Code == transport.CodeNotOwner:
		return Decision{}, errNotOwner
	}
	return Decision{}, errNoBackup
}

// decideAsBackup decides c on this node's replica of its key, whose owner
// cannot be reached. It returns errNotOwner if this node is neither the key's
// backup nor its owner (any more) in its current ring.
func (n *Node) decideAsBackup(ctx context.Context, c Check, h uint64) (algo.Decision, bool, error) {
	self := n.cfg.Name
	holds := func() bool {
		rs := n.rs.Load()
		if rs.leaving {
			return false
		}
		if o, ok := rs.snap.OwnerOfHash(h); ok && o.Name == self {
			return true
		}
		b, ok := rs.backupOfHash(h)
		return ok && b.Name == self
	}
	if c.cancelAt != 0 {
		// A cancel reaches the replica only while the owner is unreachable:
		// nothing is given back (the owner's state keeps the booking).
		return algo.Decision{Allowed: true}, false, nil
	}
	wall := n.clock()
	now := c.CreatedAt
	if now == 0 {
		now = wall
	}
	if c.Penalty.IsZero() {
		d, err := n.owned.Take(h, c.Limit, c.Hits, now, wall, holds)
		return d, false, err
	}
	return n.bans.Take(h, c.Key, store.BanRule(c.Penalty), c.Hits, now, func(hits int64) (algo.Decision, error) {
		return n.owned.Take(h, c.Limit, hits, now, wall, holds)
	})
}

// forwardAsBackup answers a check sent to this node as the key's backup
// (transport.Check.AsBackup). If this node owns the key now, it decides as
// owner. If it is the key's backup, it first asks the owner itself (see
// route.Peers.AskOwner); if the owner cannot be reached from here either, it
// decides on its replica (RouteBackup).
func (n *Node) forwardAsBackup(ctx context.Context, c transport.Check) transport.Result {
	c.AsBackup = false
	rs := n.rs.Load()
	h := rs.snap.Hash(c.Key)
	owner, ok := rs.snap.OwnerOfHash(h)
	if ok && owner.Name == n.cfg.Name && !rs.leaving {
		return n.ownerResult(ctx, rs, checkFromWire(&c), h)
	}
	if b, isB := rs.backupOfHash(h); !ok || !isB || b.Name != n.cfg.Name || rs.leaving {
		return transport.Result{Code: transport.CodeNotOwner, Message: "not the key's backup"}
	}
	if res, done := n.toPeers().AskOwner(ctx, owner, c, n.cfg.ForwardTimeout); done {
		return res
	}
	d, ban, err := n.decideAsBackup(ctx, checkFromWire(&c), h)
	if err != nil {
		return errorResult(err)
	}
	return transport.Result{Decision: d, Route: transport.RouteBackup, Owner: n.cfg.Name, Code: transport.CodeOK, Banned: ban}
}

// toPeers is the peer pool with the per-peer breaker, for the backup routes.
func (n *Node) toPeers() route.Peers { return route.Peers{Pool: n.peers, Breakers: n.breakers} }

// fullAt is the *KeyTableFullError of a check that the peer who (its name and
// role) refused with CodeResourceExhausted: its Text and RetryAfter.
func fullAt(who string, res transport.Result) error {
	return &KeyTableFullError{Who: who, Text: res.Message, RetryAfter: max(res.Decision.RetryAfter, 0)}
}
