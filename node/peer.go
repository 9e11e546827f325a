// The peer service: what this node answers to its peers (forwards, handoffs,
// replication sends; node/internal/peersvc) and what it needs from the peer
// transport.

package node

import (
	"context"
	"errors"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/peerinput"
	"github.com/ringlimit/ringlimit/node/internal/peersvc"
	"github.com/ringlimit/ringlimit/transport"
)

// peerClient is what the node needs from the transport: forwarding to an owner
// and handing states to a new owner. transport.Pool implements it. It speaks
// transport's wire types: the peer glue converts (see wire.go).
type peerClient interface {
	Forward(ctx context.Context, addr string, c transport.Check) (transport.Result, error)
	Handoff(ctx context.Context, addr string, b transport.TransferBatch) error
	Replicate(ctx context.Context, addr string, b transport.TransferBatch) ([]uint64, error)
	Hello(ctx context.Context, addr string, h transport.Hello) (transport.Hello, string, error)
	KeyOp(ctx context.Context, addr string, r transport.KeyOpRequest) (transport.KeyOpResult, error)
	Drop(addr string)
	Close() error
}

// peerNet replaces the gRPC peer transport in node's own tests (Config.peerNet):
// attach is called once per node, when its gRPC address is known and before it
// joins the cluster, and returns the peerClient it forwards and hands off
// through.
type peerNet interface {
	attach(n *Node) peerClient
}

func (n *Node) onBatch(addr string, size int, took time.Duration, err error) {
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.Forward(addr, size, took, err)
	}
}

// peerService is the owner side of the Peer gRPC service. It is a separate type
// so that Forward and Transfer stay out of Node's public API. Forward,
// ForwardMayWait, Transfer and Replicate are n.psvc's (peersvc.Service, see
// its docs for what each answers).
type peerService struct{ n *Node }

// Forward decides a batch of checks this node owns (peersvc.Service.Forward).
func (p peerService) Forward(ctx context.Context, checks []transport.Check, out []transport.Result) {
	p.n.psvc.Forward(ctx, checks, out)
}

// ForwardMayWait implements transport.ForwardWaitHinter
// (peersvc.Service.ForwardMayWait).
func (p peerService) ForwardMayWait(checks []transport.Check) bool {
	return p.n.psvc.ForwardMayWait(checks)
}

// Transfer installs handed-off states (the more restrictive state wins where the
// key exists) and records the sender's "handoff complete" marker. Peer input is
// untrusted. In secure mode From must be the member named by the sender's
// certificate, else the whole batch is refused with an error wrapping
// ErrRefusedState. Then each state is judged alone: its Limit must be within
// this node's maxima (Config.MaxPeriod, Config.MaxLimit), the state plausible
// under that Limit (algo.State.Plausible with Config.MaxPeerClockSkew) with a
// LastNow not after now + MaxPeerClockSkew, and a caller-clock state is
// accepted only with AcceptCallerTimestamps. A refused state is not installed,
// is counted (Stats.RefusedStates, SecurityMetrics.PeerRefused("state")) and
// logged at most once a second; the rest of the batch is installed, and
// Transfer returns nil. A new key counts against MaxKeys (see store.install).
// A node that is leaving refuses a handoff with an error wrapping
// ErrStopped: its own handoff has run or is running, so what it installed
// would end with it; the sender gives the states to the next owner.
func (p peerService) Transfer(ctx context.Context, b transport.TransferBatch) error {
	return p.n.psvc.Transfer(ctx, b)
}

// Replicate implements transport.ReplicaHandler: it validates a replication
// batch as Transfer does and keeps its states as replicas (see replication.Replicator.Accept),
// returning the ring hashes of the states and ban states it did not apply and
// wants again, whole: log deltas it could not append, and those it cannot
// place in its ring yet. A refused state is not among them: the owner does not
// send it again until the key changes.
func (p peerService) Replicate(ctx context.Context, b transport.TransferBatch) ([]uint64, error) {
	return p.n.psvc.Replicate(ctx, b)
}

// newPeerService returns the node's peer service (peersvc.Config); n.owned,
// n.bans, n.log and n.repl must be set.
func (n *Node) newPeerService() *peersvc.Service[*ringState] {
	return peersvc.New(peersvc.Config[*ringState]{
		Node: peerNode{n}, Owned: n.owned, Bans: n.bans, Secure: n.secure, Clock: n.clock,
		Bounds: peerinput.StateBounds{MaxPeriod: n.cfg.MaxPeriod, MaxLimit: n.cfg.MaxLimit,
			MaxPeerClockSkew: n.cfg.MaxPeerClockSkew, AcceptCallerTimestamps: n.cfg.AcceptCallerTimestamps},
		Stopping: &n.stopping, Leaving: &n.leaving, InstallMu: &n.installMu, Inbound: &n.inbound,
		Refused: n.refused, RefusedState: n.refusedState, Stopped: ErrStopped,
		TimestampError: callerTimestampError,
	})
}

