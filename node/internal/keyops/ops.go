package keyops

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// Node is what Ops needs of its node's ring and peers. R is the node's ring
// state (one published view of the cluster), which Ops loads once per
// attempt and hands back unchanged.
type Node[R any] interface {
	// Ring returns the node's current ring state.
	Ring() R
	// Snapshot returns rs's ring, and whether the node is leaving in rs (it
	// then owns nothing).
	Snapshot(rs R) (snap *ring.Snapshot, leaving bool)
	// AwaitRingChange returns once a ring state replaced rs (at once if one
	// did), d passed, ctx ended or the node stopped.
	AwaitRingChange(ctx context.Context, rs R, d time.Duration)
	// Send makes the KeyOp call of r to the member at addr.
	Send(ctx context.Context, addr string, r transport.KeyOpRequest) (transport.KeyOpResult, error)
	// LeaseReset is called after the owner reset the state of the key of
	// ring hash h under k (every algorithm with all) and broadcast its
	// invalidation; complete reports whether every member acknowledged it.
	LeaseReset(h uint64, k algo.Kind, all, complete bool)
}

// Config is what Ops needs of its node besides Node, built once when the
// node is made.
type Config[R any] struct {
	Node Node[R]
	// Self is the node's member name.
	Self string
	// Stores are the node's stores; Clock returns its clock (Unix ns).
	Stores Stores
	Clock  func() int64
	// Stopping is set once the node stops: it answers CodeUnavailable.
	Stopping *atomic.Bool
	// Timeout bounds the routing of an operation and the wait for an
	// invalidation's acknowledgements (the node's ForwardTimeout); Retry
	// is the longest wait for a ring change before routing again while
	// rings disagree (two gossip rounds).
	Timeout, Retry time.Duration
	// Incomplete is the error (node.ErrInvalidationIncomplete) wrapped when
	// an operation happened but some member did not acknowledge its
	// invalidation; Unavailable (node.ErrUnavailable) is wrapped when the
	// owner cannot be reached or keeps refusing; RefusedByPeer is the error
	// of an owner's CodeInvalidArgument answer with its message.
	Incomplete, Unavailable error
	RefusedByPeer           func(peer, msg string) error
}

// Ops runs the key operations of one node: routed to the key's owner
// (Route), on this node (Here), and answered to a peer (KeyOp). Its
// methods are safe for concurrent use.
type Ops[R any] struct {
	cfg Config[R]
}

// NewOps returns the Ops of cfg; every field of cfg must be set.
func NewOps[R any](cfg Config[R]) *Ops[R] { return &Ops[R]{cfg: cfg} }

// Route runs r on the key's owner (here when this node owns it, or no ring
// names one), routing again while rings disagree, up to Timeout, and
// returns its result and the owner's name. Errors: ctx's; one wrapping
// Unavailable when the owner cannot be reached or keeps answering another
// code than CodeOK; RefusedByPeer's for an owner's CodeInvalidArgument; one
// wrapping Incomplete when the operation happened but its invalidation was
// not acknowledged by every member (the result is then the operation's).
func (o *Ops[R]) Route(ctx context.Context, r transport.KeyOpRequest) (transport.KeyOpResult, string, error) {
	cfg := &o.cfg
	deadline := time.Now().Add(cfg.Timeout)
	for {
		rs := cfg.Node.Ring()
		snap, _ := cfg.Node.Snapshot(rs)
		owner, ok := snap.Owner(r.Key)
		var res transport.KeyOpResult
		var err error
		if !ok || owner.Name == cfg.Self {
			owner.Name = cfg.Self
			res, err = o.Here(ctx, r)
		} else {
			res, err = cfg.Node.Send(ctx, owner.Addr, r)
		}
		if err != nil && !errors.Is(err, cfg.Incomplete) {
			if ctx.Err() != nil {
				return res, owner.Name, ctx.Err()
			}
			return res, owner.Name, fmt.Errorf("%w: key operation on %s: %w", cfg.Unavailable, owner.Name, err)
		}
		switch res.Code {
		case transport.CodeOK:
			if err == nil && res.Message != "" { // a remote owner's incomplete invalidation
				err = fmt.Errorf("%w: %s", cfg.Incomplete, res.Message)
			}
			return res, owner.Name, err
		case transport.CodeInvalidArgument:
			return res, owner.Name, cfg.RefusedByPeer(owner.Name, res.Message)
		}
		if !time.Now().Before(deadline) {
			return res, owner.Name, fmt.Errorf("%w: key operation: owner %s answered %v: %s", cfg.Unavailable, owner.Name, res.Code, res.Message)
		}
		if cfg.Node.AwaitRingChange(ctx, rs, cfg.Retry); ctx.Err() != nil {
			return res, owner.Name, ctx.Err()
		}
	}
}

// KeyOp implements transport.KeyOpHandler: Here, with an incomplete
// invalidation said in the answer's Message (the operation happened).
func (o *Ops[R]) KeyOp(ctx context.Context, r transport.KeyOpRequest) (transport.KeyOpResult, error) {
	res, err := o.Here(ctx, r)
	if errors.Is(err, o.cfg.Incomplete) {
		res.Message, err = err.Error(), nil // the operation happened: say so in the answer
	}
	return res, err
}

// Here runs r on this node (Stores.Apply, owning the key when its ring
// says so and it is not leaving), and sends a reset's or unban's
// invalidation to every other member of that ring (Broadcast, bounded by
// Timeout), then tells Node.LeaseReset of a reset. A stopping node answers
// CodeUnavailable. Errors: Apply's, or one wrapping Incomplete naming the
// members that did not acknowledge the invalidation.
func (o *Ops[R]) Here(ctx context.Context, r transport.KeyOpRequest) (transport.KeyOpResult, error) {
	cfg := &o.cfg
	if cfg.Stopping.Load() {
		return transport.KeyOpResult{Code: transport.CodeUnavailable, Message: "stopping"}, nil
	}
	snap, leaving := cfg.Node.Snapshot(cfg.Node.Ring())
	h := snap.Hash(r.Key)
	m, ok := snap.OwnerOfHash(h)
	owns := ok && m.Name == cfg.Self && !leaving
	res, inv, err := cfg.Stores.Apply(r, h, owns, cfg.Clock)
	if err != nil || inv == nil {
		return res, err
	}
	err = o.broadcast(ctx, snap, *inv)
	if r.Op == transport.KeyOpReset {
		cfg.Node.LeaseReset(h, r.Limit.Kind, r.All, err == nil)
	}
	return res, err
}

// broadcast sends inv to every other member of snap and waits for their
// acknowledgements, up to Timeout; an error wrapping Incomplete names those
// that did not acknowledge.
func (o *Ops[R]) broadcast(ctx context.Context, snap *ring.Snapshot, inv transport.KeyOpRequest) error {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	var peers []Peer
	for _, m := range snap.Members() {
		if m.Name != o.cfg.Self {
			peers = append(peers, Peer{Name: m.Name, Addr: m.Addr})
		}
	}
	if missed := Broadcast(ctx, peers, inv, o.cfg.Node.Send); len(missed) > 0 {
		return fmt.Errorf("%w: %v", o.cfg.Incomplete, missed)
	}
	return nil
}
