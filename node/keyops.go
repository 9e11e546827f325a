package node

import (
	"context"
	"errors"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/keyops"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// This file is operating one key: inspect it, reset it, lift its ban. Each
// operation is routed to the key's owner like a check (the KeyOp peer RPC;
// the routing and the operations are node/internal/keyops's).
// A reset or an unban frees capacity early, so the owner then sends an
// invalidation of the key to every member (the same RPC): each drops its
// cached denials of the key (see denials.go) and, as the key's backup, its
// replica of what was reset. The owner answers only when every member
// acknowledged, or ForwardTimeout passed (then the answer is an error
// wrapping ErrInvalidationIncomplete, and Config.DeniedCacheMaxTTL bounds
// what a member that missed it may still deny).

// ErrInvalidationIncomplete is wrapped by ResetKey and UnbanKey when the
// key was reset (or unbanned) but some member did not acknowledge the
// invalidation of its cached denials in time: it may deny the key from its
// cache for up to Config.DeniedCacheMaxTTL.
var ErrInvalidationIncomplete = errors.New("node: invalidation not acknowledged by every member")

// KeyInfo is what InspectKey reports of a key under a limit.
type KeyInfo struct {
	// Found: the owner holds a state of the key under the limit's
	// algorithm (none = full capacity).
	Found bool
	// Decision is the owner's state as a peek (0 hits) decides it:
	// Remaining, ResetAfter (ns), Limit (capacity). Zero when not Found.
	Decision algo.Decision
	// BanRemaining is how long the key's penalty ban still lasts (ns); 0 =
	// not banned.
	BanRemaining time.Duration
	// Owner and Backup name the key's owner and backup in the ring of the
	// node asked (Backup "" without replication or a second member).
	Owner, Backup string
	// ReplicaFound: the backup holds a replica of the state; ReplicaAgrees:
	// its peek answers the owner's Remaining (always false when Found and
	// ReplicaFound differ; replication is asynchronous, so a replica may be
	// behind by Config.ReplicationLag).
	ReplicaFound, ReplicaAgrees bool
}

// InspectKey reports key's state under l on its owner (nothing taken,
// nothing created), its ban, its owner and backup, and whether the backup's
// replica agrees. Errors: an *InputError for a bad key or limit, an error
// wrapping ErrUnavailable when the owner cannot be reached, ErrStopped,
// ctx's error.
func (n *Node) InspectKey(ctx context.Context, key string, l algo.Limit) (KeyInfo, error) {
	if err := n.validKeyOp(key, l, true); err != nil {
		return KeyInfo{}, err
	}
	r := transport.KeyOpRequest{Op: transport.KeyOpInspect, Key: key, Limit: l}
	res, owner, err := n.kops.Route(ctx, r)
	if err != nil {
		return KeyInfo{}, err
	}
	ki := KeyInfo{Found: res.Found, Decision: res.Decision, Owner: owner}
	if res.BanUntil != 0 {
		ki.BanRemaining = max(0, time.Duration(res.BanUntil-n.clock()))
	}
	if b, ok := n.Backup(key); ok {
		ki.Backup = b.Name
		r.Op = transport.KeyOpInspectReplica
		var rr transport.KeyOpResult
		if b.Self {
			rr, err = n.kops.Here(ctx, r)
		} else {
			rr, err = n.peers.KeyOp(ctx, b.Addr, r)
		}
		if err == nil && rr.Code == transport.CodeOK {
			ki.ReplicaFound = rr.Found
			ki.ReplicaAgrees = rr.Found == res.Found && rr.Decision.Remaining == res.Decision.Remaining
		}
	}
	return ki, nil
}

// ResetKey drops key's state under l's algorithm on its owner and backup:
// the key is back to full capacity under l. It reports whether there was a
// state. Errors as InspectKey, plus one wrapping ErrInvalidationIncomplete
// (the reset happened).
func (n *Node) ResetKey(ctx context.Context, key string, l algo.Limit) (bool, error) {
	if err := n.validKeyOp(key, l, true); err != nil {
		return false, err
	}
	res, _, err := n.kops.Route(ctx, transport.KeyOpRequest{Op: transport.KeyOpReset, Key: key, Limit: l})
	return res.Found, err
}

// DeleteKey drops key's states under every algorithm and its ban on its
// owner and backup, as Redis's DEL drops a key: every limit of the key
// starts full. It reports whether there was anything. Errors as ResetKey.
func (n *Node) DeleteKey(ctx context.Context, key string) (bool, error) {
	if err := n.validKeyOp(key, algo.Limit{}, false); err != nil {
		return false, err
	}
	res, _, err := n.kops.Route(ctx, transport.KeyOpRequest{Op: transport.KeyOpReset, Key: key, All: true})
	return res.Found, err
}

// UnbanKey lifts key's penalty ban on its owner and backup (the denials
// counted toward a ban are forgotten too). It reports whether the key had a
// ban state. Errors as ResetKey.
func (n *Node) UnbanKey(ctx context.Context, key string) (bool, error) {
	if err := n.validKeyOp(key, algo.Limit{}, false); err != nil {
		return false, err
	}
	res, _, err := n.kops.Route(ctx, transport.KeyOpRequest{Op: transport.KeyOpUnban, Key: key})
	return res.Found, err
}

func (n *Node) validKeyOp(key string, l algo.Limit, withLimit bool) error {
	if n.leaving.Load() || n.stopping.Load() {
		return ErrStopped
	}
	if err := algo.ValidateKey(key, n.cfg.MaxKeyLen, nil); err != nil {
		return err
	}
	if withLimit {
		return l.Validate()
	}
	return nil
}

// newKeyOps returns the node's key operations (keyops.Config); n.owned,
// n.bans, n.denied and n.leases must be set, n.peers is read per send.
func (n *Node) newKeyOps() *keyops.Ops[*ringState] {
	return keyops.NewOps(keyops.Config[*ringState]{
		Node: keyOpsNode{n}, Self: n.cfg.Name, Clock: n.clock, Stopping: &n.stopping,
		Stores:  keyops.Stores{Owned: n.owned, Bans: n.bans, Denied: n.denied, Leases: n.leases},
		Timeout: n.cfg.ForwardTimeout, Retry: 2 * n.cfg.Gossip.GossipInterval,
		Incomplete: ErrInvalidationIncomplete, Unavailable: ErrUnavailable, RefusedByPeer: refusedByPeer,
	})
}

// keyOpsNode is what the key operations need of the node (keyops.Node).
type keyOpsNode struct{ n *Node }

func (k keyOpsNode) Ring() *ringState { return k.n.rs.Load() }

func (k keyOpsNode) Snapshot(rs *ringState) (*ring.Snapshot, bool) { return rs.Snap, rs.Leaving }

func (k keyOpsNode) AwaitRingChange(ctx context.Context, rs *ringState, d time.Duration) {
	k.n.awaitRingChange(ctx, rs, d)
}

func (k keyOpsNode) Send(ctx context.Context, addr string, r transport.KeyOpRequest) (transport.KeyOpResult, error) {
	return k.n.peers.KeyOp(ctx, addr, r)
}

func (k keyOpsNode) LeaseReset(h uint64, kind algo.Kind, all, complete bool) {
	k.n.holds.Reset(h, kind, all, complete)
}

// KeyOp implements transport.KeyOpHandler (keyops.Ops.KeyOp).
func (s peerService) KeyOp(ctx context.Context, r transport.KeyOpRequest) (transport.KeyOpResult, error) {
	return s.n.kops.KeyOp(ctx, r)
}
