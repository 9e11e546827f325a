package persist

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/snapshot"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// A written snapshot restores every state and ban state it holds, in
// batches, and the counters say so; after a final write, later writes are
// skipped.
func TestWriteRestore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := Open(filepath.Join(dir, "state"), "node/1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := filepath.Base(p.Path()), "ringlimit-node_1.snapshot"; got != want {
		t.Errorf("file: got %s, want %s", got, want)
	}
	const now = int64(1_000_000_000_000)
	owned := store.New(100, xxhash.Sum64String, nil)
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Minute, Burst: 10}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := owned.Take(xxhash.Sum64String(k), l, 1, now, now, func() bool { return true }); err != nil {
			t.Fatal(err)
		}
	}
	bans := &store.Bans{}
	rule := store.BanRule{Denials: 1, Within: time.Minute, Ban: time.Hour}
	deny := func(int64) (algo.Decision, error) { return algo.Decision{Allowed: false}, nil }
	if _, _, err := bans.Take(xxhash.Sum64String("banned"), "banned", rule, 1, now, deny); err != nil {
		t.Fatal(err)
	}
	h := snapshot.Header{Cluster: "c1", Node: "node/1"}
	if err := p.Write("test", true, h, now, owned, bans, quiet); err != nil {
		t.Fatal(err)
	}
	if err := p.Write("after final", false, h, now, store.New(1, xxhash.Sum64String, nil), &store.Bans{}, quiet); err != nil {
		t.Fatal(err)
	}
	var states, pens int
	p.Restore("c1", quiet, func(string) bool { return true }, func(b transport.TransferBatch) (int, int) {
		states, pens = states+len(b.States), pens+len(b.Penalties)
		return len(b.States) + len(b.Penalties), 0
	})
	if states != 3 || pens != 1 {
		t.Errorf("restored %d states and %d ban states, want 3 and 1 (the write after the final one skipped)", states, pens)
	}
	if w, f, r := p.Counts(); w != 1 || f != 0 || r != 4 {
		t.Errorf("counts: got writes %d, failures %d, restored %d, want 1, 0, 4", w, f, r)
	}
}

// A snapshot of another cluster is refused whole, counted as a failure and
// moved aside; a missing file restores nothing and fails nothing.
func TestRestoreRefused(t *testing.T) {
	t.Parallel()
	p, err := Open(t.TempDir(), "n")
	if err != nil {
		t.Fatal(err)
	}
	install := func(b transport.TransferBatch) (int, int) {
		t.Errorf("installed a batch of %d states, want none", len(b.States))
		return 0, 0
	}
	p.Restore("c1", quiet, nil, install)
	if _, f, _ := p.Counts(); f != 0 {
		t.Errorf("failures after a missing file: got %d, want 0", f)
	}
	owned := store.New(10, xxhash.Sum64String, nil)
	if _, err := owned.Take(1, algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Minute}, 1, 1e12, 1e12, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	if err := p.Write("test", false, snapshot.Header{Cluster: "other"}, 1e12, owned, &store.Bans{}, quiet); err != nil {
		t.Fatal(err)
	}
	p.Restore("c1", quiet, nil, install)
	if _, f, _ := p.Counts(); f != 1 {
		t.Errorf("failures after another cluster's file: got %d, want 1", f)
	}
	if _, err := os.Stat(p.Path() + ".refused"); err != nil {
		t.Errorf("refused file not moved aside: %v", err)
	}
	if _, err := os.Stat(p.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused file still in place: %v", err)
	}
}
