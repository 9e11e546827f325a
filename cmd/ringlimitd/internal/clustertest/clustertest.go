// Package clustertest is a test helper for the front doors (RESP, Envoy's RLS):
// it starts an in-process cluster whose replies those tests compare exactly, and
// counts what would make them inexact.
//
// A forward that outlasts node.Config.ForwardTimeout fails over to the key's
// backup (node.RouteBackup). That is availability first and correct for
// failover, but not exact: the slow owner may have counted the hit too, and
// under asynchronous replication the backup decides from a replica that may
// lag. A CI run on a loaded machine saw two RESP tests take about 40 s and fail
// with what these two produce (a hit counted twice, one admission too many),
// and freezing a test process for 5 s reproduces both. So these clusters wait
// up to ForwardTimeout (one minute) for a slow owner, and Degraded tells a
// failure whether any check was decided elsewhere anyway. Failover itself is
// tested in node and cluster_test.
package clustertest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// ForwardTimeout is the node.Config.ForwardTimeout of Start's clusters: 1 min,
// against nodetest.TestConfig's 2 s.
const ForwardTimeout = time.Minute

// Degraded counts a cluster's events that make a front door's replies inexact:
// checks decided other than by their owner (node.RouteBackup or
// node.RouteFallback), failed forwards, and handoffs that moved key states (a
// ring change after the cluster formed). It is a node.Metrics, safe for
// concurrent use; its zero value counts from zero.
type Degraded struct {
	offOwner, forwardErrs, handoffs atomic.Int64
}

// Check counts the check when it was decided off its owner.
func (d *Degraded) Check(_ algo.Kind, route node.Route, _ bool) {
	if route != node.RouteOwner && route != node.RouteForwarded {
		d.offOwner.Add(1)
	}
}

// Forward counts the batch when its forward failed.
func (d *Degraded) Forward(_ string, _ int, _ time.Duration, err error) {
	if err != nil {
		d.forwardErrs.Add(1)
	}
}

// Handoff counts handoffs that carried key states.
func (d *Degraded) Handoff(keys int, _ time.Duration, _ error) {
	if keys > 0 {
		d.handoffs.Add(1)
	}
}

// Eviction is not counted: idle keys are back at full capacity.
func (d *Degraded) Eviction(string) {}

// String says what was counted, for a failure message.
func (d *Degraded) String() string {
	return fmt.Sprintf("%d checks decided off their owner, %d failed forward batches, %d handoffs with keys",
		d.offOwner.Load(), d.forwardErrs.Load(), d.handoffs.Load())
}

// Start starts an n-node cluster from nodetest.TestConfig with ForwardTimeout and a
// Degraded as its Metrics, closed at the test's cleanup. It fails the test if
// the cluster does not form within a minute.
func Start(t testing.TB, n int) (*nodetest.Cluster, *Degraded) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deg := new(Degraded)
	cfg := nodetest.TestConfig()
	cfg.ForwardTimeout = ForwardTimeout
	cfg.Metrics = deg
	c, err := nodetest.StartCluster(ctx, n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, deg
}
