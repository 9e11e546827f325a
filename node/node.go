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
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/internal/breaker"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
	"github.com/ringlimit/ringlimit/transport/pki"
)

// Named errors of the node package. Being over the limit is a Decision, never an
// error.
var (
	// ErrStopped is returned by every check after Close or Abort began.
	ErrStopped = errors.New("node: stopped")
	// ErrTooManyKeys is returned for a check that would create a new key on a node
	// that holds Config.MaxKeys keys, none of them idle.
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
	ErrRefusedState = fmt.Errorf("%w: refused key state", transport.ErrInvalidCheck)
	// ErrLimitAboveMax is matched (errors.Is) by the *InputError (field
	// period, limit or burst) of a check whose Limit is above this node's
	// Config.MaxPeriod or Config.MaxLimit; a peer's key state under such a
	// Limit is refused with it too.
	ErrLimitAboveMax = errors.New("node: limit above this node's maxima")

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
	// Reason says why a member is refused ("" otherwise).
	Reason string
}

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

	// bans holds the ban states of keys checked with a penalty (see penalty.go).
	bans *penalties

	repl     *replicator  // sends changed states to backups
	breakers *breaker.Set // per-peer circuit breaker

	ml       *memberlist.Memberlist
	secure   bool
	smetrics SecurityMetrics // nil: Config.Metrics does not implement it
	// refusedStates counts the peers' states refused (Stats.RefusedStates);
	// refusedLog and replFailLog hold back repeated log lines.
	refusedStates atomic.Uint64
	refusedLog    logEvery
	replFailLog   logEvery
	// deny is the peer deny list (peergate.go); certsSeen (member -> serial
	// of the certificate it presented last) and departed (member -> when it
	// left the gossip) are under membersMu.
	deny         atomic.Pointer[denyList]
	certsSeen    map[string]string
	departed     map[string]time.Time
	admit        map[string]*admission // under membersMu: handshake state per member
	conflictMu   sync.Mutex
	conflict     string // a live member that uses our name, seen by gossip
	conflictPeer string // its peer address
	grpcSrv      *transport.Server
	grpcLis      net.Listener
	grpcAddr     string
	memberSig    chan struct{}
	membersMu    sync.Mutex
	members      map[string]Member // live gossip members, copied in memberlist's callbacks
	rebuildMu    sync.Mutex        // one rebuild at a time (membership loop, Close)
	rebuilds     atomic.Uint64     // Stats.Rebuilds
	rebuildNs    atomic.Int64      // Stats.RebuildTime
	marksMu      sync.Mutex
	marks        map[string]handoffMark // handoff-complete markers that came early: from -> ring
	inbound      atomic.Int64           // Forward RPCs received, for the drain on Close
	joinedPeer   atomic.Bool            // has ever seen another member
	ready        atomic.Bool

	leaving  atomic.Bool
	stopping atomic.Bool
	stop     chan struct{}
	wg       sync.WaitGroup
	closeMu  sync.Mutex
	closed   bool
	closeErr error
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

