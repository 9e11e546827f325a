// A node's life: New starts it, Close leaves the cluster gracefully, Abort
// stops it at once.

package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/internal/breaker"
	"github.com/ringlimit/ringlimit/node/internal/denycache"
	"github.com/ringlimit/ringlimit/node/internal/handoff"
	"github.com/ringlimit/ringlimit/node/internal/membership"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/node/internal/topdenied"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
	"github.com/ringlimit/ringlimit/transport/rotate"
)

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
		cfg:     cfg,
		log:     cfg.Logger,
		clockFn: cfg.Clock,
		id:      membership.NewInstanceID(),
		ring:    r,
		bans:    &store.Bans{Track: cfg.Replication != ReplicationOff},
		denied:  denycache.New(cfg.DeniedCacheSize, cfg.DeniedCacheMaxTTL),
		top:     topdenied.New(cfg.TopDeniedKeys),
		strays:  handoff.NewStrays(),
		secure:  !cfg.Insecure,
		stop:    make(chan struct{}),
	}
	n.owned = store.New(cfg.MaxKeys, r.Snapshot().Hash, n.onEvict)
	n.owned.Track = cfg.Replication != ReplicationOff
	n.breakers = breaker.NewSet(cfg.BreakerCooldown)
	n.fallback = store.New(cfg.MaxKeys, r.Snapshot().Hash, n.onEvict)
	if n.log == nil {
		n.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	n.log = n.log.With("node", cfg.Name)
	n.repl = n.newReplicator()
	n.router = n.newRouter()
	n.newLeases()
	n.psvc = n.newPeerService()
	n.kops = n.newKeyOps()
	n.mem = n.newMembers()
	n.start = time.Now()
	n.base = n.start.UnixNano()
	rs0 := &ringState{Snap: r.Snapshot(), Next: make(chan struct{})}
	rs0.SetMine(cfg.Name)
	n.rs.Store(rs0)

	if sm, ok := cfg.Metrics.(SecurityMetrics); ok {
		n.smetrics = sm
	}
	if cfg.StateDir != "" {
		// Before the first ring: restored states are in the store before any
		// check is decided, and that ring's handoff moves them to their owners.
		if err := n.openStateDir(); err != nil {
			return nil, err
		}
	}
	var serverTLS, clientTLS *tls.Config
	var gate transport.PeerGate
	if n.secure {
		if n.tlsSrc, err = n.openTLS(); err != nil {
			return nil, err
		}
		serverTLS, clientTLS = rotate.PeerTLS(n.tlsSrc)
		n.tracker = rotate.NewTracker()
		// The dialling member retires a connection gracefully when its own
		// material changes; a forward lasts ForwardTimeout at most.
		n.tracker.Grace = cfg.ForwardTimeout
		n.tracker.Track(serverTLS)
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
		var dial []grpc.DialOption
		if cfg.cutNet != nil {
			dial = append(dial, grpc.WithContextDialer(cfg.cutNet.dial(n)))
		}
		pool, err := transport.NewPool(transport.ClientConfig{
			TLS:            clientTLS,
			ExpectMember:   n.mem.MemberAt,
			BatchMaxItems:  cfg.BatchMaxItems,
			BatchMaxWait:   cfg.BatchMaxWait,
			ForwardTimeout: cfg.ForwardTimeout,
			OnBatch:        n.onBatch,
			DialOptions:    dial,
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
		lis := n.grpcLis
		if n.tracker != nil {
			lis = n.tracker.Listener(lis)
		}
		if err := n.grpcSrv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("grpc serve", "err", err)
		}
	}()

	if err := n.startGossip(host); err != nil {
		n.grpcSrv.Stop()
		closePeers()
		n.wg.Wait()
		return nil, err
	}
	n.mem.AdmitNow()
	if other := n.mem.NameConflict(); other != "" {
		_ = n.ml.Shutdown()
		n.grpcSrv.Stop()
		closePeers()
		n.wg.Wait()
		return nil, fmt.Errorf("%w: %q is a live member at %s; pick another Config.Name (or stop that member first)", ErrDuplicateName, cfg.Name, other)
	}
	n.rebuild()
	n.ready.Store(true)
	n.wg.Add(5)
	go n.strayLoop()
	go n.membershipLoop()
	go n.rejoinLoop()
	go n.idleLoop()
	go n.repl.Loop(n.wg.Done)
	if n.persist != nil && cfg.SnapshotInterval > 0 {
		n.wg.Add(1)
		go n.snapshotLoop()
	}
	if n.secure {
		if err := n.watchTLS(); err != nil {
			_ = n.Abort()
			return nil, err
		}
	}
	if n.secure && cfg.PeerDenyFile != "" {
		if err := n.watchDenyList(); err != nil {
			_ = n.Abort()
			return nil, err
		}
	}
	n.log.Info("node started", "peer", n.grpcAddr, "gossip", n.GossipAddr(), "members", n.rs.Load().Snap.Len(), "secure", n.secure)
	return n, nil
}

// Close leaves the cluster gracefully: with Config.StateDir it first writes
// its state snapshot; then it stops owning keys, hands every state to
// its new owner, leaves the gossip cluster, waits until peers stop forwarding to it
// (bounded), then stops the gRPC server and all goroutines. The whole sequence is
// bounded by Config.CloseTimeout. It is safe to call more than once; later calls
// return the first call's result.
func (n *Node) Close() error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return n.closeErr
	}
	n.closed = true
	deadline := time.Now().Add(n.cfg.CloseTimeout)
	var errs []error
	// Before the handoff empties the store; a failure is logged and counted,
	// and does not fail Close.
	_ = n.writeSnapshot("close", true)

	// Under installMu: a handoff being installed ends before this node's
	// own handoff extracts the states, and a later one is refused (Transfer).
	n.installMu.Lock()
	n.leaving.Store(true)
	n.installMu.Unlock()
	n.rebuild() // a ring without this node: every key is handed off
	if err := membership.Leave(n.ml, n.cfg.Name, n.cfg.Gossip.GossipInterval, time.Until(deadline)/2, n.log); err != nil {
		errs = append(errs, fmt.Errorf("leave: %w", err))
	}
	// Keep answering "not owner" until the peers' rings drop us: stop once no
	// forward arrived for a few gossip rounds, or at the deadline.
	quiet := 5 * n.cfg.Gossip.GossipInterval
	if quiet < 50*time.Millisecond {
		quiet = 50 * time.Millisecond
	}
	tick := time.NewTicker(quiet)
	for last := n.inbound.Load(); time.Now().Add(quiet).Before(deadline); {
		<-tick.C
		cur := n.inbound.Load()
		if cur == last {
			break
		}
		last = cur
	}
	tick.Stop()
	n.stopping.Store(true)
	errs = append(errs, n.shutdown(deadline)...)
	n.closeErr = errors.Join(errs...)
	return n.closeErr
}

// Abort stops the node at once, as a crash would: no leave, no handoff. Peers
// detect the failure by gossip. For tests of failure handling, and for processes
// that must exit now. With Config.StateDir it writes its state snapshot
// first (as Close does; a crash does not). Safe to call more than once, and after Close.
func (n *Node) Abort() error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return n.closeErr
	}
	n.closed = true
	_ = n.writeSnapshot("abort", true)
	n.stopping.Store(true)
	n.closeErr = errors.Join(n.shutdown(time.Now())...)
	return n.closeErr
}

func (n *Node) shutdown(deadline time.Time) []error {
	var errs []error
	close(n.stop)
	if err := n.ml.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("gossip shutdown: %w", err))
	}
	done := make(chan struct{})
	go func() { n.grpcSrv.GracefulStop(); close(done) }()
	t := time.NewTimer(time.Until(deadline))
	select {
	case <-done:
	case <-t.C:
		n.grpcSrv.Stop()
		<-done
	}
	t.Stop()
	if err := n.peers.Close(); err != nil {
		errs = append(errs, fmt.Errorf("peers: %w", err))
	}
	n.wg.Wait()
	n.log.Info("node stopped")
	return errs
}
