package store

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/algo"
)

// TestFullStoreScansOncePerSecond: a full store scans for idle keys on the
// first new key, then refuses new keys on that scan's word (no scan) until a
// second has passed or its earliest key frees, whichever comes first; the
// error names the bound and when the earliest key frees.
func TestFullStoreScansOncePerSecond(t *testing.T) {
	t.Parallel()
	var idle atomic.Int64
	s := New(100, xxhash.Sum64String, func(reason string) {
		if reason == "idle" {
			idle.Add(1)
		}
	})
	t0 := int64(1_000) * int64(time.Hour)
	long := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	short := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: 3 * time.Second}
	take := func(key string, l algo.Limit, wall int64) error {
		_, err := s.Take(s.Hash(key), l, 1, wall, wall, nil)
		return err
	}
	for i := range 99 {
		if err := take(fmt.Sprint("long-", i), long, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := take("short", short, t0); err != nil { // idle at t0 + 3 s
		t.Fatal(err)
	}
	err := take("new-0", long, t0+int64(time.Millisecond))
	var fe *FullError
	if !errors.As(err, &fe) || !errors.Is(err, ErrTooManyKeys) || fe.RetryAfter != 3*time.Second ||
		fe.Message() != "key table full: this node holds 100 keys, its MaxKeys, none of them idle; the earliest key frees in 3s" {
		t.Fatalf("new key on a full store: got %v, want a FullError freeing in 3s", err)
	}
	scanned := s.fullScan.Load()
	for i := 1; i < 100; i++ {
		if err := take(fmt.Sprint("new-", i), long, t0+int64(i)*int64(5*time.Millisecond)); !errors.Is(err, ErrTooManyKeys) {
			t.Fatalf("new key %d: got %v, want ErrTooManyKeys", i, err)
		}
	}
	if got := s.fullScan.Load(); got != scanned {
		t.Errorf("100 new keys within a second scanned again (last scan at %d, want %d)", got, scanned)
	}
	if err := take("new-a", long, t0+int64(1100*time.Millisecond)); !errors.Is(err, ErrTooManyKeys) || s.fullScan.Load() == scanned {
		t.Errorf("a new key a second later: got %v, scan at %d; want refused after a new scan", err, s.fullScan.Load())
	}
	if err := take("new-b", long, t0+int64(3*time.Second)); err != nil || idle.Load() != 1 {
		t.Errorf("a new key once the earliest key is idle: got %v, %d idle dropped; want admitted in its place", err, idle.Load())
	}
}

// BenchmarkTakeNewKeyFull is the cost of refusing a new key on a full store
// of 100k keys, none idle: one scan a second at most, not one per check.
func BenchmarkTakeNewKeyFull(b *testing.B) {
	const n = 100_000
	s := New(n, xxhash.Sum64String, nil)
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	t0 := int64(1_000) * int64(time.Hour)
	for i := range n {
		if _, err := s.Take(uint64(i)*0x9e3779b97f4a7c15+1, l, 1, t0, t0, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Take(uint64(n+i)*0x9e3779b97f4a7c15+1, l, 1, t0, t0, nil); !errors.Is(err, ErrTooManyKeys) {
			b.Fatal(err)
		}
	}
}