// peerClient is what the node needs from the transport: forwarding to an owner
// and handing states to a new owner. transport.Pool implements it. It speaks
// transport's wire types: the peer glue converts (see wire.go).
type peerClient interface {
	Forward(ctx context.Context, addr string, c transport.Check) (transport.Result, error)
	Handoff(ctx context.Context, addr string, b transport.TransferBatch) error
	Replicate(ctx context.Context, addr string, b transport.TransferBatch) ([]uint64, error)
	Hello(ctx context.Context, addr string, h transport.Hello) (transport.Hello, string, error)
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

// New validates cfg, starts the gRPC services and gossip, joins the seeds in
// cfg.Join and builds the first ring. It returns an error wrapping
// ErrInvalidConfig for a bad Config, or the error of a listener that could not
// start; it never panics. The caller must Close the Node.
func New(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r, err := ring.New(cfg.Ring)
	if err != nil {
		return nil, fmt.Errorf("%w: Ring: %w", ErrInvalidConfig, err)
	}
	n := &Node{
		cfg:       cfg,
		log:       cfg.Logger,
		clockFn:   cfg.Clock,
		id:        newInstanceID(),
		ring:      r,
		bans:      &penalties{track: cfg.Replication != ReplicationOff},
		memberSig: make(chan struct{}, 1),
		members:   make(map[string]Member),
		admit:     make(map[string]*admission),
		certsSeen: make(map[string]string),
		departed:  make(map[string]time.Time),
		secure:    !cfg.Insecure,
		marks:     make(map[string]handoffMark),
		stop:      make(chan struct{}),
	}
	n.owned = store.New(cfg.MaxKeys, r.Snapshot().Hash, n.onEvict)
	n.owned.Track = cfg.Replication != ReplicationOff
	n.repl = newReplicator()
	n.breakers = breaker.NewSet(cfg.BreakerCooldown)
	n.fallback = store.New(cfg.MaxKeys, r.Snapshot().Hash, n.onEvict)
	if n.log == nil {
		n.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	n.log = n.log.With("node", cfg.Name)
	n.start = time.Now()
	n.base = n.start.UnixNano()
	rs0 := &ringState{snap: r.Snapshot(), next: make(chan struct{})}
	rs0.setMine(cfg.Name)
	n.rs.Store(rs0)

	if sm, ok := cfg.Metrics.(SecurityMetrics); ok {
		n.smetrics = sm
	}
	var serverTLS, clientTLS *tls.Config
	var gate transport.PeerGate
	if n.secure {
		serverTLS, clientTLS, err = peerTLS(cfg)
		if err != nil {
			return nil, err
		}
		dl, err := n.loadDenyList()
		if err != nil {
			return nil, err
		}
		n.deny.Store(dl)
		n.gateTLS(serverTLS, clientTLS)
		gate = n.peerAllowed
	} else {
		n.log.Warn("running INSECURE: the peer listener has no TLS and no authentication; anyone who reaches it can forward checks and hand off key states",
			"gossip_encrypted", len(cfg.SecretKey) > 0)
	}
	if cfg.peerNet == nil {
		pool, err := transport.NewPool(transport.ClientConfig{
			TLS:            clientTLS,
			ExpectMember:   n.memberAt,
			BatchMaxItems:  cfg.BatchMaxItems,
			BatchMaxWait:   cfg.BatchMaxWait,
			ForwardTimeout: cfg.ForwardTimeout,
			OnBatch:        n.onBatch,
		})
		if err != nil {
			return nil, fmt.Errorf("node: peer pool: %w", err)
		}
		n.peers = pool
	}
	closePeers := func() {
		if n.peers != nil {
			n.peers.Close()
		}
	}

	n.grpcLis, err = net.Listen("tcp", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.PeerPort)))
	if err != nil {
		closePeers()
		return nil, fmt.Errorf("node: peer listen: %w", err)
	}
	host, err := advertiseHost(cfg)
	if err != nil {
		n.grpcLis.Close()
		closePeers()
		return nil, err
	}
	n.grpcAddr = net.JoinHostPort(host, strconv.Itoa(n.grpcLis.Addr().(*net.TCPAddr).Port))
	if cfg.peerNet != nil {
		n.peers = cfg.peerNet.attach(n)
	}
	n.grpcSrv = transport.NewPeerServer(transport.ServerConfig{TLS: serverTLS, MaxKeyLen: cfg.MaxKeyLen, PeerGate: gate}, peerService{n})
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.grpcSrv.Serve(n.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("grpc serve", "err", err)
		}
	}()

	if err := n.startGossip(host); err != nil {
		n.grpcSrv.Stop()
		closePeers()
		n.wg.Wait()
		return nil, err
	}
	n.admitNow()
	if other := n.nameConflict(); other != "" {
		_ = n.ml.Shutdown()
		n.grpcSrv.Stop()
		closePeers()
		n.wg.Wait()
		return nil, fmt.Errorf("%w: %q is a live member at %s; pick another Config.Name (or stop that member first)", ErrDuplicateName, cfg.Name, other)
	}
	n.rebuild()
	n.ready.Store(true)
	n.wg.Add(4)
	go n.membershipLoop()
	go n.rejoinLoop()
	go n.idleLoop()
	go n.replicationLoop()
	if n.secure && cfg.PeerDenyFile != "" {
		if err := n.watchDenyList(); err != nil {
			_ = n.Abort()
			return nil, err
		}
	}
	n.log.Info("node started", "peer", n.grpcAddr, "gossip", n.GossipAddr(), "members", n.rs.Load().snap.Len(), "secure", n.secure)
	return n, nil
}

