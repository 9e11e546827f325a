// Package node is the ringlimit library: one Node per service instance turns a
// fleet of instances into one atomic rate limiter with no shared storage.
//
// A check enters any node through Allow, AllowN or Check. The node looks up the
// key's owner in its consistent-hash ring (package ring, built from the gossip
// member list of hashicorp/memberlist). If it owns the key it applies the
// algorithm (package algo) under the lock of the key's shard, with its own clock
// (or the caller's timestamp when allowed), so checks of one key are serialized and
// every decision is atomic. Otherwise it forwards the check over gRPC (package
// transport, micro-batched per peer) to the owner; a receiver that disagrees
// answers "not owner" and never re-forwards, and the sender re-resolves. When the
// owner cannot be reached, the OwnerUnreachable policy decides and the Decision
// says so (RouteFallback). When the ring changes, the previous owner of a key hands
// its state to the new owner, which holds checks of those keys until the state
// arrives (bounded by HandoffTimeout), so limits do not reset when members come and
// go; Close leaves the cluster and hands everything off first.
package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/internal/breaker"
	"github.com/ringlimit/ringlimit/node/internal/denycache"
	"github.com/ringlimit/ringlimit/node/internal/handoff"
	"github.com/ringlimit/ringlimit/node/internal/keyops"
	"github.com/ringlimit/ringlimit/node/internal/lease"
	"github.com/ringlimit/ringlimit/node/internal/membership"
	"github.com/ringlimit/ringlimit/node/internal/peergate"
	"github.com/ringlimit/ringlimit/node/internal/peerinput"
	"github.com/ringlimit/ringlimit/node/internal/peersvc"
	"github.com/ringlimit/ringlimit/node/internal/persist"
	"github.com/ringlimit/ringlimit/node/internal/replication"
	"github.com/ringlimit/ringlimit/node/internal/route"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/node/internal/topdenied"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
	"github.com/ringlimit/ringlimit/transport/rotate"
)

// Named errors of the node package. Being over the limit is a Decision, never an
// error.
var (
	// ErrStopped is returned by every check after Close or Abort began.
	ErrStopped = errors.New("node: stopped")
	// ErrTooManyKeys is matched by the *KeyTableFullError of a check that
	// would create a new key on a node that holds Config.MaxKeys keys, none of
	// them idle (Classify: ClassFull).
	ErrTooManyKeys = store.ErrTooManyKeys
	// ErrCallerTimestamp is matched (errors.Is) by the *InputError (field
	// created_at) of a check carrying CreatedAt on a node with
	// AcceptCallerTimestamps off.
	ErrCallerTimestamp = errors.New("node: caller timestamp refused")
	// ErrDuplicateName is returned by New, wrapped with the conflicting member's
	// address, when another live member already uses Config.Name.
	ErrDuplicateName = errors.New("node: member name already in use")
	// ErrRefusedState is returned (wrapping transport.ErrInvalidCheck, so the
	// sender sees InvalidArgument) by Transfer for a batch whose From is not
	// the member its sender's certificate names. A key state refused alone
	// (see Transfer) does not fail its batch: it is counted and logged with
	// an error wrapping ErrRefusedState.
	ErrRefusedState = peerinput.ErrRefusedState
	// ErrLimitAboveMax is matched (errors.Is) by the *InputError (field
	// period, limit or burst) of a check whose Limit is above this node's
	// Config.MaxPeriod or Config.MaxLimit; a peer's key state under such a
	// Limit is refused with it too.
	ErrLimitAboveMax = peerinput.ErrLimitAboveMax

	errNotOwner = store.ErrNotOwner
)

// Admission states of a Member.
const (
	// StateAlive: the member passed the admission handshake (or is this node)
	// and is in this node's ring.
	StateAlive = "alive"
	// StateJoining: gossip knows the member; the handshake has not finished.
	// It owns no key in this node's ring.
	StateJoining = "joining"
	// StateRefused: the handshake failed (Reason says why); it owns no key in
	// this node's ring and is tried again every Config.AdmissionRetry.
	StateRefused = "refused"
)

