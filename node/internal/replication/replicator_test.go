package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/peerinput"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// fakePeers records the replication sends and answers each with the
// need_full and error its answer func returns.
type fakePeers struct {
	mu     sync.Mutex
	sent   []transport.TransferBatch
	addrs  []string
	answer func(b transport.TransferBatch) ([]uint64, error)
}

func (p *fakePeers) send(_ context.Context, addr string, b transport.TransferBatch) ([]uint64, error) {
	p.mu.Lock()
	b.States = slices.Clone(b.States) // the replicator reuses its slices
	p.sent, p.addrs = append(p.sent, b), append(p.addrs, addr)
	answer := p.answer
	p.mu.Unlock()
	if answer == nil {
		return nil, nil
	}
	return answer(b)
}

// fakeBreakers refuses the members in refusing and records Fail.
type fakeBreakers struct {
	refusing map[string]bool
	failed   []string
}

func (f *fakeBreakers) Refusing(peer string) bool { return f.refusing[peer] }
func (f *fakeBreakers) Fail(peer string)          { f.failed = append(f.failed, peer) }

// fixture is a Replicator for member "a" of a three-member ring with a
// tracking store, and the keys checked on it by owner.
type fixture struct {
	r       *Replicator
	snap    *ring.Snapshot
	backups *Backups
	owned   *store.Store
	peers   *fakePeers
	brk     *fakeBreakers
	stop    chan struct{}
	// mine are the hashes of keys "a" owns, others of keys it does not.
	mine, others []uint64
}

var (
	errStopped = errors.New("stopped")
	gcra       = algo.Limit{Kind: algo.GCRA, Burst: 10, Limit: 10, Period: time.Second}
	now        = int64(1_700_000_000_000_000_000)
)

