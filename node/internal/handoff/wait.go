package handoff

import (
	"context"
	"log/slog"
	"time"
)

// Gate is one closed handoff gate a check waits on (see Hellos.Wait).
type Gate struct {
	// C is closed when the previous owner's handoff marker arrives.
	C <-chan struct{}
	// From and ID name the previous owner's member and instance.
	From, ID string
	// Deadline is the ring's publication plus HandoffTimeout.
	Deadline time.Time
	// HandoffTimeout counts again from the previous owner's first Hello.
	HandoffTimeout time.Duration
	// ForwardTimeout bounds the wait past Deadline for a previous owner
	// that never says Hello.
	ForwardTimeout time.Duration
	// Moved, when not nil, is closed when the ring the gate belongs to is
	// replaced: the wait ends with Moved, and the waiter looks for the
	// partition's gate in the new ring (a gate still closed there is
	// carried over, see Marks.Publish; one that is not will never open).
	Moved <-chan struct{}
}

// Outcome is how Hellos.Wait ended without an error.
type Outcome int

const (
	// Opened: the gate's marker arrived.
	Opened Outcome = iota
	// ExpiredHeard: given up HandoffTimeout after the previous owner's first Hello.
	ExpiredHeard
	// ExpiredUnheard: given up ForwardTimeout past Deadline, no Hello heard.
	ExpiredUnheard
	// Moved: the gate's ring was replaced (Gate.Moved closed) first.
	Moved
)

// Wait waits until g opens (Opened), is given up (ExpiredHeard or
// ExpiredUnheard), its ring is replaced (Moved), ctx ends (its error) or stop is closed (stopped). A gate
// is given up HandoffTimeout after the later of Deadline−HandoffTimeout
// (the ring's publication) and the previous owner's first Hello to this
// instance: until that Hello the previous owner has not heard of this node,
// has not put it in its ring, still decides the partition's keys itself,
// and has handed nothing off, so a decision here would be on an empty
// state beside it. A previous owner that never says Hello (it crashed, or
// refuses this node) is waited for until Deadline+ForwardTimeout (the
// forwarding member gives up then anyway). log gets a DEBUG line when a
// Hello comes after Deadline.
func (h *Hellos) Wait(ctx context.Context, g Gate, stop <-chan struct{}, stopped error, log *slog.Logger) (Outcome, error) {
	limit := g.Deadline.Add(g.ForwardTimeout)
	for {
		heardAt, heard, sig := h.Heard(g.From, g.ID)
		dl := limit
		if heard {
			dl = g.Deadline
			if d := heardAt.Add(g.HandoffTimeout); d.After(dl) {
				dl = d
			}
		}
		t := time.NewTimer(time.Until(dl))
		select {
		case <-g.C:
			t.Stop()
			return Opened, nil
		case <-g.Moved:
			t.Stop()
			return Moved, nil
		case <-sig:
			t.Stop()
			if !heard && time.Now().After(g.Deadline) {
				log.Debug("handoff gate held past HandoffTimeout: its previous owner said hello late", "from", g.From)
			}
			continue
		case <-t.C:
			if heard {
				return ExpiredHeard, nil
			}
			return ExpiredUnheard, nil
		case <-ctx.Done():
			t.Stop()
			return Opened, ctx.Err()
		case <-stop:
			t.Stop()
			return Opened, stopped
		}
	}
}
