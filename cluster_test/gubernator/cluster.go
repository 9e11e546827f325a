package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// limit is one load's policy: rate hits per period, capacity burst.
type limit struct {
	rate   int64
	period time.Duration
	burst  int64
}

// outcome is one decided check.
type outcome struct {
	allowed bool
	// route names the path that decided it, where the system says
	// (ringlimit's Decision.Route); "" otherwise.
	route string
}

// member is one entry point of a cluster: callers placed on it check through
// it, as an application co-located with that member would.
type member struct {
	name  string
	check func(ctx context.Context, key string, l limit) (outcome, error)
}

// cluster is an in-process cluster of one system.
type cluster struct {
	members []member
	// owner returns the index in members of key's owner.
	owner func(ctx context.Context, key string) (int, error)
	close func() error
}

// startTimeout bounds a cluster's start.
const startTimeout = 60 * time.Second

// closeWait bounds how long a gubernator cluster's close is waited for.
const closeWait = 5 * time.Second

// startRinglimit starts size ringlimit nodes as the CLI's in-process cluster
// does (cmd/ringlimit/internal/inprocess): nodetest.TestConfig, secure (mutual
// TLS between members), a deployment's idle-scan interval, a one-minute
// forward timeout; repl is node.ParseReplication's name; leaseSize > 0 turns
// capacity leases on with that table size (node.Config.Lease.Size) and
// node.DefaultConfig's other lease settings.
func startRinglimit(ctx context.Context, size int, repl string, leaseSize int) (cluster, error) {
	r, err := node.ParseReplication(repl)
	if err != nil {
		return cluster{}, err
	}
	cfg := nodetest.TestConfig()
	cfg.IdleScanInterval = node.DefaultConfig().IdleScanInterval
	cfg.ForwardTimeout = time.Minute
	cfg.Replication = r
	cfg.Lease = node.DefaultConfig().Lease
	cfg.Lease.Size = leaseSize
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	c, err := nodetest.StartCluster(sctx, size, cfg)
	if err != nil {
		return cluster{}, fmt.Errorf("start %d ringlimit nodes: %w", size, err)
	}
	nodes := c.Nodes()
	out := cluster{close: c.Close}
	for _, n := range nodes {
		out.members = append(out.members, member{
			name: n.Name(),
			check: func(ctx context.Context, key string, l limit) (outcome, error) {
				d, err := n.Check(ctx, node.Check{
					Key:   key,
					Limit: algo.Limit{Kind: algo.TokenBucket, Limit: l.rate, Period: l.period, Burst: l.burst},
					Hits:  1,
				})
				if err != nil {
					return outcome{}, err
				}
				return outcome{allowed: d.Allowed, route: d.Route.String()}, nil
			},
		})
	}
	out.owner = func(_ context.Context, key string) (int, error) {
		m, ok := nodes[0].Owner(key)
		if !ok {
			return 0, errors.New("ringlimit: no owner for the key")
		}
		for i, n := range nodes {
			if n.Name() == m.Name {
				return i, nil
			}
		}
		return 0, fmt.Errorf("ringlimit: owner %q is not a member", m.Name)
	}
	return out, nil
}

// guberName is the gubernator rate limit's Name; the load's key is its
// UniqueKey.
const guberName = "bench"

// startGubernator starts size gubernator daemons on loopback with their
// default behaviours (GlobalSyncWait 100 ms, BatchWait 500 µs, no TLS between
// peers) and tells each about all. global sets Behavior GLOBAL on every check;
// without it checks take gubernator's default path (batched forwards to the
// owner).
func startGubernator(ctx context.Context, size int, global bool) (cluster, error) {
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	var (
		daemons []*guber.Daemon
		peers   []guber.PeerInfo
	)
	// Daemon.Close was seen to hang here (in v2.13.0 its global manager's
	// Close waits on an interval timer's goroutine that never ends) after its
	// gRPC servers had stopped: closeAll waits for the daemons at most
	// closeWait and leaves any still closing behind, idle.
	closeAll := func() error {
		done := make(chan struct{}, len(daemons))
		for _, d := range daemons {
			go func() {
				d.Close()
				done <- struct{}{}
			}()
		}
		timeout := time.After(closeWait)
		for closed := 0; closed < len(daemons); closed++ {
			select {
			case <-done:
			case <-timeout:
				return fmt.Errorf("%d of %d gubernator daemons still closing after %v (left behind)", len(daemons)-closed, len(daemons), closeWait)
			}
		}
		return nil
	}
	for i := 0; i < size; i++ {
		// A daemon recognises itself in the peer list by its advertised
		// address, so it needs its port before it starts: one the OS picks
		// now (another process could take it before the daemon binds; the
		// start then fails and the run stops).
		grpcAddr, err := freeAddr()
		if err != nil {
			_ = closeAll()
			return cluster{}, err
		}
		sctx, cancel := context.WithTimeout(ctx, startTimeout)
		d, err := guber.SpawnDaemon(sctx, guber.DaemonConfig{
			Logger:            log.WithField("instance", grpcAddr),
			InstanceID:        grpcAddr,
			GRPCListenAddress: grpcAddr,
			HTTPListenAddress: "127.0.0.1:0",
			AdvertiseAddress:  grpcAddr,
		})
		cancel()
		if err != nil {
			_ = closeAll()
			return cluster{}, fmt.Errorf("start gubernator daemon %d: %w", i, err)
		}
		daemons = append(daemons, d)
		peers = append(peers, guber.PeerInfo{GRPCAddress: grpcAddr, HTTPAddress: d.HTTPListener.Addr().String()})
	}
	for _, d := range daemons {
		d.SetPeers(peers)
	}
	behavior := guber.Behavior_BATCHING
	if global {
		behavior = guber.Behavior_GLOBAL
	}
	out := cluster{close: closeAll}
	for i, d := range daemons {
		out.members = append(out.members, member{
			name: fmt.Sprintf("guber-%d", i),
			check: func(ctx context.Context, key string, l limit) (outcome, error) {
				resp, err := d.V1Server.GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{
					Name:      guberName,
					UniqueKey: key,
					Hits:      1,
					Limit:     l.rate,
					Duration:  l.period.Milliseconds(),
					Burst:     l.burst,
					Algorithm: guber.Algorithm_LEAKY_BUCKET,
					Behavior:  behavior,
				}}})
				if err != nil {
					return outcome{}, err
				}
				if len(resp.Responses) != 1 {
					return outcome{}, fmt.Errorf("gubernator: %d responses to one request", len(resp.Responses))
				}
				r := resp.Responses[0]
				if r.Error != "" {
					return outcome{}, errors.New(r.Error)
				}
				return outcome{allowed: r.Status == guber.Status_UNDER_LIMIT}, nil
			},
		})
	}
	out.owner = func(ctx context.Context, key string) (int, error) {
		p, err := daemons[0].V1Server.GetPeer(ctx, guberName+"_"+key)
		if err != nil {
			return 0, err
		}
		for i, pi := range peers {
			if pi.GRPCAddress == p.Info().GRPCAddress {
				return i, nil
			}
		}
		return 0, fmt.Errorf("gubernator: owner %s is not a member", p.Info().GRPCAddress)
	}
	return out, nil
}

// freeAddr returns a loopback address with a port the OS picked.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}
