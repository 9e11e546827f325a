package redislimit_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/failover/redislimit"
	"github.com/ringlimit/ringlimit/node/failover/redistest"
)

// BenchmarkTake measures one check per algorithm on a local redis-server (one
// EVALSHA round trip), from parallel callers over 10,000 keys.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client()
	l, err := redislimit.New(c, redislimit.Options{Prefix: "bench:"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := l.Load(ctx); err != nil {
		b.Fatal(err)
	}
	for _, k := range redislimit.SupportedKinds() {
		lim := algo.Limit{Kind: k, Limit: 100, Period: time.Second, Burst: 10}
		b.Run(k.String(), func(b *testing.B) {
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if _, err := l.Take(ctx, strconv.FormatInt(i%10_000, 10), time.Now().UnixNano(), 1, lim); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