// Member is one live member of the cluster as this node sees it.
type Member struct {
	// Name is the member name (Config.Name).
	Name string
	// Addr is its peer address (Config.PeerPort), "host:port".
	Addr string
	// GossipAddr is its memberlist address, "host:port".
	GossipAddr string
	// ID is its instance id, new at every start.
	ID string
	// Self is true for the node that answered.
	Self bool
	// State is StateAlive, StateJoining or StateRefused.
	State string
	// Reason says why a member is refused, or why an alive member's gossip is
	// doubted (gossip says it left or moved, but it answers its probes with
	// its certificate at this address); "" otherwise.
	Reason string
}

// KeyTableFullError is the error of a check that would create a new key in a
// full key table, matching ErrTooManyKeys; Classify sorts it as ClassFull.
// Who says whose table: "this node" (Config.MaxKeys), "node-2 (the key's
// owner)" for a forwarded check, or a daemon credential's own max_keys. Its
// Message is "key table full: <Who> <Text>" and, when RetryAfter is known,
// "; the earliest key frees in <RetryAfter>" (whole seconds, at least 1 s): the
// time until the earliest key held becomes idle if no check comes for it, as
// the node's last scan of its keys found it (the scan runs at most once a
// second, or when that key frees, while the table is full). Every key frees
// within its limit's algo.Limit.Hold of its last check: at most MaxPeriod
// (a longer GCRA or TokenBucket burst is refused), twice that for
// SlidingWindowCounter, about 17/16 of it for BucketedSlidingWindow; so a
// full table does not stay full for keys nobody checks.
type KeyTableFullError = store.FullError

// Stats is a point-in-time view of a node for monitoring.
type Stats struct {
	// Keys is the number of key states this node holds, as owner or as backup
	// (replicas, see Config.Replication): what MaxKeys bounds.
	Keys int
	// FallbackKeys is the number of key states in the local fallback limiter.
	FallbackKeys int
	// Members is the number of members in this node's ring.
	Members int
	// Refused is the number of gossip members that failed the admission
	// handshake and stay out of the ring.
	Refused int
	// Insecure is Config.Insecure: no TLS between peers.
	Insecure bool
	// Rebuilds is the number of times since New that this node's partition
	// table changed: one per membership change, or per burst of changes
	// coalesced by Config.MembershipDebounce (a member's new address or
	// instance id alone changes no table and is not counted).
	Rebuilds uint64
	// RebuildTime is the time those rebuilds spent computing the ring and
	// its backups, in all (not the handoff that follows); one goroutine, so
	// about the CPU it took.
	RebuildTime time.Duration
	// RefusedStates is the number of key states and ban states peers handed
	// off or replicated that this node refused since New (each one alone: the
	// rest of its batch is kept), see Transfer.
	RefusedStates uint64
	// RefusedKeys is the number of new keys refused since New because the
	// key table was full (MaxKeys): checks (KeyTableFullError) and peers'
	// handed-off or replicated states. Metrics.Eviction("refused") counts
	// the same.
	RefusedKeys uint64
	// CachedDenials is the number of checks this node denied from a cached
	// denial, without a forward (RouteCachedDenial), since New.
	CachedDenials uint64
	// LeasedChecks is the number of checks this node admitted from
	// capacity leases, without a forward (RouteLease), since New;
	// LeasesGranted the leases it was granted.
	LeasedChecks, LeasesGranted uint64
	// TLSNotAfter is the earliest expiry of this member's certificate and of
	// the CAs of its bundle (zero when insecure).
	TLSNotAfter time.Time
	// TLSReloads and TLSReloadFailures count the reloads of the TLS*File
	// material that changed it, and those refused (the previous material
	// stayed), since New.
	TLSReloads, TLSReloadFailures uint64
	// TLSConnsClosed counts the accepted peer connections closed because the
	// material they were authenticated with is no longer trusted.
	TLSConnsClosed uint64
	// SnapshotWrites and SnapshotFailures count the state snapshots written
	// (Config.StateDir) and the writes or restores that failed (a refused
	// snapshot file is one), since New; RestoredStates is the number of saved
	// states New accepted from the snapshot (each judged as a peer's handoff;
	// those refused are in RefusedStates). All 0 without StateDir.
	SnapshotWrites, SnapshotFailures, RestoredStates uint64
}

