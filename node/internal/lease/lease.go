// Package lease is the mechanism of capacity leases (node's RouteLease). On
// the lessee: Table, a fixed-size table of the hits that keys' owners lent
// this member, from which it admits checks itself, and of the rate of
// forwarded checks per key that decides when to ask for a lease. On the
// owner: Holds, the hits of lent slices that a GCRA or token-bucket state no
// longer counts and the owner holds back. Why the two together never admit
// more than one limiter would is node's lease.go.
//
// Data flow: every check of a key this member does not own passes Decide
// first (one slot lock): it is admitted from a live grant of its key and
// limit, or counted toward the key's rate and answered with how many hits
// to ask for on its forward (0 for none). The forward's answer comes back
// through Answered, which installs the owner's grant (or only clears the
// request in flight). Invalidate drops a key's grants (a reset); the epoch
// keeps the grant of a forward that was in flight during an invalidation
// out of the table.
//
// Over these, the node's two sides of a lease live here too, given what
// they need of the node once (Config's Clock, Owner, Forward; Holds'
// Store, Clock, Owns): the lessee's Await, Renew and Result on the Table
// (lessee.go), and the owner's Grant, TakeInto, Sweep, HandOff and Reset on
// the Holds (grant.go). Node keeps only the glue to its own types.
package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/transport"
)

// Supports reports whether checks under k can be leased: GCRA, TokenBucket
// and FixedWindow. The sliding windows cannot: a hit taken now and admitted
// by the lessee later counts in the owner's window from the time it was
// taken, so it leaves the window earlier than the admission it stands for,
// and the window's bound (at most Limit admissions in any Period) would no
// longer hold.
func Supports(k algo.Kind) bool {
	return k == algo.GCRA || k == algo.TokenBucket || k == algo.FixedWindow
}

// Capacity is the most hits a full key under l holds: GCRA's Burst+1,
// TokenBucket's Burst, else Limit.
func Capacity(l algo.Limit) int64 {
	switch l.Kind {
	case algo.GCRA:
		return l.Burst + 1
	case algo.TokenBucket:
		return l.Burst
	}
	return l.Limit
}

// Config sizes a Table.
type Config struct {
	// Size is the number of slots (rounded up to a power of two), one key and
	// limit each, chosen by the key's ring hash. > 0.
	Size int
	// Threshold is the rate (checks per second of one key and limit on this
	// member) from which this member asks for leases. > 0.
	Threshold float64
	// Period is the longest a lease lives and the time its slice is sized
	// for: the member asks for twice its observed rate × Period hits. > 0.
	Period time.Duration

	// What Await and Renew need of the node (unset in tests of the table
	// alone). Clock returns the node clock (ns).
	Clock func() int64
	// Owner returns the name and address of the owner of the key with ring
	// hash h when a renewal may be sent to it (another member, not skipped
	// by its circuit breaker, while this node is not stopping), else ok
	// false.
	Owner func(h uint64) (name, addr string, ok bool)
	// Forward sends c to the member at addr and returns its answer.
	Forward func(ctx context.Context, addr string, c transport.Check) (transport.Result, error)
	// Timeout bounds a renewal's forward (Config.ForwardTimeout).
	Timeout time.Duration
}

// Table holds this member's leases. Its methods are safe for concurrent use.
type Table struct {
	mask      uint64
	slots     []slot
	threshold float64
	period    int64
	window    int64 // ns over which a key's rate is measured
	// epoch counts invalidations; Answered installs a grant only if it has
	// not moved since the forward's Decide.
	epoch atomic.Uint64
	// admitted counts the checks admitted from leases, granted the grants
	// installed.
	admitted, granted atomic.Uint64
	// inFlight counts the requests asked for and not yet Answered.
	inFlight atomic.Int64
	// node is the Config's Clock, Owner, Forward and Timeout.
	node Config
}

type slot struct {
	mu sync.Mutex
	e  entry
}

// rateWindow is the longest window a key's rate is measured over (Period
// when shorter): short enough that a key that turns hot gets its first
// lease within a few of them.
const rateWindow = 20 * time.Millisecond

// maxGrants is the number of grants one key and limit holds at once: the one
// in use and the next, asked for before the first runs out.
const maxGrants = 2

