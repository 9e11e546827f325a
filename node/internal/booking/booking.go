// Package booking decides, on a key's owner, a check that books its hits
// ahead (a MaxWait: x/time/rate's Reserve across the cluster) or cancels
// such a booking. It knows the stores and algo's reservations, not the
// node: the node routes the check to the owner, waits for the key's handoff
// gate and gives its clock.
//
// Data flow: a booking of GCRA or TokenBucket hits takes them under the
// limit widened to act up to MaxWait ahead (algo.Limit.Reserving), through
// the key's ban state when it carries a penalty, and turns the decision back
// into the caller's limit with the wait it must sleep (algo.Limit.Reserved);
// a cancel gives back what a booking has not used (store.Store.Cancel).
package booking

import (
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/store"
)

// Check is a booking or a cancel of one key, as the owner receives it.
type Check struct {
	H        uint64 // the key's ring hash
	Key      string
	Limit    algo.Limit
	Hits     int64
	MaxWait  time.Duration // > 0: book up to this far ahead
	CancelAt int64         // != 0: cancel the booking acting at this owner instant (Unix ns)
	// Take, when not nil, takes the booking's hits instead of the store's
	// Take (node's capacity leases hold lent hits back from every take).
	Take func(h uint64, l algo.Limit, hits, now, wall int64, owns func() bool) (algo.Decision, error)
	// Penalty is the check's penalty rule; Penalized says it has one.
	Penalty   store.BanRule
	Penalized bool
}

// Result is the owner's answer: the decision under the caller's limit and,
// for an allowed booking, the wait (Delay) and the owner instant (At, Unix
// ns) its hits act at.
type Result struct {
	Decision algo.Decision
	Delay    time.Duration
	At       int64
	Banned   bool // a ban of the key's penalty denied it
}

// Decide decides c on owned and bans at now (the check's time, Unix ns;
// wall the owner's clock); owns reports whether this node still owns the
// key (the store asks it before creating a state). within checks the
// widened limit against the node's maxima. Hits above the limit's capacity
// are not widened and so are denied as a plain check would be. Errors are
// within's, the store's and algo's (algo.ErrReserveUnsupported).
func Decide(owned *store.Store, bans *store.Bans, c *Check, now, wall int64, owns func() bool, within func(algo.Limit) error) (Result, error) {
	if c.CancelAt != 0 {
		r := algo.Reservation{OK: true, Hits: c.Hits, Delay: 1, At: c.CancelAt}
		if err := owned.Cancel(c.H, c.Limit, r, now, owns); err != nil {
			return Result{}, err
		}
		return Result{Decision: algo.Decision{Allowed: true}}, nil
	}
	capacity := c.Limit.Burst
	if c.Limit.Kind == algo.GCRA {
		capacity++
	}
	l := c.Limit
	if c.Hits <= capacity {
		var err error
		if l, err = c.Limit.Reserving(c.MaxWait); err != nil {
			return Result{}, err
		}
		if err := within(l); err != nil {
			return Result{}, err
		}
	}
	take := func(hits int64) (algo.Decision, error) {
		if c.Take != nil {
			return c.Take(c.H, l, hits, now, wall, owns)
		}
		return owned.Take(c.H, l, hits, now, wall, owns)
	}
	var out Result
	var err error
	if !c.Penalized {
		out.Decision, err = take(c.Hits)
	} else {
		out.Decision, out.Banned, err = bans.Take(c.H, c.Key, c.Penalty, c.Hits, now, take)
	}
	if err != nil {
		return Result{}, err
	}
	if l != c.Limit && !out.Banned {
		var delay time.Duration
		out.Decision, delay = c.Limit.Reserved(out.Decision, c.MaxWait)
		if out.Decision.Allowed {
			out.Delay, out.At = delay, now+int64(delay)
		}
	}
	return out, nil
}
