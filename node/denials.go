package node

import (
	"context"

	"github.com/ringlimit/ringlimit/node/internal/denycache"
	"github.com/ringlimit/ringlimit/transport"
)

// This file is local denials (the cache itself is node/internal/denycache): a member that forwarded a check and was
// denied by the key's owner remembers, for that key and limit, the time
// before which no check can be admitted, and answers further checks of them
// itself until then (RouteCachedDenial), without a forward.
//
// Why it is exact. A denial's RetryAfter (or, for a ban, the ban's end) is
// the owner's promise that nothing is admitted under that limit before it,
// whatever other members do: only admissions consume, and nothing frees
// capacity but time. The member stores until = its own clock when the
// forward was SENT + RetryAfter. The owner decided at some instant after the
// send, so until is never later than the true end: a cached denial can only
// expire early (then the next check is forwarded again), never deny what
// the owner would admit. A denial of h hits says nothing of fewer hits: the
// cache answers only checks of at least the smallest denied hits, and never
// a peek (hits 0); a ban denies every check of at least one hit. A
// different limit or penalty rule is a different entry.
// Only three things free capacity early, and each invalidates the cached
// denials on every member: a reset and an unban (Node.ResetKey,
// Node.UnbanKey: the owner sends an invalidation of the key to every member
// and answers only when each acknowledged it or ForwardTimeout passed), and
// a limit change (a new limit misses the cache). An invalidation that
// arrives while a forward of the key is in flight keeps that forward's
// answer out of the cache (an epoch, read before each send). Whatever a
// member misses, an entry lives at most Config.DeniedCacheMaxTTL.
//
// Ring changes: when a key's owner changes, the old owner hands its state
// to the new one, which keeps the more restrictive state; a denial the old
// owner gave therefore stays true on the new owner. When the owner is
// unreachable, the backup decides on its replica, which (replicated
// asynchronously) may lag and admit earlier than the owner would: a cached
// denial then denies a little longer than the backup would have, never
// admits more than the owner.
//
// Checks carrying a Penalty are cached only when the owner denied them by a
// ban (the owner counts the other denials toward a ban, so they must reach
// it); checks with a CreatedAt, a MaxWait or a cancel are never cached nor
// answered from the cache.

// cacheable reports whether c may be answered from, or fill, the cache.
func (c *Check) cacheable() bool {
	return c.Hits > 0 && c.CreatedAt == 0 && c.MaxWait == 0 && c.cancelAt == 0
}

// answerDenied fills *out from a cached denial of c (ring hash h) at sent
// (node clock) and reports whether one decided it. With join (a check's
// first route), a check whose key's cached denial has expired does not
// forward at once with every other such check: one forward per key leads
// (returned: the caller forwards and calls landDenied when done), and the
// others wait for it, then look at the cache again at that instant
// (see "Single flight" below). A nil flight and false: forward.
func (n *Node) answerDenied(ctx context.Context, c *Check, h uint64, sent int64, join bool, out *Decision) (bool, *denycache.Flight) {
	now := sent
	for {
		var d denycache.Denial
		if n.denied.Answer(h, c.Limit, denycache.Rule(c.Penalty), c.Hits, now, &d) {
			out.Allowed = false
			out.Limit, out.Remaining = d.Limit, d.Remaining
			out.RetryAfter, out.ResetAfter = d.RetryAfter, d.ResetAfter
			out.Banned = d.Banned
			out.Route, out.Owner = RouteCachedDenial, d.Owner
			return true, nil
		}
		if !join || !c.Penalty.IsZero() {
			return false, nil
		}
		f, lead := n.denied.Join(h, c.Limit, denycache.Rule(c.Penalty), c.Hits, now)
		if f == nil || lead {
			return false, f
		}
		if !n.denied.Wait(f, ctx.Done()) {
			return false, nil // the forward path reports ctx's error
		}
		now = n.clock()
	}
}

// Single flight of an expired cached denial: when the
// cached denial of a key expires, the checks of it on this member send one
// forward (the flight), and the others wait for it instead of all
// forwarding at once.
//
// Why it is exact. A check that waited is then decided exactly as a check
// that arrives at the instant it wakes: from a cached denial stored by then
// (the flight's own denial, whose until counts from the flight's send, so
// the argument of this file's top comment holds unchanged: the owner denied
// at an instant after the send, and nothing frees capacity before until but
// a reset or unban, which invalidate the entry and keep a forward in flight
// out of the cache), or by a forward of its own. Nothing is ever answered
// from the flight's admission: an admission says nothing of the next
// check. The wait falls within the check's call, so the decision instant
// stays within it. What the wait costs is latency: at most one forward's,
// per round.
//
// Rounds. A flight whose owner denied refills the cache: the waiting checks
// are denied from it. One that admitted the key's last hit (Remaining 0, the
// usual state of an exhausted key, which frees one hit at a time) keeps the
// expired entry: the waiting checks send one more forward, not one each. A
// flight that admitted with capacity left, or failed, drops the entry:
// every check forwards.

// landDenied ends the flight f of the key with ring hash h, whose forward
// answered res (or err), after its denial, if any, was stored.
func (n *Node) landDenied(h uint64, f *denycache.Flight, res *transport.Result, err error) {
	more := err == nil && res.Code == transport.CodeOK && res.Owner != "" && (!res.Decision.Allowed || res.Decision.Remaining == 0)
	n.denied.Land(h, f, more)
}

// storeDenied caches the owner's denial d of c (ring hash h), whose forward
// was sent at sent (node clock) when the cache's epoch was epoch. A check
// with a penalty is cached only when a ban denied it (the owner counts the
// other denials toward a ban).
func (n *Node) storeDenied(c *Check, h uint64, sent int64, epoch uint64, d *Decision) {
	if d.Allowed || !c.cacheable() || (!c.Penalty.IsZero() && !d.Banned) {
		return
	}
	n.denied.Store(h, c.Limit, denycache.Rule(c.Penalty), c.Hits, sent, epoch, denycache.Denial{
		Limit: d.Limit, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Banned: d.Banned, Owner: d.Owner})
}

// cachedDenials returns Stats.CachedDenials: the checks denied from the
// cache since New (0 when the cache is off).
func (n *Node) cachedDenials() uint64 {
	if n.denied == nil {
		return 0
	}
	return n.denied.Hits()
}