func newFixture(t *testing.T, sync bool) *fixture {
	t.Helper()
	snap, err := ring.SnapshotOf(ring.DefaultConfig(), []ring.Member{{Name: "a", Addr: "addr-a"}, {Name: "b", Addr: "addr-b"}, {Name: "c", Addr: "addr-c"}})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{snap: snap, peers: &fakePeers{}, brk: &fakeBreakers{refusing: map[string]bool{}}, stop: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.backups = NewBackups(f.snap, true, log)
	if f.backups == nil {
		t.Fatal("no backups for three members")
	}
	f.owned = store.New(1000, f.snap.Hash, nil)
	f.owned.Track = true
	f.owned.Live.Store(true)
	f.r = New(Config{
		Self: "a", Owned: f.owned, Bans: &store.Bans{Track: true}, Breakers: f.brk,
		Ring:  func() (*ring.Snapshot, *Backups, bool) { return f.snap, f.backups, false },
		Send:  f.peers.send,
		Clock: func() int64 { return now },
		Lag:   time.Second, Timeout: time.Second, Sync: sync, // a refused send backs off 2 s
		Log:  log,
		Stop: f.stop, Stopped: errStopped,
	})
	for i := 0; len(f.mine) < 6 || len(f.others) < 2; i++ {
		key := fmt.Sprintf("key-%d", i)
		h := f.snap.Hash(key)
		if _, err := f.owned.Take(h, gcra, 1, now, now, nil); err != nil {
			t.Fatal(err)
		}
		if o, _ := f.snap.OwnerOfHash(h); o.Name == "a" {
			f.mine = append(f.mine, h)
		} else {
			f.others = append(f.others, h)
		}
	}
	return f
}

// sentHashes returns the key hashes of every state sent so far, sorted.
func (f *fixture) sentHashes() []uint64 {
	var hs []uint64
	for _, b := range f.peers.sent {
		for _, ks := range b.States {
			hs = append(hs, ks.KeyHash)
		}
	}
	slices.Sort(hs)
	return hs
}

// dirty returns the hashes the store lists as changed, sorted.
func (f *fixture) dirty() []uint64 {
	var hs []uint64
	for _, m := range f.owned.TakeDirty(now) {
		hs = append(hs, m.H)
	}
	slices.Sort(hs)
	return hs
}

// TestReplicateSendsOwnedStatesToTheirBackups: a send carries every changed
// state of a key this member owns, once, to that key's backup, as a replica
// batch from this member; the states of keys it does not own (replicas) go
// nowhere, and nothing is left listed as changed.
func TestReplicateSendsOwnedStatesToTheirBackups(t *testing.T) {
	f := newFixture(t, false)
	f.r.replicate()
	want := slices.Sorted(slices.Values(f.mine))
	if got := f.sentHashes(); !slices.Equal(got, want) {
		t.Fatalf("sent %x, want the owned keys %x", got, want)
	}
	for i, b := range f.peers.sent {
		if b.From != "a" || !b.Replica {
			t.Fatalf("batch %d: From %q Replica %v, want a replica batch from a", i, b.From, b.Replica)
		}
		for _, ks := range b.States {
			bk, ok := f.backups.OfHash(ks.KeyHash)
			if !ok || bk.Addr != f.peers.addrs[i] {
				t.Fatalf("key %#x sent to %s, its backup is %+v", ks.KeyHash, f.peers.addrs[i], bk)
			}
		}
	}
	if got := f.dirty(); len(got) != 0 {
		t.Fatalf("after a successful send %x are listed as changed, want none", got)
	}
	f.r.replicate()
	if got := f.sentHashes(); len(got) != len(want) {
		t.Fatalf("a second send with nothing changed sent %d states in all, want still %d", len(got), len(want))
	}
}

// TestFailedSendListsItsStatesAgain: a send the backup refuses lists all its
// states as changed again, and backs off: the next send goes to that backup
// only after the wait, its states still listed. A send that finds the backup
// unreachable fails its breaker instead, and also lists its states again.
func TestFailedSendListsItsStatesAgain(t *testing.T) {
	f := newFixture(t, false)
	f.peers.answer = func(transport.TransferBatch) ([]uint64, error) { return nil, errors.New("refused") }
	f.r.replicate()
	want := f.sentHashes()
	if len(want) == 0 {
		t.Fatal("nothing sent")
	}
	if got := f.dirty(); !slices.Equal(got, want) {
		t.Fatalf("after a failed send %x are listed as changed, want all sent %x", got, want)
	}
	for _, h := range want {
		f.owned.SendWhole(h, gcra.Kind) // as the failed send left them
	}
	calls := len(f.peers.sent)
	f.r.replicate() // within the backoff: no call, the states kept
	if len(f.peers.sent) != calls {
		t.Fatalf("%d calls during the backoff, want none", len(f.peers.sent)-calls)
	}
	if got := f.dirty(); !slices.Equal(got, want) {
		t.Fatalf("during the backoff %x are listed as changed, want %x", got, want)
	}
	if len(f.brk.failed) != 0 {
		t.Fatalf("a refused send failed the breakers of %v", f.brk.failed)
	}

	g := newFixture(t, false)
	g.peers.answer = func(transport.TransferBatch) ([]uint64, error) {
		return nil, fmt.Errorf("dial: %w", transport.ErrUnavailable)
	}
	g.r.replicate()
	if got, want := g.dirty(), g.sentHashes(); len(want) == 0 || !slices.Equal(got, want) {
		t.Fatalf("after an unreachable backup %x are listed as changed, want all sent %x", got, want)
	}
	if len(g.brk.failed) != len(g.peers.sent) {
		t.Fatalf("breakers failed %v for %d unreachable sends", g.brk.failed, len(g.peers.sent))
	}
}

// TestRefusingBreakerKeepsTheStates: no call goes to a backup whose breaker
// refuses; its states stay listed as changed.
func TestRefusingBreakerKeepsTheStates(t *testing.T) {
	f := newFixture(t, false)
	f.brk.refusing["b"], f.brk.refusing["c"] = true, true
	f.r.replicate()
	if len(f.peers.sent) != 0 {
		t.Fatalf("%d calls to refusing backups, want none", len(f.peers.sent))
	}
	if got, want := f.dirty(), slices.Sorted(slices.Values(f.mine)); !slices.Equal(got, want) {
		t.Fatalf("listed as changed %x, want the owned keys %x", got, want)
	}
}

// TestNeedFullResendsOnlyTheAsked: the states a backup asks for again
// (need_full) are listed as changed, and only those.
func TestNeedFullResendsOnlyTheAsked(t *testing.T) {
	f := newFixture(t, false)
	asked := map[uint64]bool{}
	f.peers.answer = func(b transport.TransferBatch) ([]uint64, error) {
		h := b.States[0].KeyHash
		asked[h] = true
		return []uint64{h}, nil
	}
	f.r.replicate()
	if len(f.peers.sent) == 0 || len(f.sentHashes()) <= len(asked) {
		t.Fatalf("sent %d states in %d batches: too few to tell asked from not", len(f.sentHashes()), len(f.peers.sent))
	}
	want := slices.Sorted(func(yield func(uint64) bool) {
		for h := range asked {
			yield(h)
		}
	})
	if got := f.dirty(); !slices.Equal(got, want) {
		t.Fatalf("listed as changed %x, want only the asked %x", got, want)
	}
}

// TestAwait: without Sync Await returns at once; with it, it returns when a
// send that began after the call finished (the loop kicked), Stopped when
// the node stops first, or the context's error.
func TestAwait(t *testing.T) {
	if err := newFixture(t, false).r.Await(context.Background()); err != nil {
		t.Fatalf("async Await: %v", err)
	}
	f := newFixture(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := f.r.Await(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Await with no loop: %v, want the context's deadline", err)
	}
	done := make(chan struct{})
	f.r.cfg.Lag = time.Hour // only the kick makes a send
	go f.r.Loop(func() { close(done) })
	if err := f.r.Await(context.Background()); err != nil {
		t.Fatalf("Await with the loop: %v", err)
	}
	if got, want := f.sentHashes(), slices.Sorted(slices.Values(f.mine)); !slices.Equal(got, want) {
		t.Fatalf("Await returned with %x sent, want %x", got, want)
	}
	close(f.stop)
	<-done
	if err := f.r.Await(context.Background()); err != errStopped {
		t.Fatalf("Await after Stop: %v, want Stopped", err)
	}
}

// TestAccept: a replica is installed only when this member is the key's
// backup and the sender its owner; one the rings disagree on, a state of a
// key this member owns included, is asked for again, not installed (an
// owned key's state is left as it was).
func TestAccept(t *testing.T) {
	f := newFixture(t, false)
	// The key each case uses: backed up here and owned by the sender; owned here.
	var backedUp uint64
	var owner string
	for i := 0; backedUp == 0; i++ {
		h := f.snap.Hash(fmt.Sprintf("replica-%d", i))
		if bk, _ := f.backups.OfHash(h); bk.Name == "a" {
			o, _ := f.snap.OwnerOfHash(h)
			backedUp, owner = h, o.Name
		}
	}
	other := map[string]string{"b": "c", "c": "b"}[owner]
	src := store.New(10, f.snap.Hash, nil) // a state of gcra after one hit, as the owner sends it
	src.Track = true
	src.Live.Store(true)
	if _, err := src.Take(1, gcra, 1, now, now, nil); err != nil {
		t.Fatal(err)
	}
	st := src.TakeDirty(now)[0].St
	accept := func(from string, h uint64) []uint64 {
		b := transport.TransferBatch{From: from, Replica: true, States: []transport.KeyState{{KeyHash: h, Limit: gcra, LastNow: now}}}
		return f.r.Accept(b, peerinput.Batch{States: []algo.State{st}, Wall: now})
	}
	if need := accept(other, backedUp); !slices.Equal(need, []uint64{backedUp}) || f.owned.Has(backedUp, gcra.Kind) {
		t.Fatalf("from a non-owner: need_full %x, installed %v; want asked again, not installed", need, f.owned.Has(backedUp, gcra.Kind))
	}
	if need := accept(owner, backedUp); len(need) != 0 || !f.owned.Has(backedUp, gcra.Kind) {
		t.Fatalf("from the owner: need_full %x, installed %v; want installed", need, f.owned.Has(backedUp, gcra.Kind))
	}
	mine := f.mine[0]
	peek := func() algo.Decision {
		t.Helper()
		d, err := f.owned.Take(mine, gcra, 0, now, now, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for range 3 { // a state that differs from the replica's (one hit)
		if _, err := f.owned.Take(mine, gcra, 1, now, now, nil); err != nil {
			t.Fatal(err)
		}
	}
	before := peek()
	if need := accept("b", mine); !slices.Equal(need, []uint64{mine}) {
		t.Fatalf("a key owned here: need_full %x; want asked again", need)
	}
	if after := peek(); after != before {
		t.Fatalf("a key owned here: its state went from %+v to %+v; want the replica not installed", before, after)
	}
}
