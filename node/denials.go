package node

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// This file is local denials: a member that forwarded a check and was
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

// deniedCache is a fixed-size, direct-mapped cache of denials: Config.
// DeniedCacheSize entries (rounded up to a power of two), each slot chosen
// by the key's ring hash; a new denial replaces the slot's entry. Memory is
// about 120 bytes per entry.
type deniedCache struct {
	mask   uint64
	slots  []deniedSlot
	maxTTL int64
	// epoch counts invalidations received; a forward reads it before its
	// send and its denial is cached only if it has not moved.
	epoch atomic.Uint64
	// hits counts checks answered from the cache (Stats.CachedDenials).
	hits atomic.Uint64
}

type deniedSlot struct {
	mu sync.Mutex
	e  deniedEntry
}

type deniedEntry struct {
	h       uint64
	limit   algo.Limit
	pen     Penalty
	hits    int64 // the smallest hits denied
	until   int64 // node clock (ns): no admission before it (what the answer reports)
	expires int64 // node clock (ns): the entry is used until then, at most until and DeniedCacheMaxTTL after the send
	resetAt int64 // node clock (ns) at which the owner's ResetAfter ends
	capac   int64 // Decision.Limit
	remain  int64 // Decision.Remaining the owner answered
	banned  bool
	owner   string
}

func newDeniedCache(size int, maxTTL time.Duration) *deniedCache {
	if size <= 0 {
		return nil
	}
	n := 1
	for n < size {
		n <<= 1
	}
	return &deniedCache{mask: uint64(n - 1), slots: make([]deniedSlot, n), maxTTL: int64(maxTTL)}
}

// cacheable reports whether c may be answered from, or fill, the cache.
func (c *Check) cacheable() bool {
	return c.Hits > 0 && c.CreatedAt == 0 && c.MaxWait == 0 && c.cancelAt == 0
}

// answer fills *out and reports true when a cached denial decides c (ring
// hash h) at now (node clock).
func (dc *deniedCache) answer(c *Check, h uint64, now int64, out *Decision) bool {
	s := &dc.slots[h&dc.mask]
	s.mu.Lock()
	e := &s.e
	if e.h != h || e.expires <= now || c.Hits < e.hits || e.limit != c.Limit || e.pen != c.Penalty {
		s.mu.Unlock()
		return false
	}
	out.Allowed = false
	out.Limit, out.Remaining = e.capac, e.remain
	out.RetryAfter = time.Duration(e.until - now)
	out.ResetAfter = time.Duration(max(e.resetAt-now, e.until-now))
	out.Banned = e.banned
	out.Route, out.Owner = RouteCachedDenial, e.owner
	s.mu.Unlock()
	dc.hits.Add(1)
	return true
}

// store caches the owner's denial d of c (ring hash h), whose forward was
// sent at sent (node clock) when the epoch was epoch.
func (dc *deniedCache) store(c *Check, h uint64, sent int64, epoch uint64, d *Decision) {
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter == algo.RetryNever || !c.cacheable() || (!c.Penalty.IsZero() && !d.Banned) {
		return
	}
	if sent > math.MaxInt64-int64(d.RetryAfter) {
		return
	}
	// The answer reports the owner's whole RetryAfter counting down (a ban of
	// an hour says an hour); the entry itself is used no longer than maxTTL.
	until := sent + int64(d.RetryAfter)
	expires := until
	if int64(d.RetryAfter) > dc.maxTTL {
		expires = sent + dc.maxTTL
	}
	s := &dc.slots[h&dc.mask]
	s.mu.Lock()
	if dc.epoch.Load() != epoch { // an invalidation came while it was in flight
		s.mu.Unlock()
		return
	}
	hits := c.Hits
	if d.Banned {
		hits = 1 // a ban denies every check, whatever its hits
	}
	e := &s.e
	if e.h == h && e.limit == c.Limit && e.pen == c.Penalty && e.expires > sent && e.hits < hits {
		// A denial of fewer hits still holds and answers more checks (a
		// denial of h hits says nothing of fewer): keep it.
		s.mu.Unlock()
		return
	}
	*e = deniedEntry{h: h, limit: c.Limit, pen: c.Penalty, hits: hits, until: until, expires: expires,
		resetAt: sent + min(int64(d.ResetAfter), math.MaxInt64-sent), capac: d.Limit, remain: d.Remaining,
		banned: d.Banned, owner: d.Owner}
	s.mu.Unlock()
}

// invalidate drops the cached denials of the key with ring hash h (every
// limit) and keeps in-flight forwards' answers out of the cache.
func (dc *deniedCache) invalidate(h uint64) {
	s := &dc.slots[h&dc.mask]
	s.mu.Lock()
	dc.epoch.Add(1)
	if s.e.h == h {
		s.e = deniedEntry{}
	}
	s.mu.Unlock()
}

func (n *Node) cachedDenials() uint64 {
	if n.denied == nil {
		return 0
	}
	return n.denied.hits.Load()
}
