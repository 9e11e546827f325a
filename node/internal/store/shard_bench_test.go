package store

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/algo"
)

// workerShards is the alternative owner-side design that DESIGN.md asks to
// benchmark against the lock per shard: one goroutine per shard owns its map
// (gubernator's workers.go), and a check is a request on the shard's channel. It
// lives in a test file because it lost (see BenchmarkShardExecutors).
type workerShards struct {
	in []chan workerReq
}

type workerReq struct {
	key       string
	l         algo.Limit
	hits, now int64
	reply     chan algo.Decision
}

func newWorkerShards(n int) *workerShards {
	w := &workerShards{in: make([]chan workerReq, n)}
	for i := range w.in {
		ch := make(chan workerReq, 64)
		w.in[i] = ch
		go func() {
			var m [int(algo.TokenBucket) + 1]map[string]*algo.State
			for r := range ch {
				if m[r.l.Kind] == nil {
					m[r.l.Kind] = make(map[string]*algo.State)
				}
				st := m[r.l.Kind][r.key]
				if st == nil {
					st = new(algo.State)
					m[r.l.Kind][r.key] = st
				}
				d, _ := st.Take(r.now, r.hits, r.l)
				r.reply <- d
			}
		}()
	}
	return w
}

func (w *workerShards) take(key string, l algo.Limit, hits, now int64, reply chan algo.Decision) algo.Decision {
	w.in[xxhash.Sum64String(key)%uint64(len(w.in))] <- workerReq{key, l, hits, now, reply}
	return <-reply
}

func (w *workerShards) close() {
	for _, ch := range w.in {
		close(ch)
	}
}

// BenchmarkShardExecutors compares the two owner-side designs on 64 parallel
// callers over 10,000 keys with GCRA.
func BenchmarkShardExecutors(b *testing.B) {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	l := algo.Limit{Kind: algo.GCRA, Burst: 1 << 20, Limit: 1 << 20, Period: time.Second}
	b.Run("lock-per-shard", func(b *testing.B) {
		s := New(1<<20, xxhash.Sum64String, nil)
		var seq atomic.Int64
		b.SetParallelism(32)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(7919))
			for pb.Next() {
				i++
				k := keys[i%len(keys)]
				s.Take(s.Hash(k), l, 1, int64(i), int64(i), nil)
			}
		})
	})
	b.Run("goroutine-per-shard", func(b *testing.B) {
		w := newWorkerShards(runtime.GOMAXPROCS(0) * 4)
		defer w.close()
		var seq atomic.Int64
		b.SetParallelism(32)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			reply := make(chan algo.Decision, 1)
			i := int(seq.Add(7919))
			for pb.Next() {
				i++
				w.take(keys[i%len(keys)], l, 1, int64(i), reply)
			}
		})
	})
}