// peerNode is what the peer service needs of the node (peersvc.Node).
type peerNode struct{ n *Node }

func (p peerNode) Ring() *ringState                      { return p.n.rs.Load() }
func (p peerNode) Hash(rs *ringState, key string) uint64 { return rs.Snap.Hash(key) }
func (p peerNode) SyncReplicas(rs *ringState) bool {
	return p.n.cfg.Replication == ReplicationSync && rs.Backups != nil
}
func (p peerNode) Gating(rs *ringState) bool {
	return rs.Gates != nil && time.Now().Before(rs.Deadline)
}
func (p peerNode) Gated(rs *ringState, h uint64) bool        { return rs.Gate(h) != nil }
func (p peerNode) AwaitReplicated(ctx context.Context) error { return p.n.awaitReplicated(ctx) }
func (p peerNode) NoteStrays(hs []uint64)                    { p.n.noteStrays(p.n.rs.Load(), hs) }
func (p peerNode) HandoffDone(from string, digest uint64, after []string, leaving bool) {
	p.n.markHandoffDone(from, digest, after)
	if leaving && !p.n.leaving.Load() {
		// Gossip brings a leave to the last members up to a second after the
		// first (its spread has a tail); the leaver's own marker reaches
		// every member at once. The probe decides, as for a gossiped leave.
		p.n.mem.Leaving(from)
	}
}

func (p peerNode) Owns(rs *ringState, h uint64) bool {
	owner, ok := rs.Snap.OwnerOfHash(h)
	return ok && owner.Name == p.n.cfg.Name && !rs.Leaving && p.n.ready.Load()
}

func (p peerNode) Decide(ctx context.Context, rs *ringState, c *transport.Check, h uint64) transport.Result {
	return p.n.decideResult(ctx, rs, checkFromWire(c), h)
}

func (p peerNode) GrantLease(ctx context.Context, rs *ringState, c *transport.Check, h uint64, r *transport.Result) {
	p.n.grantLease(ctx, rs, c, h, r)
}

func (p peerNode) AsBackup(ctx context.Context, c transport.Check) transport.Result {
	return p.n.router.AsBackup(ctx, c)
}

func (p peerNode) AcceptReplica(b transport.TransferBatch, cb peerinput.Batch) []uint64 {
	return p.n.repl.Accept(b, cb)
}

// decideResult decides c as the owner of its key (hash h) under rs and maps
// the outcome to a Result.
func (n *Node) decideResult(ctx context.Context, rs *ringState, c Check, h uint64) transport.Result {
	if c.booking() {
		var d Decision
		ban, err := n.bookOwned(ctx, rs, &c, h, rs.Snap.PartitionOfHash(h), &d)
		if err != nil {
			return errorResult(err)
		}
		return transport.Result{Decision: d.Decision, Route: transport.RouteOwner, Owner: n.cfg.Name, Code: transport.CodeOK, Banned: ban, Delay: d.Delay, At: d.at}
	}
	var d algo.Decision
	ban, err := n.decideOwned(ctx, rs, &c, h, rs.Snap.PartitionOfHash(h), &d)
	if err != nil {
		return errorResult(err)
	}
	return transport.Result{Decision: d, Route: transport.RouteOwner, Owner: n.cfg.Name, Code: transport.CodeOK, Banned: ban}
}

// ownerResult is decideResult followed, under ReplicationSync, by the wait for
// the state to reach the backup.
func (n *Node) ownerResult(ctx context.Context, rs *ringState, c Check, h uint64) transport.Result {
	r := n.decideResult(ctx, rs, c, h)
	if c.Hits > 0 && r.Code == transport.CodeOK && r.Decision.Allowed {
		if err := n.awaitReplicated(ctx); err != nil {
			return transport.Result{Code: transport.CodeUnavailable, Message: err.Error()}
		}
	}
	return r
}

// errorResult maps an error of deciding a check to its Result code.
func errorResult(err error) transport.Result {
	switch {
	case errors.Is(err, errNotOwner):
		return transport.Result{Code: transport.CodeNotOwner, Message: "not owner"}
	case Classify(err) == ClassInvalid:
		return transport.Result{Code: transport.CodeInvalidArgument, Message: err.Error()}
	}
	var full *KeyTableFullError
	if errors.As(err, &full) {
		// The sender rebuilds the error naming this node as the key's owner.
		return transport.Result{Code: transport.CodeResourceExhausted, Message: full.Text, Decision: algo.Decision{RetryAfter: full.RetryAfter}}
	}
	return transport.Result{Code: transport.CodeUnavailable, Message: err.Error()}
}

// checkedBatch is a transfer batch judged by peersvc.Service.CheckTransfer.
type checkedBatch = peerinput.Batch

func (n *Node) refused(what string) {
	if n.smetrics != nil {
		n.smetrics.PeerRefused(what)
	}
}
