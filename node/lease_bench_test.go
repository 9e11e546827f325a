package node

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// BenchmarkHotKeyNonOwners: one key checked by 64 parallel callers spread
// over the two members of a 3-node gRPC cluster that do not own it, limit
// high enough that every check is admitted, with capacity leases off
// (every check forwarded) and on. Reports the share of checks decided from
// leases (lease_%) next to ns/op; run both side by side:
//
//	go test -run '^$' -bench HotKeyNonOwners -count 4 ./node/
func BenchmarkHotKeyNonOwners(b *testing.B) {
	l := algo.Limit{Kind: algo.TokenBucket, Limit: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000}
	for _, bc := range []struct {
		name string
		mod  func(*Config)
	}{{"leases=off", func(c *Config) { c.Lease.Size = 0 }}, {"leases=on", leasesOn}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			base := testConfig()
			bc.mod(&base)
			c, err := startCluster(ctx, 3, base)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			nodes := c.Nodes()
			key := keyOwnedByB(b, nodes[0], nodes[1])
			callers := []*Node{nodes[0], nodes[2]}
			// Warm the key up so that leases are granted before timing.
			for i := range 2000 {
				if _, err := callers[i%2].Allow(ctx, key, l); err != nil {
					b.Fatal(err)
				}
			}
			var next, leased atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				n := callers[next.Add(1)%2]
				var mine int64
				for pb.Next() {
					d, err := n.Allow(context.Background(), key, l)
					if err != nil || !d.Allowed {
						b.Error(d, err)
						return
					}
					if d.Route == RouteLease {
						mine++
					}
				}
				leased.Add(mine)
			})
			b.ReportMetric(100*float64(leased.Load())/float64(b.N), "lease_%")
		})
	}
}

// keyOwnedByB is keyOwnedBy for a benchmark.
func keyOwnedByB(b *testing.B, n, owner *Node) string {
	b.Helper()
	for i := range 10_000 {
		k := "hot-" + time.Duration(i).String()
		if m, ok := n.Owner(k); ok && m.Name == owner.Name() {
			return k
		}
	}
	b.Fatalf("no key owned by %s", owner.Name())
	return ""
}
