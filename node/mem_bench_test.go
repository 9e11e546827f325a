package node

import (
	"context"
	"encoding/binary"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/store"
)

// memBenchLimit is a limit under which a key that took one hit stays far from
// idle for the whole benchmark (10 hits per hour), so no key is dropped while
// the heap is measured.
func memBenchLimit(k algo.Kind) algo.Limit {
	return algo.Limit{Kind: k, Limit: 10, Period: time.Hour, Burst: 10}
}

// BenchmarkMemoryPerKey reports the heap growth per key (B/key, after
// runtime.GC, from runtime.ReadMemStats.HeapAlloc) of a single node (node.New
// with TestConfig) that took one hit on each of 1,000,000 distinct keys, for
// every algorithm. Each key is built per call, as a request would build it
// ("gc:0000001"...), so what the node keeps of the key's own bytes counts. The
// node is created, measured and closed inside each iteration; run it with
// -benchtime=1x.
//
// A sliding-window log of at most two entries and a bucketed window with hits
// in one bucket are packed in their slot; two more runs measure their boxed
// form: sliding_window_log/three-entries takes a check of 3 hits on each key,
// bucketed_sliding_window/two-buckets gives each key a second hit a bucket
// later (Period/WindowBuckets on the node's clock).
//
// A 10,000,000-key GCRA run is added when RINGLIMIT_BENCH_10M=1 (it needs about
// a minute and the heap the figure reports): it also reports the total heap
// growth in MiB.
func BenchmarkMemoryPerKey(b *testing.B) {
	type run struct {
		kind  algo.Kind
		keys  int
		boxed bool
	}
	var runs []run
	for _, k := range algo.Kinds() {
		runs = append(runs, run{k, 1_000_000, false})
	}
	runs = append(runs, run{algo.SlidingWindowLog, 1_000_000, true}, run{algo.BucketedSlidingWindow, 1_000_000, true})
	if os.Getenv("RINGLIMIT_BENCH_10M") == "1" {
		runs = append(runs, run{algo.GCRA, 10_000_000, false})
	}
	for _, r := range runs {
		name := r.kind.String() + "/keys=" + strconv.Itoa(r.keys)
		switch {
		case r.boxed && r.kind == algo.SlidingWindowLog:
			name = r.kind.String() + "/three-entries/keys=" + strconv.Itoa(r.keys)
		case r.boxed:
			name = r.kind.String() + "/two-buckets/keys=" + strconv.Itoa(r.keys)
		}
		b.Run(name, func(b *testing.B) {
			var perKey, total float64
			for b.Loop() {
				perKey, total = heapPerKey(b, r.kind, r.keys, r.boxed)
			}
			b.ReportMetric(perKey, "B/key")
			b.ReportMetric(total/(1<<20), "MiB")
		})
	}
}

// heapPerKey starts a node, takes one hit on each of keys distinct keys under
// memBenchLimit(kind), and returns the heap growth per key and in total
// (bytes). boxed: a log takes 3 hits at once instead, a bucketed window a
// second hit a bucket width later on the node's clock.
func heapPerKey(b *testing.B, kind algo.Kind, keys int, boxed bool) (perKey, total float64) {
	b.Helper()
	cfg := testConfig()
	cfg.Name = "mem"
	cfg.MaxKeys = keys
	cfg.IdleScanInterval = time.Hour // measure the states, not a scan racing the fill
	l := memBenchLimit(kind)
	var clock atomic.Int64 // the node's background loops read it too
	clock.Store(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC).UnixNano())
	twoBuckets := boxed && kind == algo.BucketedSlidingWindow
	hits := int64(1)
	if boxed && kind == algo.SlidingWindowLog {
		hits = 3
	}
	if twoBuckets {
		cfg.Clock = clock.Load
	}
	n, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	digits := max(7, len(strconv.Itoa(keys-1)))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	buf := make([]byte, 0, 32)
	passes := 1
	if twoBuckets {
		passes = 2
	}
	for pass := range passes {
		if pass > 0 {
			clock.Add(int64(l.Period) / algo.WindowBuckets)
		}
		for i := range keys {
			buf = append(buf[:0], "gc:"...)
			s := strconv.Itoa(i)
			for range digits - len(s) {
				buf = append(buf, '0')
			}
			buf = append(buf, s...)
			d, err := n.AllowN(ctx, string(buf), l, hits)
			if err != nil {
				b.Fatalf("key %d: %v", i, err)
			}
			if !d.Allowed {
				b.Fatalf("key %d, pass %d: denied, want allowed", i, pass)
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := n.Stats().Keys; got != keys {
		b.Fatalf("node holds %d keys, want %d", got, keys)
	}
	total = float64(after.HeapAlloc) - float64(before.HeapAlloc)
	runtime.KeepAlive(n)
	return total / float64(keys), total
}

// BenchmarkMemoryPerReplica reports the heap growth per key of a backup's
// store after GC when 1M GCRA states arrive by replication: each was last
// checked on its owner 5 ms before the backup's clock (a replication send's
// delay), as store.install receives them from replication.Replicator.Accept.
//
//	go test -run '^$' -bench MemoryPerReplica -benchtime=1x ./node/
func BenchmarkMemoryPerReplica(b *testing.B) {
	const keys = 1_000_000
	l := memBenchLimit(algo.GCRA)
	wall := int64(1_700_000_000) * int64(time.Second)
	last := wall - 5*int64(time.Millisecond)
	var st algo.State
	if _, err := st.Take(last, 1, l); err != nil {
		b.Fatal(err)
	}
	var perKey float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := store.New(keys, xxhash.Sum64String, nil)
		s.Track = true
		for i := range keys {
			s.Install(xxhash.Sum64(binary.LittleEndian.AppendUint64(nil, uint64(i))), l, st, last, false, wall, false)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != keys {
			b.Fatalf("store holds %d keys, want %d", s.Len(), keys)
		}
		perKey = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / keys
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perKey, "B/key")
}

// BenchmarkAllowLocalKeys is BenchmarkAllowLocal's GCRA check on the owner
// with the keys drawn at random from 1k, 10k and 1M stored keys: what the
// table's size costs a check (cache and TLB misses on its slots). Each key is
// written into one reused buffer, as a request's key would arrive in a hot
// buffer, so that only the store's memory is cold.
//
//	go test -run '^$' -bench AllowLocalKeys ./node/
func BenchmarkAllowLocalKeys(b *testing.B) {
	n := testNode(b, func(c *Config) { c.MaxKeys = 2_000_000; c.IdleScanInterval = time.Hour })
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 1 << 20, Period: time.Hour, Burst: 1 << 20}
	buf := make([]byte, 0, 32)
	key := func(i uint64) string {
		buf = strconv.AppendUint(append(buf[:0], "user:"...), i, 10)
		// The node keeps no key string on this path (it stores hashes), so
		// the buffer may be reused by the next check.
		return unsafe.String(unsafe.SliceData(buf), len(buf))
	}
	stored := uint64(0)
	for _, keys := range []uint64{1_000, 10_000, 1_000_000} {
		for ; stored < keys; stored++ {
			if _, err := n.Allow(ctx, key(stored), l); err != nil {
				b.Fatal(err)
			}
		}
		b.Run("keys="+strconv.FormatUint(keys, 10), func(b *testing.B) {
			b.ReportAllocs()
			x := uint64(0x9e3779b97f4a7c15)
			for b.Loop() {
				x ^= x << 13 // xorshift64: a uniform key each check
				x ^= x >> 7
				x ^= x << 17
				hi, _ := bits.Mul64(x, keys)
				if _, err := n.Allow(ctx, key(hi), l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
