// Package handoff assembles the batches a ring change hands off: per new
// owner, the key states and ban states this node no longer owns, and an
// empty batch (the handoff-complete marker alone) for every other member of
// the new ring, naming the members its recent changes passed partitions to
// (Successors); sends them (Batches.Send); lists the handed-off states
// that arrived for keys this node does not own, to pass them on (Strays);
// and holds a closed partition's gate until its previous owner's marker, or
// until it is given up (Hellos.Wait). It knows the store's moved states and
// transport's types, not the ring: the node decides who owns what.
package handoff

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

// Batches holds one handoff's batches, by new owner's member name. The zero
// Batches is not ready: use NewBatches.
type Batches struct {
	// States holds each owner's key states; an owner present with no
	// states gets the marker alone.
	States map[string][]transport.KeyState
	// Bans holds each owner's ban states.
	Bans map[string][]transport.PenaltyState
	// Addrs holds each owner's peer address.
	Addrs map[string]string
	// Lost counts the states that could not be placed or encoded: they end
	// with this node.
	Lost int
}

// NewBatches returns an empty Batches.
func NewBatches() *Batches {
	return &Batches{
		States: make(map[string][]transport.KeyState),
		Bans:   make(map[string][]transport.PenaltyState),
		Addrs:  make(map[string]string),
	}
}

// Mark gives the owner name at addr a batch (at least the marker).
func (b *Batches) Mark(name, addr string) {
	b.Addrs[name] = addr
	if _, ok := b.States[name]; !ok {
		b.States[name] = nil
	}
}

// AddState adds ms to the batch of the owner name at addr; a state that
// cannot be encoded is counted in Lost.
func (b *Batches) AddState(name, addr string, ms *store.Moved) {
	st, err := ms.St.MarshalBinary()
	if err != nil {
		b.Lost++
		return
	}
	b.Addrs[name] = addr
	b.States[name] = append(b.States[name], transport.KeyState{
		KeyHash: ms.H, Limit: ms.Limit, State: st, LastNow: ms.LastNow, CallerClock: ms.CallerClock,
	})
}

// AddBan adds ps to the batch of the owner name at addr.
func (b *Batches) AddBan(name, addr string, ps store.BanState) {
	b.Mark(name, addr)
	b.Bans[name] = append(b.Bans[name], transport.PenaltyState(ps))
}

// SendFunc sends one owner's batch: the key states and ban states for the
// member name at addr.
type SendFunc func(ctx context.Context, name, addr string, states []transport.KeyState, bans []transport.PenaltyState) error

// Send sends every owner's batch with send, all at once. It returns the
// owners whose send failed (nil when all succeeded) and their errors
// joined, each naming its owner and key count.
func (b *Batches) Send(ctx context.Context, send SendFunc) (failed []string, err error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for name, states := range b.States {
		wg.Go(func() {
			if err := send(ctx, name, b.Addrs[name], states, b.Bans[name]); err != nil {
				mu.Lock()
				failed = append(failed, name)
				errs = append(errs, fmt.Errorf("to %s (%d keys): %w", name, len(states), err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed, errors.Join(errs...)
}

// Replace returns the batches of the owners named in failed re-placed by
// owner, which names the member that takes the key of ring hash h (false:
// none, the state is counted in Lost); hash gives a ban state's key's ring
// hash. The states keep their encoding; the new batches carry no marker of
// their own.
func (b *Batches) Replace(failed []string, owner func(h uint64) (name, addr string, ok bool), hash func(key string) uint64) *Batches {
	out := NewBatches()
	for _, f := range failed {
		for _, ks := range b.States[f] {
			if name, addr, ok := owner(ks.KeyHash); ok {
				out.Addrs[name] = addr
				out.States[name] = append(out.States[name], ks)
			} else {
				out.Lost++
			}
		}
		for _, ps := range b.Bans[f] {
			if name, addr, ok := owner(hash(ps.Key)); ok {
				out.Mark(name, addr)
				out.Bans[name] = append(out.Bans[name], ps)
			} else {
				out.Lost++
			}
		}
	}
	return out
}
