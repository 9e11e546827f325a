package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/booking"
	"github.com/ringlimit/ringlimit/node/internal/store"
)

// This file is waiting instead of failing (x/time/rate's Wait, Reserve and
// Reservation): a check with a MaxWait is sent to the key's owner like any
// other, and the owner books its hits to act up to MaxWait ahead
// (algo.State.Reserve) and answers how long to wait; the caller sleeps that
// long, or gives up at its context's deadline with nothing consumed (the
// owner was told the time left, so it never books a slot the caller cannot
// wait for), or cancels the booking, which travels to the owner too
// (algo.State.Cancel gives back what was not used). GCRA and TokenBucket
// book; the window algorithms refuse a MaxWait (algo.ErrReserveUnsupported).
//
// While the owner is unreachable, the key's backup or the OwnerUnreachable
// policy decides a booking as a plain check (it passes only with no wait,
// Delay 0), and a cancel they receive gives nothing back.

// MaxWait is the longest a wait books ahead: Wait and WaitN with a context
// without a deadline, or with a later one, book at most this far ahead, and
// Reserve and Check refuse a larger Check.MaxWait (an *InputError, field
// "max_wait"). 24 hours.
const MaxWait = 24 * time.Hour

// InfDuration is what Reservation.Delay returns for a reservation that is
// not OK (x/time/rate's InfDuration).
const InfDuration = time.Duration(math.MaxInt64)

// ErrWaitTooLong is returned by Wait and WaitN, wrapped together with
// context.DeadlineExceeded (so Classify sorts it as a timeout), when the
// owner could not book the hits within the context's deadline (or MaxWait):
// nothing was consumed.
var ErrWaitTooLong = errors.New("node: wait would exceed the deadline")

// Reservation is hits booked on a key's owner by Node.Reserve: they act
// Delay after the owner answered. It is safe for concurrent use.
type Reservation struct {
	n        *Node
	c        Check // the key, limit and hits booked
	d        Decision
	answered time.Time // local time of the owner's answer (monotonic)
	done     atomic.Bool
}

// OK reports whether the owner booked the hits within the Check's MaxWait
// (x/time/rate's Reservation.OK). A reservation that is not OK consumed
// nothing; Decision says why (RetryAfter, or RetryNever for hits above the
// limit's capacity).
func (r *Reservation) OK() bool { return r.d.Allowed && r.c.Hits > 0 }

// Decision returns the owner's Decision for the booking: Allowed == OK,
// Delay the wait the owner answered (0 when the hits act at once).
func (r *Reservation) Decision() Decision { return r.d }

// Delay is DelayFrom(time.Now()).
func (r *Reservation) Delay() time.Duration { return r.DelayFrom(time.Now()) }

// DelayFrom returns how long after t the caller must wait before acting on
// the booked hits: the owner's Delay counted from the local time of its
// answer, 0 when that has passed, InfDuration when the reservation is not
// OK (x/time/rate's DelayFrom).
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	if !r.OK() {
		return InfDuration
	}
	return max(0, r.answered.Add(r.d.Delay).Sub(t))
}

// Cancel gives back to the key's owner what the reservation booked and has
// not used, as x/time/rate's Cancel does: nothing when it is not OK, had no
// delay, or its time to act has passed on the owner's clock; otherwise its
// hits minus the hits booked after it (those keep their slots), so the next
// caller gets in earlier. Only the first call does anything. It returns the
// error of the cancel's trip to the owner (ctx's, ErrStopped, an
// unavailable owner: nothing was given back); an owner that is unreachable
// is not retried.
func (r *Reservation) Cancel(ctx context.Context) error {
	if !r.OK() || r.d.Delay <= 0 || r.d.at == 0 || !r.done.CompareAndSwap(false, true) {
		return nil
	}
	c := r.c
	c.MaxWait, c.cancelAt = 0, r.d.at
	var d Decision
	return r.n.decideInto(ctx, &c, &d)
}

// Reserve books c.Hits of c.Key under c.Limit on the key's owner to act
// within c.MaxWait (ns, 0..MaxWait) of the owner's now, without waiting
// (x/time/rate's ReserveN): the Reservation says whether they were booked
// and how long to wait; the caller acts after Delay, or calls Cancel. c.Limit
// must be GCRA or TokenBucket when c.MaxWait > 0. Errors as Check, plus an
// *InputError (field "max_wait") for a MaxWait outside 0..MaxWait or under
// a window algorithm (algo.ErrReserveUnsupported).
func (n *Node) Reserve(ctx context.Context, c Check) (*Reservation, error) {
	if c.CreatedAt != 0 && !n.cfg.AcceptCallerTimestamps {
		return nil, callerTimestampError(c.CreatedAt)
	}
	c.cancelAt = 0
	r := &Reservation{n: n, c: c}
	if err := n.decideInto(ctx, &c, &r.d); err != nil {
		return nil, err
	}
	r.answered = time.Now()
	if !r.OK() {
		r.d.Delay, r.d.at = 0, 0
	}
	return r, nil
}

// Wait waits for one hit of key under l. See WaitN.
func (n *Node) Wait(ctx context.Context, key string, l algo.Limit) error {
	return n.WaitN(ctx, key, l, 1)
}

