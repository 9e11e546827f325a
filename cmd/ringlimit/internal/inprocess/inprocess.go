// Package inprocess starts a ringlimit cluster inside the CLI's process: n nodes
// from nodetest.TestConfig on loopback with ports picked by the OS, but with a LAN
// deployment's idle-scan interval, joined through the first one,
// ready once every node agrees on the ring (nodetest.StartCluster). Each node
// becomes one target.Target named after the node.
package inprocess

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// ForwardTimeout replaces TestConfig's forward timeout (2 s): 1 min. The nodes
// share this process, so an owner that does not answer in time is starved (a
// loaded or stalled machine), not gone, and failing over to its backup in the
// same process gains nothing. It would make a replay inexact instead: the
// backup may count a hit the slow owner also counted, or decide from a replica
// that lags (node.ReplicationAsync). A test that froze the process for 5 s
// during a replay got 3 to 90 mismatches at the former 5 s; a CI machine was
// seen to stall for about 40 s.
const ForwardTimeout = time.Minute

// StartTimeout bounds how long Start waits for the cluster to converge when ctx
// has no earlier deadline.
const StartTimeout = 30 * time.Second

// Options configure Start.
type Options struct {
	// Nodes is the cluster's size, >= 1.
	Nodes int
	// AcceptCallerTimestamps sets node.Config.AcceptCallerTimestamps (replays
	// need it). Default false.
	AcceptCallerTimestamps bool
	// Replication sets node.Config.Replication: how owners copy key states to
	// their backups. The zero value, node.ReplicationAsync, is node's default.
	Replication node.Replication
	// Leases sets node.Config.Lease.Size: each node's capacity lease table
	// (0, the default, turns leases off; the other lease settings are
	// node.DefaultConfig's).
	Leases int
}

// Start starts a cluster of o.Nodes nodes from nodetest.TestConfig with
// ForwardTimeout: secure, with mutual TLS between the nodes and encrypted
// gossip from an in-memory CA and key made for this cluster. Idle keys are
// dropped at node.DefaultConfig's interval (every 10 s), not the test
// profile's (every second): what bench measures at a million keys should not
// include a full scan of every node's keys each second, which a deployment
// does not run. (Gossip keeps the test profile's timings: with a LAN's, the
// CLI's cluster took about 3.7 s longer to start and stop.) o sets caller
// timestamps, replication and leases. stop closes every node gracefully. Errors: an
// invalid size or config (wrapping node.ErrInvalidConfig), a listener that
// cannot bind, or a cluster that does not converge within StartTimeout.
func Start(ctx context.Context, o Options) (targets []target.Target, stop func() error, err error) {
	cfg := nodetest.TestConfig()
	def := node.DefaultConfig()
	cfg.IdleScanInterval = def.IdleScanInterval
	cfg.AcceptCallerTimestamps = o.AcceptCallerTimestamps
	cfg.Replication = o.Replication
	cfg.Lease = def.Lease
	cfg.Lease.Size = o.Leases
	cfg.ForwardTimeout = ForwardTimeout
	fwd := &forwardCount{}
	cfg.Metrics = fwd
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	c, err := nodetest.StartCluster(ctx, o.Nodes, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("inprocess: start %d nodes: %w", o.Nodes, err)
	}
	for _, n := range c.Nodes() {
		addr := n.PeerAddr()
		targets = append(targets, target.Target{Name: n.Name(), Checker: n, Received: func() int64 { return fwd.to(addr) }})
	}
	return targets, c.Close, nil
}

// forwardCount is the cluster's node.Metrics: it counts the forward
// messages (batches) sent to each peer address, which are those each node
// received as an owner.
type forwardCount struct{ m sync.Map } // peer address -> *atomic.Int64

func (f *forwardCount) to(addr string) int64 {
	if v, ok := f.m.Load(addr); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

func (f *forwardCount) Forward(peer string, _ int, _ time.Duration, _ error) {
	v, ok := f.m.Load(peer)
	if !ok {
		v, _ = f.m.LoadOrStore(peer, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

func (*forwardCount) Check(algo.Kind, node.Route, bool) {}
func (*forwardCount) Handoff(int, time.Duration, error) {}
func (*forwardCount) Eviction(string)                   {}
