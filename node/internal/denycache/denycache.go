// Package denycache is the fixed-size cache of owners' denials a member
// answers checks from without a forward (node's RouteCachedDenial). Why
// answering from it is exact, and what invalidates it, is node's
// denials.go; this package is the mechanism: a direct-mapped table of
// entries chosen by the key's ring hash, an epoch that keeps answers of
// forwards in flight during an invalidation out of it, and the clocks of
// each entry.
package denycache

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// Rule is the penalty rule a check carries (node.Penalty's fields: denials,
// window and ban length in ns); the zero Rule is none. A different limit or
// rule is a different entry.
type Rule struct {
	Denials int64
	Within  time.Duration
	Ban     time.Duration
}

// Cache holds the denials (the size given to New rounded up to a power of
// two), one per slot, each slot chosen by the key's ring hash; a new denial
// replaces the slot's entry. Memory is about
// 120 bytes per entry. Its methods are safe for concurrent use.
type Cache struct {
	mask   uint64
	slots  []slot
	maxTTL int64
	// epoch counts invalidations; a forward reads it before its send and its
	// denial is stored only if it has not moved.
	epoch atomic.Uint64
	hits  atomic.Uint64
	// waiting counts the checks waiting for a flight (Wait).
	waiting atomic.Int64
}

type slot struct {
	mu sync.Mutex
	e  entry
}

type entry struct {
	h       uint64
	limit   algo.Limit
	pen     Rule
	hits    int64 // the smallest hits denied
	until   int64 // clock (ns): no admission before it (what the answer reports)
	expires int64 // clock (ns): the entry is used until then, at most until and maxTTL after the send
	resetAt int64 // clock (ns) at which the owner's ResetAfter ends
	d       Denial
	// flight is the one forward of the key (under limit and pen) that the
	// checks arriving after the entry expired wait for; nil when none.
	flight *Flight
}

// Flight is the one forward a member sends of a key whose cached denial
// expired (Join): the other checks of the key that Join meanwhile wait for
// it (Done) instead of forwarding too, then look at the cache again.
type Flight struct {
	done chan struct{}
	once sync.Once
}

// Wait waits until flight f landed (true) or done is closed (false).
func (c *Cache) Wait(f *Flight, done <-chan struct{}) bool {
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	select {
	case <-f.done:
		return true
	case <-done:
		return false
	}
}

// Waiting returns the number of checks waiting for a flight now.
func (c *Cache) Waiting() int64 { return c.waiting.Load() }

// Denial is what the owner answered (and what a cached answer repeats, its
// durations counted down): Limit and Remaining as algo.Decision's,
// RetryAfter and ResetAfter in ns from the owner's decision, Banned when a
// penalty ban denied it, Owner the owner's member name.
type Denial struct {
	Limit, Remaining       int64
	RetryAfter, ResetAfter time.Duration
	Banned                 bool
	Owner                  string
}

// New returns a cache of size entries (rounded up to a power of two) whose
// entries are used at most maxTTL after their forward was sent, or nil when
// size <= 0 (off).
func New(size int, maxTTL time.Duration) *Cache {
	if size <= 0 {
		return nil
	}
	n := 1
	for n < size {
		n <<= 1
	}
	return &Cache{mask: uint64(n - 1), slots: make([]slot, n), maxTTL: int64(maxTTL)}
}

// Answer fills *out with the cached denial of a check of hits under limit
// and rule of the key with ring hash h at now (ns, the clock Store's sent
// uses), its RetryAfter and ResetAfter counted down, and reports true;
// false (out untouched) when no entry decides it (none, expired, another
// limit or rule, or fewer hits than the smallest denied).
func (c *Cache) Answer(h uint64, limit algo.Limit, rule Rule, hits, now int64, out *Denial) bool {
	s := &c.slots[h&c.mask]
	s.mu.Lock()
	e := &s.e
	if e.h != h || e.expires <= now || hits < e.hits || e.limit != limit || e.pen != rule {
		s.mu.Unlock()
		return false
	}
	*out = e.d
	out.RetryAfter = time.Duration(e.until - now)
	out.ResetAfter = time.Duration(max(e.resetAt-now, e.until-now))
	s.mu.Unlock()
	c.hits.Add(1)
	return true
}

