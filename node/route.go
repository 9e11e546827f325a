// Routing: a check's way to its decision — the owner here, a forward to the
// owner, the key's backup, or the local fallback. The last two, and the
// answer to a check sent here as a key's backup, are route.Router's; the
// node keeps the owner-local path and the forward (decideInto) and the glue.

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
		h := rs.Snap.Hash(c.Key) // one hash: owner, handoff gate and shard
		p := rs.Snap.PartitionOfHash(h)
		var owner ring.Member
		local := rs.Mine != nil && rs.Mine[p]
		if !local {
			ok := rs.Snap.Len() > 0
			if ok {
				owner = rs.Snap.PartitionOwner(p)
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
					return n.fallbackInto(c, rs, out)
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
				n.leases.Result(h, c.Limit, leaseEpoch, leaseSent, 0, &res, err, owner.Name)
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
				return route.FullAt(owner.Name+" (the key's owner)", res)
			}
			if n.stopping.Load() {
				return ErrStopped // our own pool is closing: not the owner's fault
			}
			switch {
			case err != nil && rs.Backups != nil:
				// Unreachable: skip the owner for BreakerCooldown and let the
				// backup decide, now, instead of waiting for gossip.
				n.breakers.Fail(owner.Name)
				viaBackup = true
			case err == nil && res.Code == transport.CodeUnavailable && rs.Backups != nil:
				// The owner is stopping (it has handed its keys to their new
				// owners, its backups): the backup decides.
				viaBackup = true
			}
		}
		if ask > 0 { // not sent to the owner: no lease this time
			n.leases.Answered(h, c.Limit, leaseEpoch, leaseSent, 0, 0, "")
			ask = 0
		}
		bothDown := false
		if viaBackup {
			d, err := n.router.ViaBackup(ctx, rs, c.wire(true), h)
			switch {
			case err == nil:
				*out = fromRoute(&d)
				return nil
			case errors.Is(err, route.ErrNoBackup):
				if b, ok := rs.Backup(h); !ok || b.Name == n.cfg.Name {
					return n.fallbackInto(c, rs, out)
				}
				// The owner and the backup both failed: members leaving
				// together (a scale-down), or crashing or cut off together.
				// After a leave the state is with a member a later ring
				// names, and in a large fleet that ring comes after a few
				// gossip rounds more than one member's leave takes: wait
				// for it, as for "not owner", until ForwardTimeout, and only
				// then let the policy decide (what a double crash or a cut
				// from both costs a check).
				res, bothDown = transport.Result{}, true
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
		notOwner := res.Code == transport.CodeNotOwner // the owner, or the backup, answered so
		wait := min(time.Until(deadline), n.rerouteGrace())
		if notOwner || bothDown {
			wait = min(time.Until(deadline), 2*n.cfg.Gossip.GossipInterval)
		}
		next, changed := n.awaitRingChange(ctx, rs, wait)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if (!changed && !notOwner && !bothDown) || !time.Now().Before(deadline) {
			n.log.Debug("owner unreachable", "owner", owner.Name, "err", err, "code", res.Code)
			return n.fallbackInto(c, rs, out)
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
// one (route.AwaitChange); false if none came (or ctx ended, or the node
// stopped).
func (n *Node) awaitRingChange(ctx context.Context, rs *ringState, d time.Duration) (*ringState, bool) {
	if cur := n.rs.Load(); cur != rs {
		return cur, true
	}
	if !route.AwaitChange(ctx, rs.Next, n.stop, d) {
		return nil, false
	}
	return n.rs.Load(), true
}

// decideOwned applies c on this node as its owner under ring state rs and
// writes the Decision to *out. h is the key's ring hash and p its partition. It
// first waits, bounded by HandoffTimeout, for the previous owner's handoff when
// the key's partition was just gained from a live member. A check with a
// Penalty is decided with the key's ban state (banned reports that the ban
// decided it).
func (n *Node) decideOwned(ctx context.Context, rs *ringState, c *Check, h uint64, p int, out *algo.Decision) (banned bool, err error) {
	if gate := rs.GateOf(p); gate != nil {
		if err := n.waitHandoff(ctx, rs, p, gate); err != nil {
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
		return !cur.Leaving
	}
	m, ok := cur.Snap.OwnerOfHash(h)
	return ok && m.Name == n.cfg.Name && !cur.Leaving
}

// fallbackInto applies the OwnerUnreachable policy to c under ring state rs
// (route.Router.Fallback) and writes the Decision to *out (unchanged on error).
func (n *Node) fallbackInto(c *Check, rs *ringState, out *Decision) error {
	d, err := n.router.Fallback(rs, c.wire(false))
	if err == nil {
		*out = fromRoute(&d)
	}
	return err
}

// fromRoute is d, decided by a route.Router, as a Decision.
func fromRoute(d *route.Decision) Decision {
	return Decision{Decision: d.Decision, Route: Route(d.Route), Owner: d.Owner, Banned: d.Banned}
}

// The route package's policies are node's.
var (
	_ = [1]struct{}{}[route.Policy(Local)-route.Local]
	_ = [1]struct{}{}[route.Policy(FailOpen)-route.FailOpen]
	_ = [1]struct{}{}[route.Policy(FailClosed)-route.FailClosed]
)

// newRouter returns the node's route.Router; n.log, n.owned, n.fallback,
// n.bans and n.breakers must be set, n.peers and n.rs are read per check.
func (n *Node) newRouter() *route.Router {
	return route.New(route.Config{
		Self: n.cfg.Name, Owned: n.owned, Fallback: n.fallback, Bans: n.bans, Clock: n.clock,
		Current: func() route.Ring { return n.rs.Load() },
		Forward: func(ctx context.Context, addr string, c transport.Check) (transport.Result, error) {
			return n.peers.Forward(ctx, addr, c)
		},
		Breakers: n.breakers, Policy: route.Policy(n.cfg.OwnerUnreachable), Timeout: n.cfg.ForwardTimeout,
		Observe: func(k algo.Kind, r transport.Route, allowed bool) { n.observe(k, Route(r), allowed) },
		Refused: refusedByPeer,
		AsOwner: func(ctx context.Context, rs route.Ring, c transport.Check, h uint64) transport.Result {
			return n.ownerResult(ctx, rs.(*ringState), checkFromWire(&c), h)
		},
		ErrorResult: errorResult,
	})
}
