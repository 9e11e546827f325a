package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
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
