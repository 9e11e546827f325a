package lease

import (
	"context"
	"math"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

// This file is the owner's side of leases: what it lends (Grant), how its
// own checks count the slices still out (TakeInto), and when a slice is
// recorded in its key's state (Sweep, HandOff) or forgotten (Reset). Why
// this never admits more than one limiter would is node's lease.go.

// Grant is the owner's side of a lease request: c, a forwarded check of a
// key this node owns (ring hash h; owns is its ownership test, see
// store.Take), asked for a lease and was decided as r, with members the
// number of members in the ring. It lends what the key can spare, has
// replicate send the key's backup a state that counts the slice (and every
// slice still out) as admitted now, and only then sets r's lease fields
// (and lowers r's Remaining by the slice). Nothing is lent when s is nil
// (leases off), the check cannot be leased, the key lacks the capacity, or
// replicate fails.
func (s *Holds) Grant(ctx context.Context, c *transport.Check, h uint64, r *transport.Result, members int, owns func() bool, replicate func(context.Context, *store.Moved) error) {
	if s == nil || c.LeaseHits <= 0 || r.Code != transport.CodeOK || !r.Decision.Allowed || r.Banned ||
		c.Hits < 0 || c.CreatedAt != 0 || c.MaxWait != 0 || c.CancelAt != 0 || !c.Penalty.IsZero() || !Supports(c.Limit.Kind) {
		return
	}
	l := c.Limit
	others := max(members-1, 1)
	most := int64(float64(Capacity(l)) * s.MaxShare / float64(others))
	want := min(c.LeaseHits, most, r.Decision.Remaining)
	if want <= 0 && c.LeaseID <= 0 {
		return
	}
	now := s.Clock()
	leaseFor := s.Period
	var m store.Moved
	var id, renewed uint64
	var carried int64
	if l.Kind == algo.FixedWindow {
		if want <= 0 {
			return
		}
		// Taken from the window now: the lease ends with the window.
		d, probe, err := s.Store.Probe(h, l, want, now, owns)
		if err != nil || !d.Allowed || d.ResetAfter <= 0 {
			return
		}
		m, leaseFor = probe, min(leaseFor, d.ResetAfter)
	} else {
		sh := s.Lock(h)
		s.recordEnded(sh, h, l.Kind, now, owns)
		if c.LeaseID > 0 {
			// A renewal asks for LeaseHits in all: what it still holds of
			// the lease it renews, topped up.
			renewed, carried = s.renewHold(sh, h, l, uint64(c.LeaseID), c.LeaseLeft, now, owns)
			want = max(0, min(want, c.LeaseHits-carried, most-carried))
		}
		if want <= 0 && renewed == 0 {
			sh.Unlock()
			return
		}
		held := sh.Held(h, l.Kind)
		d, probe, err := s.Store.Probe(h, l, min(want+held, algo.MaxHits), now, owns)
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
	if err := replicate(ctx, &m); err != nil {
		// Not lent: a slice the backup would not count after a crash. The
		// hits carried from a renewed slice stay held (its lessee still
		// admits them under the old lease), under the new id until the new
		// end: longer than needed, never shorter.
		if s.Log != nil {
			s.Log.Debug("lease not granted: its state did not reach the key's backup", "err", err)
		}
		if id != 0 {
			sh := s.Lock(h)
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
		d, err := s.Store.Take(h, l, want, now, now, owns)
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
// the key since the grant (Holds). Its used hits were all admitted before
// now, so recording them at now counts them no earlier than they happened;
// a GCRA TAT or token count that records hits later only admits less
// (max(a, t) + d grows with t). The lessee admits no more than left of the
// slice from here on (it counts down from what it reported), and left
// stays held. A report that arrives after the owner recorded the slice (its
// lease ended on the owner's clock, a reset, a handoff) finds no slice of
// that id and changes nothing: nothing recorded is ever given back, so a
// late report cannot free what the state already counts.
func (s *Holds) renewHold(sh *Shard, h uint64, l algo.Limit, id uint64, left, now int64, owns func() bool) (uint64, int64) {
	held, ok := sh.Hits(h, l.Kind, id)
	if !ok {
		return 0, 0
	}
	left = min(max(left, 0), held)
	if used := held - left; used > 0 {
		if d, err := s.Store.Take(h, l, used, now, now, owns); err != nil || !d.Allowed {
			return 0, 0
		}
	}
	sh.Set(h, l.Kind, id, left)
	return id, left
}

// TakeInto decides a check of hits of the key with ring hash h under l as
// its owner (store.TakeInto, with its arguments), holding back the hits of
// the GCRA and token-bucket slices lent out and still unrecorded, and
// recording those whose lease ended. The node calls it only when Any: the
// owner's checks of keys without leases go to the store directly.
func (s *Holds) TakeInto(out *algo.Decision, h uint64, l algo.Limit, hits, now, wall int64, owns func() bool) error {
	if l.Kind != algo.GCRA && l.Kind != algo.TokenBucket {
		return s.Store.TakeInto(out, h, l, hits, now, wall, owns)
	}
	sh := s.Lock(h)
	defer sh.Unlock()
	s.recordEnded(sh, h, l.Kind, wall, owns)
	if held := sh.Held(h, l.Kind); held > 0 {
		return s.Store.TakeHeldInto(out, h, l, hits, held, int64(s.Period), now, wall, owns)
	}
	return s.Store.TakeInto(out, h, l, hits, now, wall, owns)
}

// recordEnded records in the key's state, as admitted at now (node clock),
// the slices of the key (ring hash h, algorithm k) whose lease ended; sh is
// the key's locked hold shard.
func (s *Holds) recordEnded(sh *Shard, h uint64, k algo.Kind, now int64, owns func() bool) {
	sh.Record(h, k, now, func(hits int64, l algo.Limit) bool {
		d, err := s.Store.Take(h, l, hits, now, now, owns)
		return err == nil && d.Allowed
	})
}

// Sweep records, at now (node clock), the slices whose lease ended of keys
// no check has touched since (so that the holds do not outlive their keys,
// and the owner's checks skip them once none is left), and forgets the
// slices of keys the node no longer owns (Owns: their state moved on with
// the ring). The node calls it every IdleScanInterval; nil s: nothing.
func (s *Holds) Sweep(now int64) {
	for _, k := range s.Ended(now) {
		sh := s.Lock(k.H)
		if owns := s.Owns(k.H); owns != nil {
			s.recordEnded(sh, k.H, k.Kind, now, owns)
		} else {
			sh.Drop(k.H, k.Kind)
		}
		sh.Unlock()
	}
}

// HandOff records in the state, as admitted now, every slice still held of
// a key the node does not keep (keep(h) false: it does not own the key
// after a ring change, or it leaves), and forgets the holds: the handoff
// that follows then carries the slices to the key's new owner, which never
// saw them lent. Nil s: nothing.
func (s *Holds) HandOff(keep func(h uint64) bool) {
	if !s.Any() {
		return
	}
	now := s.Clock()
	for _, k := range s.Keys() {
		if keep(k.H) {
			continue
		}
		sh := s.Lock(k.H)
		sh.Record(k.H, k.Kind, math.MaxInt64, func(hits int64, l algo.Limit) bool {
			d, err := s.Store.Take(k.H, l, hits, now, now, nil)
			return err == nil && d.Allowed
		})
		sh.Drop(k.H, k.Kind)
		sh.Unlock()
	}
}

// Reset is a reset of the key with ring hash h under k (all: every
// algorithm) on its owner: the slices lent of it are forgotten when every
// member dropped its leases of the key (complete), and otherwise stay held
// in full against the fresh state. Nil s: nothing.
func (s *Holds) Reset(h uint64, k algo.Kind, all, complete bool) {
	if !complete || !s.Any() {
		return
	}
	sh := s.Lock(h)
	defer sh.Unlock()
	for _, kind := range []algo.Kind{algo.GCRA, algo.TokenBucket} {
		if all || kind == k {
			sh.Drop(h, kind)
		}
	}
}