// Join is for a check of hits under limit and rule of the key with ring
// hash h that Answer did not decide at now: when the key's entry expired
// (it would have answered the check before), the check either leads the
// one forward of the key (lead: the caller forwards and then calls Land
// with the flight, whatever happened) or gets the flight in progress to
// wait for (then it asks Answer again, and Joins again if still not
// answered). A nil flight: no entry of the key to wait on, forward.
func (c *Cache) Join(h uint64, limit algo.Limit, rule Rule, hits, now int64) (f *Flight, lead bool) {
	s := &c.slots[h&c.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &s.e
	if e.h != h || e.expires > now || e.expires == 0 || hits < e.hits || e.limit != limit || e.pen != rule {
		return nil, false
	}
	if e.flight != nil {
		return e.flight, false
	}
	e.flight = &Flight{done: make(chan struct{})}
	return e.flight, true
}

// Land ends flight f of the key with ring hash h; more says that the key's
// owner has nothing left (its last answer admitted the last hits it had):
// the expired entry then stays, and the checks waiting send one forward
// again (the next Join leads); otherwise it is dropped and every check
// forwards (the key has capacity again, or the forward failed). A denial
// the flight brought back was Stored before, which replaced the entry. Land
// twice is a no-op.
func (c *Cache) Land(h uint64, f *Flight, more bool) {
	f.once.Do(func() {
		s := &c.slots[h&c.mask]
		s.mu.Lock()
		if s.e.flight == f {
			s.e.flight = nil
			if !more {
				s.e = entry{}
			}
		}
		s.mu.Unlock()
		close(f.done)
	})
}

// Epoch returns the count of invalidations, to read before a forward's send
// and give to Store with its answer.
func (c *Cache) Epoch() uint64 { return c.epoch.Load() }

// Store caches the owner's denial d of a check of hits under limit and pen
// of the key with ring hash h, whose forward was sent at sent (ns) when the
// epoch was epoch. It stores nothing when an invalidation came since,
// when d has no RetryAfter (or algo.RetryNever), or when a denial of fewer
// hits of the same key and limit still holds (it answers more checks). A
// ban denies every check of at least one hit.
func (c *Cache) Store(h uint64, limit algo.Limit, pen Rule, hits, sent int64, epoch uint64, d Denial) {
	if d.RetryAfter <= 0 || d.RetryAfter == algo.RetryNever || sent > math.MaxInt64-int64(d.RetryAfter) {
		return
	}
	// The answer reports the owner's whole RetryAfter counting down (a ban of
	// an hour says an hour); the entry itself is used no longer than maxTTL.
	until := sent + int64(d.RetryAfter)
	expires := until
	if int64(d.RetryAfter) > c.maxTTL {
		expires = sent + c.maxTTL
	}
	if d.Banned {
		hits = 1
	}
	s := &c.slots[h&c.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.epoch.Load() != epoch {
		return
	}
	e := &s.e
	if e.h == h && e.limit == limit && e.pen == pen && e.expires > sent && e.hits < hits {
		return
	}
	*e = entry{h: h, limit: limit, pen: pen, hits: hits, until: until, expires: expires,
		resetAt: sent + min(int64(d.ResetAfter), math.MaxInt64-sent), d: d}
}

// Invalidate drops the cached denials of the key with ring hash h (every
// limit) and keeps the answers of forwards in flight out of the cache.
func (c *Cache) Invalidate(h uint64) {
	s := &c.slots[h&c.mask]
	s.mu.Lock()
	c.epoch.Add(1)
	if s.e.h == h {
		s.e = entry{}
	}
	s.mu.Unlock()
}

// Hits returns how many checks Answer decided.
func (c *Cache) Hits() uint64 { return c.hits.Load() }