// Node is one member of a ringlimit cluster. Create it with New; its methods are
// safe for concurrent use.
type Node struct {
	cfg Config
	log *slog.Logger
	// clockFn is Config.Clock; nil: the node's own clock (see clock).
	clockFn func() int64
	// start and base are the node's own clock: base (Unix ns) at start.
	start time.Time
	base  int64
	id    string

	ring     *ring.Ring
	rs       atomic.Pointer[ringState]
	owned    *store.Store
	fallback *store.Store
	peers    peerClient

	// denied caches owners' denials (denials.go); nil when off.
	denied *denycache.Cache
	// leases holds the capacity this node was lent (lease.go); nil when off.
	leases *lease.Table
	// holds are the slices this node lent of its keys (lease.go); nil when
	// leases are off.
	holds *lease.Holds
	// top counts the denials of this node's callers by key
	// (topdenied.go); nil when off.
	top *topdenied.Tracker

	// bans holds the ban states of keys checked with a penalty (see penalty.go).
	bans *store.Bans

	persist *persist.File // the state snapshot (persist.go); nil without StateDir
	// strays lists for strayLoop the ring hashes of handed-off states of
	// keys this node does not own (handoff.go).
	strays *handoff.Strays
	// repl sends changed states to backups and installs replicas.
	repl     *replication.Replicator
	breakers *breaker.Set // per-peer circuit breaker
	// router takes checks whose owner could not decide them to the key's
	// backup or the OwnerUnreachable policy, and answers checks sent here as
	// a key's backup (route.go).
	router *route.Router
	// psvc answers this node's peers (peer.go); kops runs the key
	// operations (keyops.go).
	psvc *peersvc.Service[*ringState]
	kops *keyops.Ops[*ringState]

	ml       *memberlist.Memberlist
	secure   bool
	smetrics SecurityMetrics // nil: Config.Metrics does not implement it
	// tlsSrc is this member's TLS material (nil when insecure); tlsFiles the
	// same when it comes from the TLS*File fields; tracker the accepted peer
	// connections. See tlsrotate.go.
	tlsSrc   rotate.Source
	tlsFiles *rotate.Files
	tracker  *rotate.Tracker
	// refusedStates counts the peers' states refused (Stats.RefusedStates);
	// refusedLog holds back repeated log lines.
	refusedStates atomic.Uint64
	refusedLog    logEvery
	// refusedKeys counts new keys refused at MaxKeys (Stats.RefusedKeys),
	// fullLog holds back its WARN to one a second.
	refusedKeys atomic.Uint64
	fullLog     logEvery
	// deny is the peer deny list (peergate.go).
	deny atomic.Pointer[peergate.DenyList]
	// mem holds the gossip members and their admission (admission.go).
	mem        *membership.Table
	grpcSrv    *transport.Server
	grpcLis    net.Listener
	grpcAddr   string
	rebuildMu  sync.Mutex         // one rebuild at a time (membership loop, Close)
	rebuilds   atomic.Uint64      // Stats.Rebuilds
	rebuildNs  atomic.Int64       // Stats.RebuildTime
	marks      handoff.Marks      // handoff gates and the markers that came early (handoff.go)
	hellos     handoff.Hellos     // the members' first Hello to this instance (handoff.go)
	successors handoff.Successors // whom each partition was passed to lately (handoff.go)
	inbound    atomic.Int64       // Forward RPCs received, for the drain on Close
	joinedPeer atomic.Bool        // has ever seen another member
	ready      atomic.Bool

	leaving atomic.Bool
	// installMu orders installing a handoff (read) before this node's
	// leave (write), see Transfer.
	installMu sync.RWMutex
	stopping  atomic.Bool
	stop      chan struct{}
	wg        sync.WaitGroup
	closeMu   sync.Mutex
	closed    bool
	closeErr  error
}

