package node

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// BenchmarkDeniedCheck: a denied check of an exhausted key, on its owner
// (owner), on another member answering from its cached denial (cached), and
// on another member with the cache off (forwarded, over the in-process
// network of the tests: a lower bound of a real forward).
func BenchmarkDeniedCheck(b *testing.B) {
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	for _, bc := range []struct {
		name  string
		size  int
		local bool
	}{{"owner", 4096, true}, {"cached", 4096, false}, {"forwarded", 0, false}} {
		b.Run(bc.name, func(b *testing.B) {
			_, nodes := memCluster(b, 2, func(c *Config) { c.DeniedCacheSize = bc.size })
			a, owner := nodes[0], nodes[1]
			key := ""
			for i := 0; ; i++ {
				k := "bench-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
				if m, _ := a.Owner(k); m.Name == owner.Name() {
					key = k
					break
				}
			}
			n := a
			if bc.local {
				n = owner
			}
			ctx := context.Background()
			_, _ = n.Allow(ctx, key, l)
			_, _ = n.Allow(ctx, key, l)
			b.ResetTimer()
			for range b.N {
				if d, err := n.Allow(ctx, key, l); err != nil || d.Allowed {
					b.Fatal(d, err)
				}
			}
		})
	}
}
