package handoff

import (
	"context"
	"errors"
	"fmt"

	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
)

// ErrNoneLeft is wrapped by Deliver's error when every member of the ring
// refused or failed: the whole cluster is stopping (or unreachable).
var ErrNoneLeft = errors.New("handoff: no member left to take the keys")

// Plan assembles the batches of c.Self's handoff for ring change c: each
// moved key state and ban state to its owner under cur (Lost counts those
// no member owns), and a marker to every other member of cur. A marker says
// only that Self holds nothing more of the receiver's partitions in cur,
// which is true of every member, and every member may be waiting for it: a
// new owner gates a partition on its own previous ring's owner, and when
// the two came through different rings (members joining at once, a change
// one of them coalesced or saw later) that may be Self even though, as Self
// sees the change, the receiver gained nothing; a marker's After may also
// name Self to a member Self never handed anything to (see Successors).
// Without a marker the gate waited out HandoffTimeout (hundreds of checks
// held about 1 s when 10 of 20 members joined at once). A restarted member
// waits for a marker from the owner each of its partitions would have
// without it: its backup. That is one marker per member per ring change,
// O(members) messages for each member.
func Plan(c *Change, moved []store.Moved, bans []store.BanState) *Batches {
	b := NewBatches()
	cur, self := c.Cur, c.Self
	for _, m := range cur.Members() {
		if m.Name != self {
			b.Mark(m.Name, m.Addr)
		}
	}
	for i := range moved {
		if m, ok := cur.OwnerOfHash(moved[i].H); ok {
			b.AddState(m.Name, m.Addr, &moved[i])
		} else {
			b.Lost++
		}
	}
	for _, ps := range bans {
		if m, ok := cur.Owner(ps.Key); ok {
			b.AddBan(m.Name, m.Addr, ps)
		} else {
			b.Lost++
		}
	}
	return b
}

// Deliver sends b's batches with first and, while sends fail, gives the
// states of the owners whose send failed to the owners of their keys under
// the ring (of configuration cfg) of members without every owner that
// failed so far, sending those batches with again; retry is called before
// each such round with the owners that failed and their errors. A member
// refuses a handoff once it is leaving: members leaving at once each hand
// their keys off under a ring that still holds the others, and a state
// handed to a member whose own handoff had run ended with it. It returns
// the states no member took (not counting b.Lost) and the errors of the
// sends that still failed, wrapped in ErrNoneLeft when every member failed
// (the whole cluster is stopping).
func (b *Batches) Deliver(ctx context.Context, members []ring.Member, cfg ring.Config,
	first, again SendFunc, retry func(failed []string, err error)) (lost int, err error) {
	failed, err := b.Send(ctx, first)
	gone := make(map[string]bool)
	for len(failed) > 0 && ctx.Err() == nil {
		var keep []ring.Member
		for _, f := range failed {
			gone[f] = true
		}
		for _, m := range members {
			if !gone[m.Name] {
				keep = append(keep, m)
			}
		}
		if len(keep) == 0 {
			err = fmt.Errorf("%w: %w", ErrNoneLeft, err)
			break
		}
		r, berr := ring.SnapshotOf(cfg, keep)
		if berr != nil {
			break
		}
		nb := b.Replace(failed, func(h uint64) (string, string, bool) {
			m, ok := r.OwnerOfHash(h)
			return m.Name, m.Addr, ok
		}, r.Hash)
		lost += nb.Lost
		retry(failed, err)
		failed, err = nb.Send(ctx, again)
		b = nb
	}
	for _, f := range failed {
		lost += len(b.States[f]) + len(b.Bans[f])
	}
	return lost, err
}