// WaitN waits until hits hits of key under l (GCRA or TokenBucket) may act,
// x/time/rate's WaitN across the cluster: the key's owner books them to act
// within the time left before ctx's deadline (MaxWait without a deadline,
// or with a later one), and WaitN sleeps until then. It returns nil when the
// hits may act. Errors: an error wrapping ErrWaitTooLong and
// context.DeadlineExceeded when they cannot be booked in time (nothing
// consumed); an *InputError for bad input, hits above the limit's capacity
// (field "hits") or a window algorithm (field "max_wait"); ctx's error when
// it ends during the sleep (the booking is then cancelled: what it has not
// used goes back to the key); otherwise the errors of Check.
func (n *Node) WaitN(ctx context.Context, key string, l algo.Limit, hits int64) error {
	var c Check
	c.Key, c.Limit, c.Hits = key, l, hits
	d, err := n.waitCheck(ctx, c, MaxWait)
	if err != nil {
		return err
	}
	if !d.Allowed {
		if d.RetryAfter == algo.RetryNever {
			return &InputError{Field: "hits", Value: fmt.Sprint(hits), Allowed: fmt.Sprintf("must be at most the limit's capacity, %d, to wait", d.Limit), Err: algo.ErrInvalidLimit}
		}
		return fmt.Errorf("%w (%d hits of %q, next booking in %v): %w", ErrWaitTooLong, hits, key, d.RetryAfter, context.DeadlineExceeded)
	}
	return nil
}

// waitCheck books c with MaxWait = min(maxWait, the time left before ctx's
// deadline) and, when booked, sleeps its delay: the Decision is the owner's
// (Delay the wait slept). A booking that is not OK returns its denied
// Decision at once; so does one whose slot, counted from the owner's answer,
// lies after ctx's deadline (it is cancelled first; RetryAfter is its
// delay). ctx ending during the sleep cancels the booking and
// returns ctx's error.
func (n *Node) waitCheck(ctx context.Context, c Check, maxWait time.Duration) (Decision, error) {
	dl, hasDeadline := ctx.Deadline()
	if hasDeadline {
		maxWait = min(maxWait, time.Until(dl))
	}
	if maxWait <= 0 {
		maxWait = 0 // a deadline already passed: only what passes now
	}
	c.MaxWait = maxWait
	r, err := n.Reserve(ctx, c)
	if err != nil {
		return Decision{}, err
	}
	if !r.OK() || r.d.Delay <= 0 {
		return r.d, nil
	}
	if hasDeadline && r.answered.Add(r.d.Delay).After(dl) {
		// The owner counted maxWait from its own now, which the trip there
		// made later than ours: a slot after our deadline goes back.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.ForwardTimeout)
		defer cancel()
		_ = r.Cancel(cctx)
		d := r.d
		d.Allowed, d.Remaining, d.RetryAfter, d.Delay, d.at = false, 0, d.Delay, 0, 0
		return d, nil
	}
	t := time.NewTimer(r.Delay())
	defer t.Stop()
	select {
	case <-t.C:
		return r.d, nil
	case <-ctx.Done():
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.ForwardTimeout)
		defer cancel()
		_ = r.Cancel(cctx) // best effort: a lost cancel only wastes the slot
		return Decision{}, ctx.Err()
	}
}

// validateWait checks c.MaxWait: 0..MaxWait, and 0 under a window
// algorithm.
func (c *Check) validateWait() error {
	if c.MaxWait < 0 || c.MaxWait > MaxWait {
		return &InputError{Field: "max_wait", Value: fmt.Sprintf("%d ns", int64(c.MaxWait)), Allowed: fmt.Sprintf("must be in 0..%d (%v)", int64(MaxWait), MaxWait), Err: algo.ErrInvalidLimit}
	}
	_, err := c.Limit.Reserving(c.MaxWait)
	return err
}

// booking reports whether c books ahead or cancels a booking, rather than
// being a plain check.
func (c *Check) booking() bool { return c.MaxWait != 0 || c.cancelAt != 0 }

// bookOwned decides c, a booking (MaxWait > 0) or a cancel, as the owner of
// its key (hash h, partition p) under ring state rs, as decideOwned decides
// a plain check, and fills *out (Delay and at for a booking).
func (n *Node) bookOwned(ctx context.Context, rs *ringState, c *Check, h uint64, p int, out *Decision) (banned bool, err error) {
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
	bc := booking.Check{H: h, Key: c.Key, Limit: c.Limit, Hits: c.Hits, MaxWait: c.MaxWait, CancelAt: c.cancelAt,
		Penalty: store.BanRule(c.Penalty), Penalized: !c.Penalty.IsZero(), Take: n.takeOwned}
	r, err := booking.Decide(n.owned, n.bans, &bc, now, wall, func() bool { return n.owns(rs, h) }, n.withinMaxima)
	if err != nil {
		return false, err
	}
	out.Decision, out.Delay, out.at = r.Decision, r.Delay, r.At
	return r.Banned, nil
}

// At returns, for an allowed booking (a check with a MaxWait), the
// owner-clock instant (Unix ns) its hits act at: the owner's now plus Delay;
// 0 otherwise. Instants from one owner compare exactly.
func (d Decision) At() int64 { return d.at }