type entry struct {
	h     uint64
	limit algo.Limit
	used  bool
	// The rate: checks counted since winStart (this node's clock, ns), and
	// the rate of the last full window (checks/s).
	winStart, winCount int64
	rate               float64
	// asked is the clock at which a lease request went out, 0 when none is
	// in flight.
	asked int64
	// quiet is the clock before which no lease is asked for: the last ask
	// got nothing (the key had nothing to spare).
	quiet int64
	// answered is closed when the request in flight is answered (Install);
	// nil when none is in flight.
	answered chan struct{}
	// leasedUntil is the end of the last grant installed (0: none yet).
	leasedUntil int64
	// slice is the hits of the last grant (with those it renewed).
	slice  int64
	owner  string
	grants [maxGrants]grant
}

// grant is one lease: left hits of the key's capacity, usable until end
// (this node's clock, ns: the send plus the lease's length, which is no
// later than the end the owner counts from its own later decision).
type grant struct {
	left int64
	end  int64
	// id is the owner's id of the lease (0: none, a fixed window's), which
	// a renewal names to hand its rest back.
	id int64
}

// New returns a table, or nil when c.Size <= 0 (leases off).
func New(c Config) *Table {
	if c.Size <= 0 {
		return nil
	}
	n := 1
	for n < c.Size {
		n <<= 1
	}
	return &Table{mask: uint64(n - 1), slots: make([]slot, n), threshold: c.Threshold, period: int64(c.Period),
		window: min(int64(c.Period), int64(rateWindow)), node: c}
}

// Answer is what a lease decided for a check: Remaining is what is left of
// this member's leases of the key after the check, ResetAfter the time until
// the last of them ends, Owner the member that lent them.
type Answer struct {
	Remaining  int64
	ResetAfter time.Duration
	Owner      string
	// RenewID and RenewLeft, with an ask, name the lease the renewal
	// renews (0: none) and the most hits this member can still admit of it
	// (the owner records the rest of its slice as used and carries these
	// into the next lease).
	RenewID, RenewLeft int64
}

