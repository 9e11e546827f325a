// Package peersvc is what a node answers to its peers: their forwarded
// checks (Forward, ForwardMayWait), their handoffs (Transfer) and their
// replication sends (Replicate). Service implements transport's
// PeerHandler, ForwardWaitHinter and ReplicaHandler over what it is given
// once, when the node is made: the node's decisions and ring (Node) and its
// stores and flags (Config).
//
// Data flow of a forwarded batch: each check is judged as untrusted input
// (a caller timestamp only with AcceptCallerTimestamps, its Limit within
// the node's maxima), then a check sent to this node as its key's backup
// goes to Node.AsBackup in a goroutine of its own, and every other check is
// decided here if this node owns its key (Node.Owns, Node.Decide, then
// Node.GrantLease when it asks for a lease), else answered CodeNotOwner; it
// is never forwarded again. Under ReplicationSync the batch is answered once
// the states it changed reached their backups (Node.AwaitReplicated).
//
// Data flow of a transfer batch: the sender is judged (secure mode: the
// member its certificate names), then every state and ban state alone
// (peerinput.CheckBatch); a replica batch goes to Node.AcceptReplica, a
// handoff is installed in Config.Owned and Config.Bans.
package peersvc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/node/internal/peerinput"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

// Node is what a Service needs of its node's ring and decisions. R is the
// node's ring state (one published view of the cluster), which the
// Service loads once per check or batch and hands back unchanged.
type Node[R any] interface {
	// Ring returns the node's current ring state.
	Ring() R
	// Hash returns the ring hash of key under rs.
	Hash(rs R, key string) uint64
	// Owns reports whether this node may decide the key of ring hash h as
	// its owner under rs: it owns the key in rs, it is not leaving, and it
	// is ready.
	Owns(rs R, h uint64) bool
	// Decide decides c as the owner of its key (ring hash h) under rs and
	// returns its Result: CodeOK with the Decision, or the error of
	// deciding it mapped to its code.
	Decide(ctx context.Context, rs R, c *transport.Check, h uint64) transport.Result
	// GrantLease is called after Decide for a check that asks for a lease
	// (LeaseHits > 0) with its Result r: it lends what the key can spare
	// and sets r's lease fields, or leaves r unchanged.
	GrantLease(ctx context.Context, rs R, c *transport.Check, h uint64, r *transport.Result)
	// AsBackup answers c, sent to this node as its key's backup
	// (c.AsBackup). It is called in a goroutine of its own, at most once
	// per check, and returns before Forward does.
	AsBackup(ctx context.Context, c transport.Check) transport.Result
	// AwaitReplicated waits, under ReplicationSync, until a replication send
	// that began after the call has finished: nil (at once without
	// ReplicationSync or backups), else the error the admissions of the
	// batch are answered with instead (the backup may never learn of them).
	AwaitReplicated(ctx context.Context) error
	// SyncReplicas reports whether every batch may wait for its states to
	// reach their backups: ReplicationSync, and rs has backups.
	SyncReplicas(rs R) bool
	// Gating reports whether rs has partitions waiting for a handoff whose
	// deadline has not passed; Gated whether the key of ring hash h is in
	// one of them. A check of such a key waits for its handoff.
	Gating(rs R) bool
	Gated(rs R, h uint64) bool
	// AcceptReplica installs the states of a checked replica batch that
	// were not refused and returns the ring hashes it wants again, whole.
	AcceptReplica(b transport.TransferBatch, cb peerinput.Batch) (needFull []uint64)
	// NoteStrays is given the ring hashes of the states of a handoff just
	// installed (the node passes on those of keys it does not own).
	NoteStrays(hs []uint64)
	// HandoffDone records the "handoff complete" marker of the member named
	// from for the ring of digest, and the members it names in after
	// (transport.TransferBatch.After); leaving: the marker says that from is
	// leaving (transport.TransferBatch.Leaving).
	HandoffDone(from string, digest uint64, after []string, leaving bool)
}

// Config is what a Service needs of its node besides Node, built once when
// the node is made.
type Config[R any] struct {
	Node Node[R]
	// Owned is the node's store, Bans its ban states: where handoffs are
	// installed, and what forwarded checks are hashed and prefetched from.
	Owned *store.Store
	Bans  *store.Bans
	// Bounds are the node's bounds of peer input (Config.MaxPeriod,
	// MaxLimit, MaxPeerClockSkew, AcceptCallerTimestamps).
	Bounds peerinput.StateBounds
	// Secure: a transfer batch's From must be the member its sender's
	// certificate names (Sender).
	Secure bool
	// Clock returns the node's clock (Unix ns).
	Clock func() int64
	// Stopping is set once the node stops: checks are answered
	// CodeUnavailable. Leaving is set, under InstallMu's write lock, once
	// the node leaves: handoffs are refused (Transfer).
	Stopping, Leaving *atomic.Bool
	InstallMu         *sync.RWMutex
	// Inbound counts the Forward calls received (the node's drain on
	// Close waits until it stops moving).
	Inbound *atomic.Int64
	// Refused counts a refused piece of peer input ("timestamp", "sender");
	// RefusedState counts and logs a refused key state or ban state of the
	// member named from.
	Refused      func(what string)
	RefusedState func(from, key string, err error)
	// TimestampError is the error of a check carrying CreatedAt (Unix ns)
	// when Bounds.AcceptCallerTimestamps is off.
	TimestampError func(createdAt int64) error
	// Stopped is the error a refused handoff wraps (node.ErrStopped).
	Stopped error
}

