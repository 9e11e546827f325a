// The peer service: what this node answers to its peers (forwards, handoffs,
// replication sends) and what it needs from the peer transport.

package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/peerinput"
	"github.com/ringlimit/ringlimit/node/internal/store"
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
// so that Forward and Transfer stay out of Node's public API.
type peerService struct{ n *Node }

// Forward decides a batch of checks this node owns, in order. Keys it does not
// own in its current ring get CodeNotOwner; it never re-forwards them. Checks
// sent to this node as the key's backup (AsBackup) are decided concurrently by
// forwardAsBackup, which may ask the owner once. Under ReplicationSync the
// batch is answered once the states it changed reached their backups.
func (p peerService) Forward(ctx context.Context, checks []transport.Check, out []transport.Result) {
	n := p.n
	n.inbound.Add(1)
	changed := false
	// Made for the first check sent here as a backup only: a WaitGroup that a
	// goroutine's closure captures lives on the heap, one allocation per
	// batch that almost every batch does not need.
	var backups *sync.WaitGroup
	// Hash the checks and start loading their slots before deciding the first
	// (store.prefetch): at a million keys each slot is a cache miss, and
	// misses started together overlap. Every snapshot hashes with the ring's
	// one hash function, so these hashes are the ones decided with.
	var hs [16]uint64
	for i := range min(len(checks), len(hs)) {
		if c := &checks[i]; !c.AsBackup {
			hs[i] = n.owned.Hash(c.Key)
			n.owned.Prefetch(hs[i], c.Limit.Kind)
		}
	}
	for i, c := range checks {
		if c.CreatedAt != 0 && !n.cfg.AcceptCallerTimestamps {
			// This node's config decides, whatever the sender accepted, on
			// every path: as owner, and as backup (deciding on its replica or
			// forwarding to the owner).
			n.refused("timestamp")
			out[i] = transport.Result{Code: transport.CodeInvalidArgument, Message: callerTimestampError(c.CreatedAt).Error()}
			continue
		}
		if err := n.withinMaxima(c.Limit); err != nil {
			out[i] = transport.Result{Code: transport.CodeInvalidArgument, Message: err.Error()}
			continue
		}
		if c.AsBackup && !n.stopping.Load() {
			if backups == nil {
				backups = new(sync.WaitGroup)
			}
			backups.Go(func() { out[i] = n.forwardAsBackup(ctx, c) })
			continue
		}
		if n.stopping.Load() {
			out[i] = transport.Result{Code: transport.CodeUnavailable, Message: "node is stopping"}
			continue
		}
		rs := n.rs.Load()
		var h uint64
		if i < len(hs) {
			h = hs[i]
		} else {
			h = rs.snap.Hash(c.Key)
		}
		owner, ok := rs.snap.OwnerOfHash(h)
		if !ok || owner.Name != n.cfg.Name || rs.leaving || !n.ready.Load() {
			out[i] = transport.Result{Code: transport.CodeNotOwner, Message: "not owner"}
			continue
		}
		out[i] = n.decideResult(ctx, rs, checkFromWire(&checks[i]), h)
		if c.LeaseHits > 0 {
			n.grantLease(ctx, rs, &checks[i], h, &out[i])
		}
		changed = changed || c.Hits > 0 && out[i].Code == transport.CodeOK && out[i].Decision.Allowed
	}
	if backups != nil {
		backups.Wait()
	}
	if changed {
		if err := n.awaitReplicated(ctx); err != nil {
			// Not acknowledged by the backups: not reported as decided.
			for i := range out {
				if !checks[i].AsBackup && checks[i].Hits > 0 && out[i].Code == transport.CodeOK && out[i].Decision.Allowed {
					out[i] = transport.Result{Code: transport.CodeUnavailable, Message: err.Error()}
				}
			}
		}
	}
}