// Decide admits hits (> 0) of the key with ring hash h under l at now (this
// node's clock, ns) from a live lease and fills *out (ok), or counts the
// check toward the key's rate and returns false, with epoch (to pass to
// Answered) and ask, the hits to ask the key's owner for.
//
// ask > 0 with ok: the check was admitted and the leases of its key run low
// (half of the last slice used, or half of the lease's time gone) while the
// key is hot: the caller renews in the background, without holding up the
// check (a forward of the key asking for ask hits), and calls Answered when
// that forward returned, whatever happened to it. ask > 0 without ok: no
// lease could admit the check; the caller asks for ask hits on its forward
// and calls Answered likewise. At most one request per key and limit is in
// flight at a time (ask is 0 while one is).
func (t *Table) Decide(h uint64, l algo.Limit, hits, now int64, out *Answer) (ok bool, ask int64, epoch uint64) {
	epoch = t.epoch.Load()
	s := &t.slots[h&t.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &s.e
	if !e.used || e.h != h || e.limit != l {
		*e = entry{h: h, limit: l, used: true, winStart: now}
	}
	var total int64
	var last int64
	for i := range e.grants {
		g := &e.grants[i]
		a := g.avail(now)
		if a <= 0 {
			*g = grant{}
			continue
		}
		total += a
		last = max(last, g.end)
	}
	e.count(now, t.window)
	asking := e.asked != 0 && now-e.asked < 10*t.period || now < e.quiet
	if total >= hits {
		e.take(hits)
		*out = Answer{Remaining: total - hits, ResetAfter: time.Duration(max(last-now, 0)), Owner: e.owner}
		t.admitted.Add(1)
		// Renew ahead: less than half of the last slice left, or less than
		// half of the lease's time, while the key is hot. The next slice is
		// asked for in the background while this one serves the checks, and
		// the renewal hands back the rest of the lease that ends last.
		if asking || !e.hot(now, t) || (total-hits)*2 >= e.slice && (last-now)*2 >= t.period {
			return true, 0, epoch
		}
		for i := range e.grants {
			if g := &e.grants[i]; g.id != 0 && g.end == last && g.avail(now) > 0 {
				out.RenewID, out.RenewLeft = g.id, g.left
			}
		}
		return true, e.ask(t, hits, now, t.period), epoch
	}
	// No lease that can admit the check: it is forwarded, and asks for a
	// lease when the key is hot and no request is in flight.
	if asking || !e.hot(now, t) {
		return false, 0, epoch
	}
	return false, e.ask(t, hits, now, t.period), epoch
}

// Pending returns a channel closed when the lease request in flight for
// the key with ring hash h under l is answered, or nil when none is: a
// check that no lease could admit while a renewal is under way waits for
// it rather than forwarding too.
func (t *Table) Pending(h uint64, l algo.Limit) <-chan struct{} {
	s := &t.slots[h&t.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := &s.e; e.used && e.h == h && e.limit == l {
		return e.answered
	}
	return nil
}

// hot reports whether e's key is hot enough at now to ask for a lease: its
// rate is at the threshold, or it held a lease that ended less than
// relapse periods ago. A member whose lease ran out forwards its checks,
// and under load each forward may take long enough that its callers'
// rate falls under the threshold (a closed loop checks only as fast as it
// is answered); without the second rule it would then never lease again.
func (e *entry) hot(now int64, t *Table) bool {
	return e.rate >= t.threshold || e.leasedUntil != 0 && now-e.leasedUntil < relapse*t.period
}

// relapse is how many lease periods after its last lease ended a member
// keeps asking for leases of a key whatever its rate (entry.hot).
const relapse = 10

// ask sizes the next request of e at now for a check of hits and records
// it as in flight: twice the rate × period, so that, renewed when half is
// left, a slice lasts about a period from there, time for the next grant
// to arrive before this one runs out.
func (e *entry) ask(t *Table, hits, now, period int64) int64 {
	ask := int64(2 * max(e.rate, t.threshold) * float64(period) / float64(time.Second))
	e.asked = now
	e.answered = make(chan struct{})
	t.inFlight.Add(1)
	return min(max(ask, 2*hits, 1), algo.MaxHits)
}

// Use admits hits of the key with ring hash h under l at now from a live
// lease whatever the ask policy, and fills *out: for a check that Decide
// sent to the owner to ask for the next lease while the current one could
// have admitted it, and that the owner then denied.
func (t *Table) Use(h uint64, l algo.Limit, hits, now int64, out *Answer) bool {
	s := &t.slots[h&t.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &s.e
	if !e.used || e.h != h || e.limit != l {
		return false
	}
	var total, last int64
	for i := range e.grants {
		if a := e.grants[i].avail(now); a > 0 {
			total += a
			last = max(last, e.grants[i].end)
		}
	}
	if total < hits {
		return false
	}
	e.take(hits)
	*out = Answer{Remaining: total - hits, ResetAfter: time.Duration(max(last-now, 0)), Owner: e.owner}
	t.admitted.Add(1)
	return true
}

// take takes hits from e's grants, which hold at least that many live
// hits (expired grants hold none: Decide clears them, Use checks), the
// grant that ends first first, so that a lease not renewed loses the
// least when it ends.
func (e *entry) take(hits int64) {
	first := 0
	if len(e.grants) == 2 && e.grants[1].left > 0 && (e.grants[0].left <= 0 || e.grants[1].end < e.grants[0].end) {
		first = 1
	}
	for k := range e.grants {
		g := &e.grants[(first+k)%len(e.grants)]
		take := min(hits, g.left)
		if take <= 0 {
			continue
		}
		g.left -= take
		hits -= take
		if hits == 0 {
			return
		}
	}
}

// count adds one check to e's rate, closing the window after window ns.
func (e *entry) count(now, window int64) {
	e.winCount++
	if d := now - e.winStart; d >= window || d < 0 {
		if d > 0 {
			e.rate = float64(e.winCount) * float64(time.Second) / float64(d)
		}
		e.winStart, e.winCount = now, 0
	}
}

// avail returns the hits g may still admit at now: its left hits, none
// from its end on.
func (g *grant) avail(now int64) int64 {
	if g.left <= 0 || now >= g.end {
		return 0
	}
	return g.left
}

// Answered ends the lease request of a forward of the key with ring hash h
// under l that Decide asked for at epoch and that was sent at sent (this
// node's clock, ns): it installs the grant of hits (0: none) that owner
// answered, usable for at most leaseFor and Period after sent, unless the
// table was invalidated since epoch (a reset may have freed what the grant
// was taken from; its hits are then lost, never admitted twice). It is
// Install of a Grant without an id.
func (t *Table) Answered(h uint64, l algo.Limit, epoch uint64, sent, hits int64, leaseFor time.Duration, owner string) {
	t.Install(h, l, epoch, sent, Grant{Hits: hits, For: leaseFor, Owner: owner})
}

// Grant is an owner's answer to a lease request.
type Grant struct {
	// Hits is the new slice (0: none), usable for For after the send.
	Hits int64
	For  time.Duration
	// ID is the owner's id of the lease (0: none); Renewed the id of the
	// lease this one renewed (0: none), whose hits left belong to this
	// lease now.
	ID, Renewed int64
	// Owner is the member that lent it.
	Owner string
}

// Install ends the lease request of a forward of the key with ring hash h
// under l that Decide asked for at epoch and that was sent at sent (this
// node's clock, ns), with the owner's answer g: the grant of g.Hits (0:
// none), usable until sent + min(g.For, Period), unless the table was
// invalidated since epoch (a reset may have freed what the grant was taken
// from; its hits are then lost, never admitted twice). A grant that renewed
// one of this key's leases (g.Renewed) takes that lease's place: the hits
// left of it join the new slice, until the new end (the owner holds them
// under the new lease, which ends no earlier by the owner's clock).
func (t *Table) Install(h uint64, l algo.Limit, epoch uint64, sent int64, g Grant) {
	t.inFlight.Add(-1)
	s := &t.slots[h&t.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &s.e
	mine := e.used && e.h == h && e.limit == l
	if mine {
		e.asked = 0
		if e.answered != nil {
			defer close(e.answered) // after the grant is in
			e.answered = nil
		}
		if g.Hits <= 0 && g.Renewed == 0 {
			e.quiet = sent + t.period/4
		}
	}
	if g.Hits < 0 || g.Hits == 0 && g.Renewed == 0 || g.For <= 0 || t.epoch.Load() != epoch {
		return
	}
	if !mine {
		*e = entry{h: h, limit: l, used: true, winStart: sent}
	}
	ng := grant{left: g.Hits, end: sent + min(int64(g.For), t.period), id: g.ID}
	// Replace the renewed lease, else the grant with the least left (an
	// expired one first).
	j, least := -1, int64(-1)
	for i := range e.grants {
		if g.Renewed != 0 && e.grants[i].id == g.Renewed {
			j = i
			ng.left += max(e.grants[i].avail(sent), 0)
			break
		}
	}
	if j < 0 {
		j = 0
		for i := range e.grants {
			if a := e.grants[i].avail(sent); least < 0 || a < least {
				j, least = i, a
			}
		}
	}
	e.grants[j] = ng
	e.owner, e.slice = g.Owner, ng.left
	e.leasedUntil = max(e.leasedUntil, ng.end)
	t.granted.Add(1)
}

// Invalidate drops every grant of the key with ring hash h (a reset of the
// key: its owner's state no longer counts them) and keeps the grants of
// forwards in flight out of the table.
func (t *Table) Invalidate(h uint64) {
	t.epoch.Add(1)
	s := &t.slots[h&t.mask]
	s.mu.Lock()
	if s.e.h == h {
		s.e.grants = [maxGrants]grant{}
	}
	s.mu.Unlock()
}

// InvalidateAll drops every grant (a ring change that may have moved keys
// to owners that do not know of them is not a reason: the state travels
// with the handoff; this is for tests and for a node that stops).
func (t *Table) InvalidateAll() {
	t.epoch.Add(1)
	for i := range t.slots {
		s := &t.slots[i]
		s.mu.Lock()
		s.e.grants = [maxGrants]grant{}
		s.mu.Unlock()
	}
}

// Admitted returns the number of checks admitted from leases.
func (t *Table) Admitted() uint64 { return t.admitted.Load() }

// InFlight returns the number of lease requests asked for (Decide) and not
// yet Answered.
func (t *Table) InFlight() int64 { return t.inFlight.Load() }

// Granted returns the number of grants installed.
func (t *Table) Granted() uint64 { return t.granted.Load() }