// Service answers a node's peers (see the package comment). Its methods
// are safe for concurrent use.
type Service[R any] struct {
	cfg Config[R]
}

// New returns the Service of cfg; every field of cfg must be set.
func New[R any](cfg Config[R]) *Service[R] { return &Service[R]{cfg: cfg} }

// prefetched is how many checks of a batch Forward hashes and prefetches
// before deciding the first.
const prefetched = 16

// Forward decides a batch of checks this node owns, in order, and sets
// out[i] (len(out) == len(checks)) to the Result of checks[i]. Every check
// is judged first: a CreatedAt without AcceptCallerTimestamps is refused
// (counted as "timestamp"), a Limit above the maxima too (both
// CodeInvalidArgument), on every path. Checks sent as a key's backup
// (AsBackup) are answered concurrently by Node.AsBackup, which may ask the
// owner once, unless the node is stopping. A stopping node answers the
// others CodeUnavailable; keys it may not decide as owner (Node.Owns) get
// CodeNotOwner, and it never forwards them again. Under ReplicationSync the
// batch is answered once the states it changed reached their backups; an
// admission (Hits > 0, allowed) that did not is answered CodeUnavailable.
func (s *Service[R]) Forward(ctx context.Context, checks []transport.Check, out []transport.Result) {
	cfg := &s.cfg
	cfg.Inbound.Add(1)
	changed := false
	// Made for the first check sent here as a backup only: a WaitGroup that a
	// goroutine's closure captures lives on the heap, one allocation per
	// batch that almost every batch does not need.
	var backups *sync.WaitGroup
	// Hash the checks and start loading their slots before deciding the first
	// (store.prefetch): at a million keys each slot is a cache miss, and
	// misses started together overlap. Every snapshot hashes with the ring's
	// one hash function, so these hashes are the ones decided with.
	var hs [prefetched]uint64
	for i := range min(len(checks), len(hs)) {
		if c := &checks[i]; !c.AsBackup {
			hs[i] = cfg.Owned.Hash(c.Key)
			cfg.Owned.Prefetch(hs[i], c.Limit.Kind)
		}
	}
	for i := range checks {
		c := &checks[i]
		if c.CreatedAt != 0 && !cfg.Bounds.AcceptCallerTimestamps {
			// This node's config decides, whatever the sender accepted, on
			// every path: as owner, and as backup (deciding on its replica or
			// forwarding to the owner).
			cfg.Refused("timestamp")
			out[i] = transport.Result{Code: transport.CodeInvalidArgument, Message: cfg.TimestampError(c.CreatedAt).Error()}
			continue
		}
		if err := peerinput.Within(c.Limit, cfg.Bounds.MaxPeriod, cfg.Bounds.MaxLimit); err != nil {
			out[i] = transport.Result{Code: transport.CodeInvalidArgument, Message: err.Error()}
			continue
		}
		if c.AsBackup && !cfg.Stopping.Load() {
			if backups == nil {
				backups = new(sync.WaitGroup)
			}
			// checks[i] is read in the goroutine, not copied here: a copy
			// that the closure captures would be a heap allocation per
			// check. Nothing changes checks before Forward returns.
			backups.Go(func() { out[i] = cfg.Node.AsBackup(ctx, checks[i]) })
			continue
		}
		if cfg.Stopping.Load() {
			out[i] = transport.Result{Code: transport.CodeUnavailable, Message: "node is stopping"}
			continue
		}
		rs := cfg.Node.Ring()
		var h uint64
		if i < len(hs) {
			h = hs[i]
		} else {
			h = cfg.Node.Hash(rs, c.Key)
		}
		if !cfg.Node.Owns(rs, h) {
			out[i] = transport.Result{Code: transport.CodeNotOwner, Message: "not owner"}
			continue
		}
		out[i] = cfg.Node.Decide(ctx, rs, c, h)
		if c.LeaseHits > 0 {
			cfg.Node.GrantLease(ctx, rs, c, h, &out[i])
		}
		changed = changed || admitted(c, &out[i])
	}
	if backups != nil {
		backups.Wait()
	}
	if changed {
		if err := cfg.Node.AwaitReplicated(ctx); err != nil {
			// Not acknowledged by the backups: not reported as decided.
			for i := range out {
				if !checks[i].AsBackup && admitted(&checks[i], &out[i]) {
					out[i] = transport.Result{Code: transport.CodeUnavailable, Message: err.Error()}
				}
			}
		}
	}
}