// clock returns the owner clock in Unix ns: Config.Clock when set, else wall
// time at New plus the monotonic time since. That is one clock read per check
// instead of time.Now's two (36 ns each on this project's VMs, 65 for
// time.Now), and a clock that never steps backwards when NTP steps the wall
// clock.
func (n *Node) clock() int64 {
	if n.clockFn != nil {
		return n.clockFn()
	}
	return n.base + int64(time.Since(n.start))
}

// Insecure reports whether the node runs without TLS between peers
// (Config.Insecure), for the daemon's /readyz and metrics.
func (n *Node) Insecure() bool { return !n.secure }

// Name returns the member name of this node.
func (n *Node) Name() string { return n.cfg.Name }

// PeerAddr returns the advertised address ("host:port") of this node's peer
// listener (Config.PeerPort), which serves only the internal Peer service.
func (n *Node) PeerAddr() string { return n.grpcAddr }

// GRPCAddr returns PeerAddr.
//
// Deprecated: the node serves only the Peer service; use PeerAddr. The public
// Limiter service is served by the daemon (transport.NewLimiterServer).
func (n *Node) GRPCAddr() string { return n.grpcAddr }

// GossipAddr returns the advertised memberlist address ("host:port") to give as a
// seed in other nodes' Config.Join.
func (n *Node) GossipAddr() string {
	ln := n.ml.LocalNode()
	return net.JoinHostPort(ln.Addr.String(), strconv.Itoa(int(ln.Port)))
}

// Ready reports whether the node has built its ring, has joined at least one
// other member since it started (when it was given seeds), and holds the state
// of the keys it owns: every member it gained partitions from (for a node
// restarted under its name, the backups that decided its keys meanwhile) has
// accepted it and finished handing them off, or HandoffTimeout has passed.
// The wait for every member's marker after another member left (see
// docs/architecture.md, Handoff) does not count.
func (n *Node) Ready() bool {
	if !n.ready.Load() || n.stopping.Load() || len(n.cfg.Join) > 0 && !n.joinedPeer.Load() {
		return false
	}
	rs := n.rs.Load()
	if len(rs.Pending) > 0 && time.Now().Before(rs.Deadline) {
		for name, g := range rs.Pending {
			if name == handoff.Everyone {
				// States of a member that left, still passed on among the
				// others: a few partitions for a moment, on every member at
				// each leave of a rolling restart; readiness is about this
				// node's own handoffs.
				continue
			}
			select {
			case <-g:
			default:
				return false
			}
		}
	}
	return true
}

// OwnedKeys counts the key states this node holds as their owner in its
// current ring (Stats.Keys less the replicas). It scans every stored state
// under its shard lock: for monitoring and tests, not for a hot path.
func (n *Node) OwnedKeys() int {
	rs := n.rs.Load()
	return n.owned.Count(func(h uint64) bool {
		m, ok := rs.Snap.OwnerOfHash(h)
		return ok && m.Name == n.cfg.Name
	})
}