// peerTLS builds the two halves of mutual TLS from cfg's material and checks
// that the certificate names cfg.Name.
func peerTLS(cfg Config) (server, client *tls.Config, err error) {
	caPEM, certPEM, keyPEM, err := cfg.tlsMaterial(os.ReadFile)
	if err != nil {
		return nil, nil, err
	}
	server, client, err = pki.PeerTLS(caPEM, certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: TLS: %w", ErrInvalidConfig, err)
	}
	leaf := server.Certificates[0].Leaf
	if name, _ := pki.MemberName(leaf); name != cfg.Name && !cfg.anyCertName {
		return nil, nil, fmt.Errorf("%w: TLS certificate names member %q, but Name is %q", ErrInvalidConfig, name, cfg.Name)
	}
	return server, client, nil
}

// Insecure reports whether the node runs without TLS between peers
// (Config.Insecure), for the daemon's /readyz and metrics.
func (n *Node) Insecure() bool { return !n.secure }

func newInstanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

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
func (n *Node) Ready() bool {
	if !n.ready.Load() || n.stopping.Load() || len(n.cfg.Join) > 0 && !n.joinedPeer.Load() {
		return false
	}
	rs := n.rs.Load()
	if len(rs.pending) > 0 && time.Now().Before(rs.deadline) {
		for _, g := range rs.pending {
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
		m, ok := rs.snap.OwnerOfHash(h)
		return ok && m.Name == n.cfg.Name
	})
}

// Stats returns the node's key and member counts.
func (n *Node) Stats() Stats {
	return Stats{Keys: n.owned.Len(), FallbackKeys: n.fallback.Len(), Members: n.rs.Load().snap.Len(), Refused: n.refusedCount(), Insecure: !n.secure,
		Rebuilds: n.rebuilds.Load(), RebuildTime: time.Duration(n.rebuildNs.Load()), RefusedStates: n.refusedStates.Load()}
}

// RingDigest returns a digest of this node's partition table: nodes that agree on
// the owner of every partition return the same value.
func (n *Node) RingDigest() uint64 { return n.rs.Load().snap.Digest() }

