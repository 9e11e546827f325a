package cluster_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/transport"
)

// BenchmarkFleetCheck is BenchmarkCluster3 (secure, asynchronous replication,
// DefaultConfig timings, 64 callers, 100k uniform keys, GCRA 1000/s burst 1000
// so every check is admitted) at 3, 10 and 30 members, to measure how the cost
// of a check grows with the fleet, side by side in one run:
//
//	go test -run '^$' -bench 'FleetCheck' -benchtime 100000x -count 2 -cpu 2 ./cluster_test/
//
// Besides BenchmarkCluster3's metrics it reports, per size, goroutines/member
// (runtime.NumGoroutine over the member count once the cluster has formed),
// heap-MB/member (heap in use after a GC over the member count) and form-s (the
// seconds the cluster took to start and converge).
func BenchmarkFleetCheck(b *testing.B) {
	for _, size := range []int{3, 10, 30} {
		b.Run(fmt.Sprintf("members=%d", size), func(b *testing.B) {
			benchCluster(b, size, false, node.ReplicationAsync)
		})
	}
}

// BenchmarkFleetCheckReplication is BenchmarkFleetCheck at 30 members with
// replication off and asynchronous (the default), side by side, to tell what
// the copies to the backups add to a check's cost at that size:
//
//	go test -run '^$' -bench 'FleetCheckReplication' -benchtime 100000x -count 2 -cpu 2 ./cluster_test/
func BenchmarkFleetCheckReplication(b *testing.B) {
	for _, mode := range []node.Replication{node.ReplicationOff, node.ReplicationAsync} {
		b.Run(fmt.Sprintf("members=30/%s", mode), func(b *testing.B) {
			benchCluster(b, 30, false, mode)
		})
	}
}

// BenchmarkFleetCheckToOwner is BenchmarkFleetCheck at 3 and 30 members with
// callers that send each check to its key's owner (as callers that know the
// ring would), so that nothing is forwarded: what the fleet's size costs a
// check besides the forward.
//
//	go test -run '^$' -bench 'FleetCheckToOwner' -benchtime 100000x -count 2 -cpu 2 ./cluster_test/
func BenchmarkFleetCheckToOwner(b *testing.B) {
	for _, size := range []int{3, 30} {
		b.Run(fmt.Sprintf("members=%d", size), func(b *testing.B) {
			benchClusterRouted(b, size, false, node.ReplicationAsync, true)
		})
	}
}

// startClusterWithin is startCluster with a deadline for forming the cluster
// other than the tests' 20 s.
func startClusterWithin(t testing.TB, size int, within time.Duration, mod func(*node.Config)) []*node.Node {
	t.Helper()
	base := nodetest.TestConfig()
	if mod != nil {
		mod(&base)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	c, err := nodetest.StartCluster(ctx, size, base)
	if err != nil {
		t.Fatalf("StartCluster(%d): %v", size, err)
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes() {
			n.Abort()
		}
	})
	return c.Nodes()
}

// BenchmarkFleetAtRest measures what a member holds for its peers once the
// load stops: at 10 and 30 members (secure, asynchronous replication,
// DefaultConfig timings), the 64 callers of BenchmarkFleetCheck make 20,000
// checks, then the cluster rests. It reports goroutines/member and
// heap-MB/member right after the load (busy-) and after three
// transport.DefaultIdleTimeout of rest (rest-), when every peer connection
// that carried nothing since has been let go (transport.ClientConfig.IdleTimeout):
//
//	go test -run '^$' -bench 'FleetAtRest' -benchtime 1x -cpu 2 ./cluster_test/
func BenchmarkFleetAtRest(b *testing.B) {
	for _, size := range []int{10, 30} {
		b.Run(fmt.Sprintf("members=%d", size), func(b *testing.B) {
			nodes := startClusterWithin(b, size, 5*time.Minute, func(c *node.Config) {
				def := node.DefaultConfig()
				c.IdleScanInterval, c.ForwardTimeout, c.HandoffTimeout = def.IdleScanInterval, def.ForwardTimeout, def.HandoffTimeout
				c.CloseTimeout, c.RejoinInterval, c.Gossip, c.AdmissionRetry = def.CloseTimeout, def.RejoinInterval, def.Gossip, def.AdmissionRetry
			})
			perMember := func() (gor, heapMB float64) {
				var ms runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms)
				return float64(runtime.NumGoroutine()) / float64(size), float64(ms.HeapInuse) / float64(size) / (1 << 20)
			}
			l := algo.Limit{Kind: algo.GCRA, Burst: 1000, Limit: 1000, Period: time.Second}
			var next atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					n := nodes[g%size]
					for i := next.Add(1); i <= 20_000; i = next.Add(1) {
						if _, err := n.Allow(context.Background(), fmt.Sprintf("bench:%d", i), l); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			busyG, busyH := perMember()
			// Streams close within IdleTimeout of their last use, connections
			// one to two IdleTimeouts after that (gRPC looks for activity once
			// per IdleTimeout): the rest is what is measured.
			time.Sleep(3*transport.DefaultIdleTimeout + 10*time.Second)
			restG, restH := perMember()
			b.ReportMetric(busyG, "busy-goroutines/member")
			b.ReportMetric(busyH, "busy-heap-MB/member")
			b.ReportMetric(restG, "rest-goroutines/member")
			b.ReportMetric(restH, "rest-heap-MB/member")
		})
	}
}