// decideResult decides c as the owner of its key (hash h) under rs and maps
// the outcome to a Result.
func (n *Node) decideResult(ctx context.Context, rs *ringState, c Check, h uint64) transport.Result {
	if c.booking() {
		var d Decision
		ban, err := n.bookOwned(ctx, rs, &c, h, rs.snap.PartitionOfHash(h), &d)
		if err != nil {
			return errorResult(err)
		}
		return transport.Result{Decision: d.Decision, Route: transport.RouteOwner, Owner: n.cfg.Name, Code: transport.CodeOK, Banned: ban, Delay: d.Delay, At: d.at}
	}
	var d algo.Decision
	ban, err := n.decideOwned(ctx, rs, &c, h, rs.snap.PartitionOfHash(h), &d)
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

// ForwardMayWait implements transport.ForwardWaitHinter: it reports whether
// deciding checks now may wait on a handoff gate, that is whether the key of one
// of them is in a partition this node gained from a live previous owner whose
// handoff has not arrived yet and whose deadline has not passed. Without a
// handoff under way it costs one atomic load. Under ReplicationSync every
// batch may wait (for its states to reach their backups), as may a batch with
// a check sent to this node as a key's backup (it may ask the owner).
func (p peerService) ForwardMayWait(checks []transport.Check) bool {
	rs := p.n.rs.Load()
	if p.n.cfg.Replication == ReplicationSync && rs.backups != nil {
		return true
	}
	for i := range checks {
		if checks[i].AsBackup || checks[i].LeaseHits > 0 {
			return true // a lease is replicated to the key's backup before it is answered
		}
	}
	if rs.gates == nil || !time.Now().Before(rs.deadline) {
		return false
	}
	for i := range checks {
		if rs.gate(rs.snap.Hash(checks[i].Key)) != nil {
			return true
		}
	}
	return false
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
	n := p.n
	cb, err := n.checkTransfer(b)
	if err != nil {
		return err
	}
	if b.Replica {
		n.acceptReplica(b, cb)
		return nil
	}
	n.installMu.RLock()
	defer n.installMu.RUnlock()
	if n.leaving.Load() {
		return fmt.Errorf("%w: leaving: hand these keys to the next owner", ErrStopped)
	}
	n.installHandoff(b, cb)
	return nil
}

// Replicate implements transport.ReplicaHandler: it validates a replication
// batch as Transfer does and keeps its states as replicas (see acceptReplica),
// returning the ring hashes of the states and ban states it did not apply and
// wants again, whole: log deltas it could not append, and those it cannot
// place in its ring yet. A refused state is not among them: the owner does not
// send it again until the key changes.
func (p peerService) Replicate(ctx context.Context, b transport.TransferBatch) ([]uint64, error) {
	n := p.n
	cb, err := n.checkTransfer(b)
	if err != nil {
		return nil, err
	}
	return n.acceptReplica(b, cb), nil
}

// checkedBatch is a transfer batch judged by checkTransfer.
type checkedBatch = peerinput.Batch

// checkTransfer validates a transfer batch as untrusted peer input (see
// Transfer): an error for a batch whose sender is not who it claims to be,
// else a verdict per state and ban state (peerinput.CheckBatch).
func (n *Node) checkTransfer(b transport.TransferBatch) (checkedBatch, error) {
	if n.secure && b.Sender != b.From {
		n.refused("sender")
		return checkedBatch{}, fmt.Errorf("%w: from %q, but the sender's certificate names %q", ErrRefusedState, b.From, b.Sender)
	}
	return peerinput.CheckBatch(b, n.clock(), n.stateBounds(), func(key string, err error) {
		n.refusedState(b.From, key, err)
	}), nil
}

// installHandoff installs the states of a validated handoff batch that were
// not refused (see Transfer).
func (n *Node) installHandoff(b transport.TransferBatch, cb checkedBatch) {
	scanned := false // one scan for idle keys per batch at the MaxKeys bound
	hs := make([]uint64, 0, len(b.States))
	for i, ks := range b.States {
		if cb.RefusedAt(i) {
			continue
		}
		h := ks.KeyHash
		if ks.Key != "" {
			h = n.owned.Hash(ks.Key)
		}
		n.owned.InstallScan(h, ks.Limit, cb.States[i], ks.LastNow, ks.CallerClock, cb.Wall, true, &scanned)
		hs = append(hs, h)
	}
	n.noteStrays(n.rs.Load(), hs)
	for i, ps := range b.Penalties {
		if !cb.PenRefusedAt(i) {
			n.bans.Install(n.owned.Hash(ps.Key), store.BanState(ps))
		}
	}
	if b.Done {
		n.markHandoffDone(b.From, b.RingDigest)
	}
}

// stateBounds returns the bounds peers' key states are judged by.
func (n *Node) stateBounds() peerinput.StateBounds {
	return peerinput.StateBounds{
		MaxPeriod: n.cfg.MaxPeriod, MaxLimit: n.cfg.MaxLimit,
		MaxPeerClockSkew: n.cfg.MaxPeerClockSkew, AcceptCallerTimestamps: n.cfg.AcceptCallerTimestamps,
	}
}

func (n *Node) refused(what string) {
	if n.smetrics != nil {
		n.smetrics.PeerRefused(what)
	}
}