// Owner returns the member that owns key in this node's current ring (false when
// the ring is empty, which happens only while the node is stopping).
func (n *Node) Owner(key string) (Member, bool) {
	m, ok := n.rs.Load().snap.Owner(key)
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

// decide routes one check: decide it here if this node owns the key, else forward
// it to the owner, re-resolving after a "not owner" answer until the ring settles
// or ForwardTimeout passes, else fall back.
func (n *Node) decide(ctx context.Context, c *Check) (Decision, error) {
	var d Decision
	err := n.decideInto(ctx, c, &d)
	return d, err
}

// decideInto is decide writing the Decision to *out, which must be the zero
// Decision and stays so on error. The owner-local path fills *out in place
// instead of copying a Decision up through every call (each such copy right
// after its fields were written stalls the CPU's store forwarding).
func (n *Node) decideInto(ctx context.Context, c *Check, out *Decision) error {
	if n.leaving.Load() || n.stopping.Load() {
		return ErrStopped
	}
	if err := c.Validate(n.cfg.MaxKeyLen); err != nil {
		return err
	}
	if err := n.withinMaxima(c.Limit); err != nil {
		return err
	}
	var deadline time.Time
	rs := n.rs.Load()
	for attempt := 0; ; attempt++ { // attempt bounds re-routing after owner-side "not owner"
		h := rs.snap.Hash(c.Key) // one hash: owner, handoff gate and shard
		p := rs.snap.PartitionOfHash(h)
		var owner ring.Member
		local := rs.mine != nil && rs.mine[p]
		if !local {
			ok := rs.snap.Len() > 0
			if ok {
				owner = rs.snap.PartitionOwner(p)
			}
			local = !ok || owner.Name == n.cfg.Name
		}
		if local {
			// Start loading the key's slot (a cache miss at a million keys) so
			// that the clock read and the shard lock overlap it. (A forwarded
			// batch prefetches its checks' slots itself, see peerService.Forward.)
			n.owned.Prefetch(h, c.Limit.Kind)
			// Route and Owner are written first: the last writes before the
			// caller copies *out are then the algorithm's, long finished.
			out.Route, out.Owner = RouteOwner, n.cfg.Name
			var ban bool
			var err error
			if c.booking() {
				ban, err = n.bookOwned(ctx, rs, c, h, p, out)
			} else {
				ban, err = n.decideOwned(ctx, rs, c, h, p, &out.Decision)
			}
			if err != nil {
				*out = Decision{}
			}
			if err != nil && errors.Is(err, errNotOwner) && attempt < 8 {
				rs = n.rs.Load() // the ring changed under us: route again
				continue
			}
			if err != nil {
				if errors.Is(err, errNotOwner) {
					return n.fallbackInto(*c, rs, out)
				}
				return err
			}
			if c.Hits > 0 && out.Allowed {
				if err := n.awaitReplicated(ctx); err != nil {
					*out = Decision{}
					return err
				}
			}
			n.observe(c.Limit.Kind, RouteOwner, out.Allowed)
			if ban {
				out.Banned = true
			}
			return nil
		}
		// The pool bounds each forward by ForwardTimeout; the deadline below bounds
		// the retries (set on the first failure, so the fast path reads no clock and
		// makes no context or timer).
		var (
			res transport.Result
			err error
		)
		viaBackup := n.breakers.Skip(owner.Name)
		if !viaBackup {
			res, err = n.peers.Forward(ctx, owner.Addr, c.wire(false))
			if err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			switch {
			case err == nil && res.Code == transport.CodeOK:
				n.breakers.Reset(owner.Name)
				n.observe(c.Limit.Kind, RouteForwarded, res.Decision.Allowed)
				*out = Decision{Decision: res.Decision, Route: RouteForwarded, Owner: owner.Name, Banned: res.Banned, Delay: res.Delay, at: res.At}
				return nil
			case err == nil && res.Code == transport.CodeInvalidArgument:
				return refusedByPeer(owner.Name, res.Message)
			}
			if n.stopping.Load() {
				return ErrStopped // our own pool is closing: not the owner's fault
			}
			switch {
			case err != nil && rs.backups != nil:
				// Unreachable: skip the owner for BreakerCooldown and let the
				// backup decide, now, instead of waiting for gossip.
				n.breakers.Fail(owner.Name)
				viaBackup = true
			case err == nil && res.Code == transport.CodeUnavailable && rs.backups != nil:
				// The owner is stopping (it has handed its keys to their new
				// owners, its backups): the backup decides.
				viaBackup = true
			}
		}
		if viaBackup {
			d, err := n.decideViaBackup(ctx, rs, *c, h, owner)
			switch {
			case err == nil:
				*out = d
				return nil
			case errors.Is(err, errNoBackup):
				return n.fallbackInto(*c, rs, out)
			case errors.Is(err, errNotOwner):
				res = transport.Result{Code: transport.CodeNotOwner} // rings disagree: route again below
			default:
				return err
			}
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(n.cfg.ForwardTimeout)
		}
		// The owner answered "not owner" or "stopping", or could not be reached.
		// "Not owner" means two rings disagree for a moment: retry every two gossip
		// rounds (at once when our ring moves on) until the deadline. After a failure,
		// route again if our ring moves on within a few gossip rounds (a leave or a
		// crash being detected); otherwise the owner is unreachable.
		notOwner := err == nil && res.Code == transport.CodeNotOwner
		wait := min(time.Until(deadline), n.rerouteGrace())
		if notOwner {
			wait = min(time.Until(deadline), 2*n.cfg.Gossip.GossipInterval)
		}
		next, changed := n.awaitRingChange(ctx, rs, wait)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if (!changed && !notOwner) || !time.Now().Before(deadline) {
			n.log.Debug("owner unreachable", "owner", owner.Name, "err", err, "code", res.Code)
			return n.fallbackInto(*c, rs, out)
		}
		if changed {
			rs = next
		}
	}
}

// rerouteGrace is how long a sender whose owner failed (unreachable, or stopping)
// waits for its ring to change before the policy decides: two gossip rounds, time
// for a leave that is already spreading to arrive, short enough that checks on a
// crashed owner's keys do not each wait out ForwardTimeout until the crash is
// detected.
func (n *Node) rerouteGrace() time.Duration { return 2 * n.cfg.Gossip.GossipInterval }

// awaitRingChange returns the ring state that replaced rs, waiting up to d for
// one; false if none came (or ctx ended, or the node stopped).
func (n *Node) awaitRingChange(ctx context.Context, rs *ringState, d time.Duration) (*ringState, bool) {
	if cur := n.rs.Load(); cur != rs {
		return cur, true
	}
	if d <= 0 {
		return nil, false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-rs.next:
		return n.rs.Load(), true
	case <-t.C:
	case <-ctx.Done():
	case <-n.stop:
	}
	return nil, false
}

// decideOwned applies c on this node as its owner under ring state rs and
// writes the Decision to *out. h is the key's ring hash and p its partition. It
// first waits, bounded by HandoffTimeout, for the previous owner's handoff when
// the key's partition was just gained from a live member. A check with a
// Penalty is decided with the key's ban state (banned reports that the ban
// decided it).
func (n *Node) decideOwned(ctx context.Context, rs *ringState, c *Check, h uint64, p int, out *algo.Decision) (banned bool, err error) {
	if gate := rs.gateOf(p); gate != nil {
		if err := rs.waitGate(ctx, gate, n.stop); err != nil {
			return false, err
		}
		if rs.gateOf(p) != nil {
			n.log.Debug("handoff gate expired: deciding on the state at hand", "partition", p)
		}
	}
	wall := n.clock()
	now := c.CreatedAt
	if now == 0 {
		now = wall
	}
	owns := func() bool { return n.owns(rs, h) }
	if c.Penalty.IsZero() {
		return false, n.owned.TakeInto(out, h, c.Limit, c.Hits, now, wall, owns)
	}
	d, banned, err := n.bans.take(h, c.Key, c.Penalty, c.Hits, now, func(hits int64) (algo.Decision, error) {
		return n.owned.Take(h, c.Limit, hits, now, wall, owns)
	})
	if err == nil {
		*out = d
	}
	return banned, err
}

// owns reports, under a shard lock, whether this node still owns the key whose
// ring hash is h: true when the ring has not changed since rs was used to route
// (rs already said so), else the current ring decides. A leaving node owns
// nothing.
func (n *Node) owns(rs *ringState, h uint64) bool {
	cur := n.rs.Load()
	if cur == rs {
		return !cur.leaving
	}
	m, ok := cur.snap.OwnerOfHash(h)
	return ok && m.Name == n.cfg.Name && !cur.leaving
}

// fallbackInto is decideFallback writing the Decision to *out (unchanged on
// error).
func (n *Node) fallbackInto(c Check, rs *ringState, out *Decision) error {
	d, err := n.decideFallback(c, rs)
	if err == nil {
		*out = d
	}
	return err
}

// decideFallback applies the OwnerUnreachable policy; a Local limiter gets
// this node's share of the limit among the members of rs (see Local).
func (n *Node) decideFallback(c Check, rs *ringState) (Decision, error) {
	if c.cancelAt != 0 {
		// A cancel the owner cannot get: nothing is given back, nothing taken.
		return Decision{Decision: algo.Decision{Allowed: true}, Route: RouteFallback, Owner: n.cfg.Name}, nil
	}
	wall := n.clock()
	now := c.CreatedAt
	if now == 0 {
		now = wall
	}
	var d algo.Decision
	switch n.cfg.OwnerUnreachable {
	case Local:
		var err error
		d, err = n.fallback.Take(n.fallback.Hash(c.Key), share(c.Limit, rs.snap.Len()), c.Hits, now, wall, nil)
		if err != nil {
			return Decision{}, err
		}
	case FailOpen, FailClosed:
		var fresh algo.State
		full, err := fresh.Take(now, 0, c.Limit)
		if err != nil {
			return Decision{}, err
		}
		d = full
		d.Allowed = n.cfg.OwnerUnreachable == FailOpen
		if !d.Allowed {
			d.Remaining = 0
			d.RetryAfter = n.cfg.ForwardTimeout
		}
	}
	n.observe(c.Limit.Kind, RouteFallback, d.Allowed)
	return Decision{Decision: d, Route: RouteFallback, Owner: n.cfg.Name}, nil
}

func (n *Node) observe(k algo.Kind, r Route, allowed bool) {
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.Check(k, r, allowed)
	}
}