// admitted reports whether r admitted c's hits (a peek or a cancel changes
// no state to replicate).
func admitted(c *transport.Check, r *transport.Result) bool {
	return c.Hits > 0 && r.Code == transport.CodeOK && r.Decision.Allowed
}

// ForwardMayWait implements transport.ForwardWaitHinter: it reports whether
// deciding checks now may wait on a handoff gate, that is whether the key of
// one of them is in a partition this node gained from a live previous owner
// whose handoff has not arrived yet and whose deadline has not passed
// (Node.Gating, Node.Gated). Under ReplicationSync every batch may wait (for
// its states to reach their backups), as may a batch with a check sent to
// this node as a key's backup (it may ask the owner) or one asking for a
// lease (a lease is replicated to the key's backup before it is answered).
func (s *Service[R]) ForwardMayWait(checks []transport.Check) bool {
	n := s.cfg.Node
	rs := n.Ring()
	if n.SyncReplicas(rs) {
		return true
	}
	for i := range checks {
		if checks[i].AsBackup || checks[i].LeaseHits > 0 {
			return true
		}
	}
	if !n.Gating(rs) {
		return false
	}
	for i := range checks {
		if n.Gated(rs, n.Hash(rs, checks[i].Key)) {
			return true
		}
	}
	return false
}

// Transfer installs handed-off states (InstallHandoff) or, for a replica
// batch, hands them to Node.AcceptReplica, after CheckTransfer judged
// them; its error is CheckTransfer's. A node that is leaving refuses a
// handoff with an error wrapping Config.Stopped: its own handoff has run or
// is running, so what it installed would end with it; the sender gives the
// states to the next owner. The leave is set under InstallMu's write lock
// and Transfer installs under its read lock, so a handoff installed before
// the leave is in the states the leave hands off.
func (s *Service[R]) Transfer(ctx context.Context, b transport.TransferBatch) error {
	cb, err := s.CheckTransfer(b)
	if err != nil {
		return err
	}
	if b.Replica {
		s.cfg.Node.AcceptReplica(b, cb)
		return nil
	}
	s.cfg.InstallMu.RLock()
	defer s.cfg.InstallMu.RUnlock()
	if s.cfg.Leaving.Load() {
		return fmt.Errorf("%w: leaving: hand these keys to the next owner", s.cfg.Stopped)
	}
	s.InstallHandoff(b, cb)
	return nil
}

// Replicate implements transport.ReplicaHandler: it judges a replication
// batch as Transfer does and hands it to Node.AcceptReplica, returning the
// ring hashes it wants again, whole.
func (s *Service[R]) Replicate(ctx context.Context, b transport.TransferBatch) ([]uint64, error) {
	cb, err := s.CheckTransfer(b)
	if err != nil {
		return nil, err
	}
	return s.cfg.Node.AcceptReplica(b, cb), nil
}

// CheckTransfer judges a transfer batch as untrusted peer input: in secure
// mode a batch whose From is not its Sender (the member the sender's
// certificate names) is refused whole, counted as "sender", with an error
// wrapping peerinput.ErrRefusedState; else it returns a verdict per state
// and ban state (peerinput.CheckBatch at Clock by Bounds), each refused one
// given to RefusedState.
func (s *Service[R]) CheckTransfer(b transport.TransferBatch) (peerinput.Batch, error) {
	if s.cfg.Secure && b.Sender != b.From {
		s.cfg.Refused("sender")
		return peerinput.Batch{}, fmt.Errorf("%w: from %q, but the sender's certificate names %q", peerinput.ErrRefusedState, b.From, b.Sender)
	}
	return peerinput.CheckBatch(b, s.cfg.Clock(), s.cfg.Bounds, func(key string, err error) {
		s.cfg.RefusedState(b.From, key, err)
	}), nil
}

// InstallHandoff installs the states and ban states of a judged handoff
// batch that were not refused (the more restrictive state wins where the
// key exists; a new key counts against the store's bound, with one scan for
// idle keys per batch), gives their ring hashes to Node.NoteStrays, and
// records the batch's "handoff complete" marker (Done).
func (s *Service[R]) InstallHandoff(b transport.TransferBatch, cb peerinput.Batch) {
	owned := s.cfg.Owned
	scanned := false // one scan for idle keys per batch at the MaxKeys bound
	hs := make([]uint64, 0, len(b.States))
	for i, ks := range b.States {
		if cb.RefusedAt(i) {
			continue
		}
		h := ks.KeyHash
		if ks.Key != "" {
			h = owned.Hash(ks.Key)
		}
		owned.InstallScan(h, ks.Limit, cb.States[i], ks.LastNow, ks.CallerClock, cb.Wall, true, &scanned)
		hs = append(hs, h)
	}
	s.cfg.Node.NoteStrays(hs)
	for i, ps := range b.Penalties {
		if !cb.PenRefusedAt(i) {
			s.cfg.Bans.Install(owned.Hash(ps.Key), store.BanState(ps))
		}
	}
	if b.Done {
		s.cfg.Node.HandoffDone(b.From, b.RingDigest, b.After, b.Leaving)
	}
}
