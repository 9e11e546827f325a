package node

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/persist"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
)

// snapshotNode is a Node with a store and a snapshot file and nothing else
// (no listener, no gossip): what writeSnapshot and restore use.
func snapshotNode(b *testing.B, dir string, maxKeys int) *Node {
	b.Helper()
	cfg := DefaultConfig()
	cfg.Name = "bench"
	cfg.MaxKeys = maxKeys
	r, err := ring.New(cfg.Ring)
	if err != nil {
		b.Fatal(err)
	}
	n := &Node{cfg: cfg, ring: r, bans: &store.Bans{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), secure: true}
	n.owned = store.New(maxKeys, r.Snapshot().Hash, nil)
	n.psvc = n.newPeerService()
	n.start = time.Now()
	n.base = n.start.UnixNano()
	n.persist, _ = persist.Open(dir, cfg.Name)
	return n
}

// BenchmarkSnapshot writes (write) and restores (restore: read, check every
// record, judge each state as a handoff and install it in an empty store) the
// snapshot of a node holding keys keys, a quarter under each of GCRA, token
// bucket, fixed window and a sliding-window log of one entry, all with a
// one-hit-per-day limit used once. It reports the time and the file bytes
// per key.
func BenchmarkSnapshot(b *testing.B) {
	limits := []algo.Limit{
		{Kind: algo.GCRA, Limit: 1, Period: 24 * time.Hour},
		{Kind: algo.TokenBucket, Limit: 1, Period: 24 * time.Hour, Burst: 1},
		{Kind: algo.FixedWindow, Limit: 1, Period: 24 * time.Hour},
		{Kind: algo.SlidingWindowLog, Limit: 1, Period: 24 * time.Hour},
	}
	for _, keys := range []int{100_000, 1_000_000} {
		dir := b.TempDir()
		n := snapshotNode(b, dir, 2*keys)
		now := n.clock()
		for i := range keys {
			h := n.owned.Hash(fmt.Sprintf("user-%d", i))
			if _, err := n.owned.Take(h, limits[i%len(limits)], 1, now, now, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("keys=%d/write", keys), func(b *testing.B) {
			for b.Loop() {
				if err := n.writeSnapshot("bench", false); err != nil {
					b.Fatal(err)
				}
			}
			st, err := os.Stat(n.persist.Path())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(keys), "ns/key")
			b.ReportMetric(float64(st.Size())/float64(keys), "B/key")
		})
		b.Run(fmt.Sprintf("keys=%d/restore", keys), func(b *testing.B) {
			var m *Node
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				m = snapshotNode(b, dir, 2*keys)
				b.StartTimer()
				m.restore()
			}
			if got := m.owned.Len(); got != keys {
				b.Fatalf("restored %d keys, want %d", got, keys)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(keys), "ns/key")
		})
		n = nil
	}
}