func (n *Node) onEvict(reason string) {
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.Eviction(reason)
	}
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
		if checks[i].AsBackup {
			return true
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
type checkedBatch struct {
	states []algo.State // the decoded states
	bad    []bool       // per state: refused (nil: none was)
	badPen []bool       // per ban state: refused (nil: none was)
	wall   int64        // the owner clock they were judged at
}

// checkTransfer validates a transfer batch as untrusted peer input (see
// Transfer): an error for a batch whose sender is not who it claims to be,
// else a verdict per state and ban state.
func (n *Node) checkTransfer(b transport.TransferBatch) (checkedBatch, error) {
	if n.secure && b.Sender != b.From {
		n.refused("sender")
		return checkedBatch{}, fmt.Errorf("%w: from %q, but the sender's certificate names %q", ErrRefusedState, b.From, b.Sender)
	}
	cb := checkedBatch{wall: n.clock(), states: make([]algo.State, len(b.States))}
	for i, ks := range b.States {
		if err := n.checkKeyState(ks, &cb.states[i], cb.wall); err != nil {
			if cb.bad == nil {
				cb.bad = make([]bool, len(b.States))
			}
			cb.bad[i] = true
			n.refusedState(b.From, ks.Key, err)
		}
	}
	for i, ps := range b.Penalties {
		for _, t := range ps.Denials {
			if t > cb.wall+int64(n.cfg.MaxPeerClockSkew) {
				if cb.badPen == nil {
					cb.badPen = make([]bool, len(b.Penalties))
				}
				cb.badPen[i] = true
				n.refusedState(b.From, ps.Key, fmt.Errorf("%w: ban state: a denial at %d ns is after now %d + skew %v", ErrRefusedState, t, cb.wall, n.cfg.MaxPeerClockSkew))
				break
			}
		}
	}
	return cb, nil
}

// refusedAt reports whether checkTransfer refused state i of a batch.
func (cb *checkedBatch) refusedAt(i int) bool { return cb.bad != nil && cb.bad[i] }

// penRefusedAt reports whether checkTransfer refused ban state i of a batch.
func (cb *checkedBatch) penRefusedAt(i int) bool { return cb.badPen != nil && cb.badPen[i] }

// installHandoff installs the states of a validated handoff batch that were
// not refused (see Transfer).
func (n *Node) installHandoff(b transport.TransferBatch, cb checkedBatch) {
	scanned := false // one scan for idle keys per batch at the MaxKeys bound
	for i, ks := range b.States {
		if cb.refusedAt(i) {
			continue
		}
		h := ks.KeyHash
		if ks.Key != "" {
			h = n.owned.Hash(ks.Key)
		}
		n.owned.InstallScan(h, ks.Limit, cb.states[i], ks.LastNow, ks.CallerClock, cb.wall, true, &scanned)
	}
	for i, ps := range b.Penalties {
		if !cb.penRefusedAt(i) {
			n.bans.install(n.owned.Hash(ps.Key), ps)
		}
	}
	if b.Done {
		n.markHandoffDone(b.From, b.RingDigest)
	}
}

// checkKeyState decodes ks's state into st and validates it as untrusted input
// (see Transfer).
func (n *Node) checkKeyState(ks transport.KeyState, st *algo.State, wall int64) error {
	if err := ks.Limit.Validate(); err != nil {
		return err
	}
	if err := n.withinMaxima(ks.Limit); err != nil {
		return fmt.Errorf("%w: key %q: %w", ErrRefusedState, ks.Key, err)
	}
	if err := st.UnmarshalBinary(ks.State); err != nil {
		return fmt.Errorf("%w: key %q: %w", ErrRefusedState, ks.Key, err)
	}
	skew := int64(n.cfg.MaxPeerClockSkew)
	now := wall
	switch {
	case ks.CallerClock && !n.cfg.AcceptCallerTimestamps:
		return fmt.Errorf("%w: key %q: state on a caller's clock, and AcceptCallerTimestamps is off", ErrRefusedState, ks.Key)
	case ks.CallerClock:
		// Checks on caller timestamps (replays) may run ahead of the wall clock,
		// as this node itself would accept them: the state is checked against its
		// own latest time.
		now = max(wall, ks.LastNow)
	case ks.LastNow > wall+skew:
		return fmt.Errorf("%w: key %q: last check at %d ns is after now %d + skew %d", ErrRefusedState, ks.Key, ks.LastNow, wall, skew)
	}
	if err := st.Plausible(now, skew, ks.Limit); err != nil {
		return fmt.Errorf("%w: key %q: %w", ErrRefusedState, ks.Key, err)
	}
	return nil
}

func (n *Node) refused(what string) {
	if n.smetrics != nil {
		n.smetrics.PeerRefused(what)
	}
}
