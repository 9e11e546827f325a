package transport

import (
	"context"

	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// Route says which path decided a check.
type Route uint8

const (
	// RouteUnknown is the zero value; it never appears in a decided Result.
	RouteUnknown Route = iota
	// RouteOwner: the node that received the check owns the key and decided it.
	RouteOwner
	// RouteForwarded: the check was forwarded to the owner, which decided it.
	RouteForwarded
	// RouteFallback: the owner was unreachable; the node's OwnerUnreachable policy
	// (fail-open, fail-closed or a local limiter) decided it.
	RouteFallback
	// RouteBackup: the owner was unreachable and the key's backup (the member
	// that holds its replicated state and will own it if the owner is gone)
	// decided it on that replica.
	RouteBackup
	// RouteCachedDenial: the node that received the check denied it from a
	// denial the key's owner gave it earlier that still holds (no forward).
	// Never sent between nodes.
	RouteCachedDenial
	// RouteLease: the node that received the check admitted it from a
	// capacity lease, hits the key's owner had taken from the key's state
	// and lent to it (no forward). Never sent between nodes.
	RouteLease
)

// Check is one rate-limit check as it travels between nodes and from callers.
type Check struct {
	// Key identifies the limited subject; 1..MaxKeyLen bytes.
	Key string
	// Limit is the policy; validated by algo on the owner.
	Limit algo.Limit
	// Hits to take; 0 peeks. 0..algo.MaxHits.
	Hits int64
	// CreatedAt is the caller's timestamp in Unix ns used instead of the owner's
	// clock, or 0 for "use the owner's clock". A node may refuse it.
	CreatedAt int64
	// Penalty is the key's ban rule, applied on the owner; zero = none.
	Penalty Penalty
	// AsBackup is set by a node that could not reach the key's owner and sends
	// the check to the key's backup instead (peer service only; the public
	// Limiter service never sets it). The backup decides it on its replica, or
	// answers CodeNotOwner when it is not the key's backup in its ring.
	AsBackup bool
	// MaxWait, when > 0, books the hits to act within MaxWait (ns) of the
	// owner's now instead of checking them (GCRA and TokenBucket; see
	// algo.State.Reserve); Result.Delay says how long to wait.
	MaxWait time.Duration
	// CancelAt, when not 0, gives back a booking of Hits hits under Key and
	// Limit whose Result.At it is, instead of checking (algo.State.Cancel).
	CancelAt int64
	// LeaseHits, when > 0, asks the owner for a capacity lease of up to
	// LeaseHits hits of Key under Limit besides deciding the check (peer
	// service only; the public Limiter service never sets it): the owner
	// answers the hits it took for the sender in Result.LeaseHits.
	LeaseHits int64
	// LeaseID and LeaseLeft, with LeaseHits, renew the lease that
	// Result.LeaseID named (0: none): the sender may still admit at most
	// LeaseLeft of its hits. The owner records the rest of that slice as
	// used and carries LeaseLeft into the new lease (Result.LeaseRenewed);
	// an id it no longer holds is ignored.
	LeaseID, LeaseLeft int64
}

// Result is the answer to one Check of a batch.
type Result struct {
	// Decision is valid when Code == CodeOK; for CodeResourceExhausted only
	// its RetryAfter is set (carried as Result.retry_after_ns).
	Decision algo.Decision
	// Route says which path decided; set by the node.
	Route Route
	// Code classifies a per-check failure; CodeOK otherwise.
	Code Code
	// Message explains a non-OK Code and names the offending field.
	Message string
	// Owner is the name of the node that decided, when it is known ("" otherwise).
	// Carried on the wire as Decision.owner; set by the node.
	Owner string
	// Banned is set when the key's penalty ban decided the check (denied,
	// RetryAfter = the ban's remaining time). Carried as Decision.banned.
	Banned bool
	// Delay is, for an allowed booking (Check.MaxWait > 0), how long after
	// the owner's now its hits act (ns); 0 otherwise. Carried as
	// Decision.delay_ns.
	Delay time.Duration
	// At is, for an allowed booking, the owner-clock instant its hits act
	// at (Unix ns, now + Delay); Check.CancelAt echoes it. Carried as
	// Decision.at_unix_ns.
	At int64
	// LeaseHits is the capacity lease granted with the decision (see
	// Check.LeaseHits): hits the owner took from the key's state for the
	// sender; 0 = none. Carried as Decision.lease_hits.
	LeaseHits int64
	// LeaseFor bounds the lease (ns after the sender sent the check): for
	// GCRA and token bucket the time until the key's state would be full
	// again without further hits, for a fixed window the time until the
	// window ends. Carried as Decision.lease_ns.
	LeaseFor time.Duration
	// LeaseID is the owner's id of the lease granted, which Check.LeaseID
	// names to renew it; 0 = none (or a lease not renewed by id: a fixed
	// window's). Carried as Decision.lease_id.
	LeaseID int64
	// LeaseRenewed: the lease Check.LeaseID named was renewed, its
	// Check.LeaseLeft hits belong to this lease now (on top of LeaseHits,
	// until LeaseFor), and the old id is no longer held. Carried as
	// Decision.lease_renewed.
	LeaseRenewed bool
}

// Code is the per-check outcome inside a batch.
type Code uint8

const (
	// CodeOK: Decision is valid.
	CodeOK Code = iota
	// CodeNotOwner: the receiver does not own the key in its ring; the sender
	// re-resolves the owner once and retries. The receiver never re-forwards.
	CodeNotOwner
	// CodeInvalidArgument: the check is malformed; Message names the field.
	CodeInvalidArgument
	// CodeUnavailable: the receiver is shutting down or cannot decide.
	CodeUnavailable
	// CodePermissionDenied: the caller may not make this check (a handler's
	// error wrapping ErrPermissionDenied); Message says what is forbidden.
	CodePermissionDenied
	// CodeResourceExhausted: the receiver's key table is full (a handler's
	// error wrapping ErrResourceExhausted); Message says whose and its bound,
	// Decision.RetryAfter when the receiver expects room (0: unknown).
	CodeResourceExhausted
)

// KeyState is the state of one key handed from its old owner to its new owner.
type KeyState struct {
	// Key is the limited key; empty when the sender keeps only the key's hash
	// (KeyHash), as node does.
	Key string
	// KeyHash is the key's ring hash (ring.Snapshot.Hash of Key), by which the
	// receiver places and stores the state. 0 = not sent: the receiver hashes
	// Key. At least one of Key and KeyHash must be set.
	KeyHash uint64
	// Limit is the last Limit the key was checked with.
	Limit algo.Limit
	// State is algo.State in its binary form (algo.State.MarshalBinary).
	State []byte
	// LastNow is the time (Unix ns) of the key's last check on the previous owner:
	// the caller's timestamp (CallerClock) or that owner's clock. The new owner
	// merges and ages the state from it. 0 = unknown (the receiver's clock).
	LastNow int64
	// CallerClock is set when LastNow was a caller's timestamp.
	CallerClock bool
	// LogDelta (replication only) marks a SlidingWindowLog State holding only
	// the entries appended since the log's tail was (LogAfter, LogAfterCount):
	// its newest entry (Unix ns) and the number of entries at it, as last
	// sent (algo.State.LogSince). The receiver appends them to its replica
	// (algo.State.AppendLog) or, if it cannot, asks for the whole state.
	LogDelta      bool
	LogAfter      int64
	LogAfterCount int64
}

// TransferBatch is (part of) a handoff from a previous owner to a new owner.
type TransferBatch struct {
	// From is the member name of the previous owner.
	From string
	// RingDigest identifies the previous owner's partition table
	// (ring.Snapshot.Digest) that the handoff is for.
	RingDigest uint64
	// States are the handed-off key states; may be empty.
	States []KeyState
	// Done marks the end of the handoff for RingDigest: the receiver stops holding
	// checks of the partitions it gained from From.
	Done bool
	// Penalties are the ban states of the handed-off keys; may be empty.
	Penalties []PenaltyState
	// Replica marks a replication batch: an owner sends the changed states of
	// its keys to their backup, which keeps them as replicas (RingDigest and
	// Done are unused). Not a handoff.
	Replica bool
	// After, with Done, names the members whose own Done for RingDigest the
	// receiver must also have before it stops holding the partitions it
	// gained from From: members that From's earlier ring changes passed some
	// of those partitions to, and that may hold their states still (members
	// joining at once make each member's rings differ). At most MaxAfter
	// names, each a valid member name; sent on the request with Done.
	After []string
	// Leaving, with Done, says that From is leaving the cluster: RingDigest
	// is a ring without it. A receiver that still has From in its ring
	// probes it at once instead of waiting for gossip to bring the leave
	// (the probe, not this flag, decides: a member that is leaving fails
	// it). Older members ignore it.
	Leaving bool
	// Sender is set by the server, never sent: the member named by the
	// sender's verified TLS certificate, "" over plaintext. A receiver in
	// secure mode refuses a batch whose From is not Sender.
	Sender string
}

// MaxAfter is the most names a TransferBatch's After may hold (1024); a
// Transfer request with more is refused (codes.InvalidArgument).
const MaxAfter = 1024

// PeerHandler is the owner side of the internal Peer service, implemented by node.
// Its methods may be called concurrently.
type PeerHandler interface {
	// Forward decides checks this node owns and sets out[i] (len(out) ==
	// len(checks), every element zero on entry) to the Result of checks[i]
	// (CodeNotOwner for keys it does not own). now for checks without
	// CreatedAt is read by the handler. ctx, checks and out are the server's
	// to reuse once Forward returns: keep none of them (a goroutine that
	// outlives the call may keep a context derived from ctx). The keys of one
	// batch share one buffer that the server reuses for a later batch once
	// Forward returns: strings.Clone a key kept beyond the call, or passed on
	// to something that may use it later (a forward to another peer that may
	// outlive its caller's wait). Keys of checks with a Penalty are copies of
	// their own, which the handler may keep.
	Forward(ctx context.Context, checks []Check, out []Result)
	// Transfer installs key states handed off by a previous owner, keeping the more
	// restrictive state where the key already exists. A handoff arrives as one or
	// more batches; only the last has Done set (and may hold no states).
	// b.States and the State bytes of its items are the server's to reuse once
	// Transfer returns: keep neither (copy what you keep). The keys of the
	// states may share one allocation, never reused; b.Penalties, their keys
	// and denials are the handler's to keep.
	Transfer(ctx context.Context, b TransferBatch) error
}

// ReplicaHandler is an optional interface of a PeerHandler: the server calls
// Replicate instead of Transfer for a replication batch (TransferBatch.Replica)
// and returns its needFull (the ring hashes of the keys whose state or ban
// state it did not apply: a LogDelta state it could not append, or one it
// cannot place in its ring) to the sender, which sends them again, whole. b
// is the server's to reuse once Replicate returns, as in PeerHandler.Transfer.
type ReplicaHandler interface {
	Replicate(ctx context.Context, b TransferBatch) (needFull []uint64, err error)
}

// ForwardWaitHinter is an optional interface of a PeerHandler. The server
// decides a ForwardStream batch on the stream's receive goroutine when
// ForwardMayWait reports false for its checks, which saves a goroutine and a
// hand-off between goroutines per batch; otherwise, or when the handler does not
// implement it, the batch is decided in a goroutine of its own, so that a batch
// that waits (node holds checks of keys whose handoff is still on its way) does
// not hold up the batches behind it on the stream. A false answer that turns out
// wrong (the handler waits after all, say the ring changed in between) only
// delays the stream's later batches by that wait. ForwardMayWait is called for
// every batch and must be cheap.
type ForwardWaitHinter interface {
	ForwardMayWait(checks []Check) bool
}

// LimiterHandler is the public Limiter service (node.LimiterHandler adapts a
// node to it): it routes a check to its owner in the cluster and returns the
// owner's (or the fallback's) Result. Errors: invalid input (an
// *algo.InputError, whose Message and fields the server sends), an error
// wrapping ErrUnavailable when the cluster cannot decide, or a context error.
type LimiterHandler interface {
	Check(ctx context.Context, c Check) (Result, error)
}
