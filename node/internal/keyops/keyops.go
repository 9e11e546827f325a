// Package keyops runs the operations on one key (inspect, reset, delete,
// unban, invalidate: transport.KeyOpRequest) on the stores of one node, and
// sends a reset's invalidation to the other members. It knows the stores and
// transport's request and result, not the node: the node routes a request to
// the key's owner, says whether it owns the key, and gives its clock.
//
// Data flow: the owner applies a reset or an unban to its stores (Apply),
// drops its own cached denials of the key and sends the invalidation Apply
// returns to every other member (Broadcast); each of them drops its cached
// denials and capacity leases of the key and, as the key's backup, its
// replica of what was reset (Apply of the invalidation).
package keyops

import (
	"context"
	"sync"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/denycache"
	"github.com/ringlimit/ringlimit/node/internal/lease"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

// Stores are the stores of one node that key operations read and change.
type Stores struct {
	Owned  *store.Store
	Bans   *store.Bans
	Denied *denycache.Cache // nil: no denial cache
	Leases *lease.Table     // nil: no capacity leases
}

// notOwner answers a request that only the key's owner may answer.
var notOwner = transport.KeyOpResult{Code: transport.CodeNotOwner, Message: "not the owner of the key"}

// Apply runs r on the key of ring hash h; owns says whether this node owns
// the key in its current ring, clock gives its now (Unix ns). An inspection
// peeks (0 hits, nothing created) and reads the ban; only the owner answers
// KeyOpInspect, the backup KeyOpInspectReplica too. The owner applies a
// reset (of one algorithm's state, or with All of every state and the ban)
// or an unban and returns, with inv set, the invalidation to send to every
// other member (see Broadcast). An invalidation drops the key's cached
// denials and leases and, when this node does not own the key (as its backup), the
// replica of what was reset. Errors are the store's; a request of another
// node's making is answered with its code (CodeNotOwner,
// CodeInvalidArgument), not an error.
func (s Stores) Apply(r transport.KeyOpRequest, h uint64, owns bool, clock func() int64) (res transport.KeyOpResult, inv *transport.KeyOpRequest, err error) {
	switch r.Op {
	case transport.KeyOpInspect, transport.KeyOpInspectReplica:
		if r.Op == transport.KeyOpInspect && !owns {
			return notOwner, nil, nil
		}
		if s.Owned.Has(h, r.Limit.Kind) {
			wall := clock()
			d, err := s.Owned.Take(h, r.Limit, 0, wall, wall, func() bool { return true })
			if err != nil {
				return transport.KeyOpResult{}, nil, err
			}
			res.Found, res.Decision = true, d
		}
		res.BanUntil = s.Bans.BanUntil(h, r.Key, clock())
		return res, nil, nil
	case transport.KeyOpReset, transport.KeyOpUnban:
		if !owns {
			return notOwner, nil, nil
		}
		var found bool
		switch {
		case r.Op == transport.KeyOpReset && r.All:
			found = s.dropAll(h, r.Key)
		case r.Op == transport.KeyOpReset:
			found = s.Owned.Remove(h, r.Limit.Kind)
		default:
			found = s.Bans.Unban(h, r.Key)
		}
		inv := transport.KeyOpRequest{Op: transport.KeyOpInvalidate, Key: r.Key, All: r.All}
		if r.Op == transport.KeyOpReset {
			inv.Limit.Kind = r.Limit.Kind
		}
		s.invalidate(h)
		return transport.KeyOpResult{Found: found}, &inv, nil
	case transport.KeyOpInvalidate:
		s.invalidate(h)
		if !owns { // as the key's backup: drop the replica of what was reset
			if r.All {
				s.dropAll(h, r.Key)
			} else if r.Limit.Kind.Valid() {
				s.Owned.Remove(h, r.Limit.Kind)
			} else {
				s.Bans.Unban(h, r.Key)
			}
		}
		return transport.KeyOpResult{}, nil, nil
	}
	return transport.KeyOpResult{Code: transport.CodeInvalidArgument, Message: "unknown key operation"}, nil, nil
}

// invalidate drops this node's cached denials and capacity leases of the
// key with ring hash h: a reset or an unban freed capacity early.
func (s Stores) invalidate(h uint64) {
	if s.Denied != nil {
		s.Denied.Invalidate(h)
	}
	if s.Leases != nil {
		s.Leases.Invalidate(h)
	}
}

// dropAll drops the key's states under every algorithm and its ban state,
// and reports whether there was any.
func (s Stores) dropAll(h uint64, key string) bool {
	found := s.Bans.Unban(h, key)
	for _, k := range algo.Kinds() {
		if s.Owned.Remove(h, k) {
			found = true
		}
	}
	return found
}

// Peer is a member to send an invalidation to.
type Peer struct{ Name, Addr string }

// Broadcast sends inv to every peer at once through send and waits for all
// of them (send should bound its wait by ctx); it returns the names of the
// peers that failed or answered another code than CodeOK.
func Broadcast(ctx context.Context, peers []Peer, inv transport.KeyOpRequest,
	send func(ctx context.Context, addr string, r transport.KeyOpRequest) (transport.KeyOpResult, error)) (missed []string) {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := send(ctx, p.Addr, inv)
			if err != nil || res.Code != transport.CodeOK {
				mu.Lock()
				missed = append(missed, p.Name)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return missed
}