// Stats returns the node's key and member counts.
func (n *Node) Stats() Stats {
	s := Stats{Keys: n.owned.Len(), FallbackKeys: n.fallback.Len(), Members: n.rs.Load().Snap.Len(), Refused: n.mem.RefusedCount(), Insecure: !n.secure,
		Rebuilds: n.rebuilds.Load(), RebuildTime: time.Duration(n.rebuildNs.Load()), RefusedStates: n.refusedStates.Load(), RefusedKeys: n.refusedKeys.Load(), CachedDenials: n.cachedDenials()}
	s.LeasedChecks, s.LeasesGranted = n.leaseStats()
	n.tlsStats(&s)
	n.persistStats(&s)
	return s
}

// RingDigest returns a digest of this node's partition table: nodes that agree on
// the owner of every partition return the same value.
func (n *Node) RingDigest() uint64 { return n.rs.Load().Snap.Digest() }

// Owner returns the member that owns key in this node's current ring (false when
// the ring is empty, which happens only while the node is stopping).
func (n *Node) Owner(key string) (Member, bool) {
	m, ok := n.rs.Load().Snap.Owner(key)
	if !ok {
		return Member{}, false
	}
	return Member{Name: m.Name, Addr: m.Addr, ID: m.ID, Self: m.Name == n.cfg.Name}, true
}

// Allow checks one hit of key against l. See AllowN.
func (n *Node) Allow(ctx context.Context, key string, l algo.Limit) (Decision, error) {
	return n.AllowN(ctx, key, l, 1)
}

// AllowN checks hits hits of key against l on the key's owner and returns its
// Decision (hits == 0 peeks). Errors: an *InputError (ErrInvalid, and
// algo.ErrInvalidLimit for limit and hits errors) for bad input (empty or too
// long key, hits < 0 or above algo.MaxHits, invalid limit; ErrLimitAboveMax
// for a limit above Config.MaxPeriod or Config.MaxLimit), ErrTooManyKeys,
// ErrStopped, or ctx's error; Classify sorts them.
// An unreachable owner is not an error: the Decision reports RouteFallback.
func (n *Node) AllowN(ctx context.Context, key string, l algo.Limit, hits int64) (d Decision, err error) {
	var c Check // filled field by field: no temporary to copy
	c.Key, c.Limit, c.Hits = key, l, hits
	err = n.decideInto(ctx, &c, &d)
	return
}

// Check decides c on its key's owner, as AllowN and AllowPenalized do, with
// c.CreatedAt (Unix ns) honoured only with Config.AcceptCallerTimestamps
// (otherwise a non-zero value is an *InputError matching ErrCallerTimestamp).
// It is the entry point of the front doors (the daemon serves it as gRPC
// through LimiterHandler). A c.MaxWait > 0 waits for the hits' slot (see
// Check.MaxWait): the Decision then comes after the sleep, with its Delay.
// Errors as AllowN; Classify sorts them.
func (n *Node) Check(ctx context.Context, c Check) (d Decision, err error) {
	if c.CreatedAt != 0 && !n.cfg.AcceptCallerTimestamps {
		return Decision{}, callerTimestampError(c.CreatedAt)
	}
	if c.MaxWait != 0 {
		if err := c.Validate(n.cfg.MaxKeyLen); err != nil {
			return Decision{}, err
		}
		return n.waitCheck(ctx, c, c.MaxWait)
	}
	err = n.decideInto(ctx, &c, &d)
	return
}

func (n *Node) observe(k algo.Kind, r Route, allowed bool) {
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.Check(k, r, allowed)
	}
}

// onEvict reports a key dropped or refused by a store. A refused key ("the
// key table is full") is also counted and logged at WARN at most once a
// second: a full table must not pass unnoticed, nor fill the log.
func (n *Node) onEvict(reason string) {
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.Eviction(reason)
	}
	if reason != "refused" {
		return
	}
	total := n.refusedKeys.Add(1)
	if ok, held := n.fullLog.allow(); ok {
		n.log.Warn("key table full: new keys are refused until a key frees (idle keys are dropped first; a key frees within MaxPeriod of its last check)",
			"max_keys", n.cfg.MaxKeys, "refused_total", total, "not_logged", held)
	}
}
