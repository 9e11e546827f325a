package peersvc

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/peerinput"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

var (
	errStopped = errors.New("stopped")
	errSync    = errors.New("backup did not acknowledge")
	gcra       = algo.Limit{Kind: algo.GCRA, Burst: 10, Limit: 10, Period: time.Second}
	now        = int64(1_700_000_000_000_000_000)
)

// ringView is the fake node's ring state: Forward must hand back the one
// Ring returned.
type ringView struct{ id int }

// fakeNode owns every key but those in notOwned, decides every check it
// owns as allowed with 7 remaining (key "deny": denied), and records its
// calls.
type fakeNode struct {
	mu       sync.Mutex
	rs       *ringView
	notOwned map[string]bool
	decided  []string // keys given to Decide, in order
	hashed   int      // calls of Hash
	leased   []string
	backup   []string // keys given to AsBackup
	awaits   int
	awaitErr error
	sync     bool
	gating   bool
	gated    map[uint64]bool
	gatedAsk int
	accepted []transport.TransferBatch
	needFull []uint64
	strays   []uint64
	done     []string
}

func (f *fakeNode) Ring() *ringView { return f.rs }
func (f *fakeNode) Hash(rs *ringView, key string) uint64 {
	f.checkRing(rs)
	f.hashed++
	return xxhash.Sum64String(key)
}
func (f *fakeNode) SyncReplicas(rs *ringView) bool { f.checkRing(rs); return f.sync }
func (f *fakeNode) Gating(rs *ringView) bool       { return f.gating }
func (f *fakeNode) NoteStrays(hs []uint64)         { f.strays = append(f.strays, hs...) }
func (f *fakeNode) HandoffDone(from string, digest uint64, after []string, leaving bool) {
	f.done = append(f.done, from+"@"+strconv.FormatUint(digest, 10)+strings.Join(after, "+")+map[bool]string{true: " leaving"}[leaving])
}
func (f *fakeNode) AwaitReplicated(ctx context.Context) error { f.awaits++; return f.awaitErr }

func (f *fakeNode) checkRing(rs *ringView) {
	if rs != f.rs {
		panic("a ring state the node did not give")
	}
}

func (f *fakeNode) Gated(rs *ringView, h uint64) bool {
	f.gatedAsk++
	return f.gated[h]
}

func (f *fakeNode) Owns(rs *ringView, h uint64) bool {
	f.checkRing(rs)
	for k := range f.notOwned {
		if xxhash.Sum64String(k) == h {
			return false
		}
	}
	return true
}

func (f *fakeNode) Decide(ctx context.Context, rs *ringView, c *transport.Check, h uint64) transport.Result {
	f.checkRing(rs)
	if h != xxhash.Sum64String(c.Key) {
		panic("decided with another hash than the key's")
	}
	f.decided = append(f.decided, c.Key)
	return transport.Result{Code: transport.CodeOK, Decision: algo.Decision{Allowed: c.Key != "deny", Remaining: 7}, Route: transport.RouteOwner}
}

func (f *fakeNode) GrantLease(ctx context.Context, rs *ringView, c *transport.Check, h uint64, r *transport.Result) {
	f.checkRing(rs)
	f.leased = append(f.leased, c.Key)
	r.LeaseHits = c.LeaseHits
}

func (f *fakeNode) AsBackup(ctx context.Context, c transport.Check) transport.Result {
	f.mu.Lock()
	f.backup = append(f.backup, c.Key)
	f.mu.Unlock()
	return transport.Result{Code: transport.CodeOK, Route: transport.RouteBackup, Decision: algo.Decision{Allowed: true}}
}

func (f *fakeNode) AcceptReplica(b transport.TransferBatch, cb peerinput.Batch) []uint64 {
	f.accepted = append(f.accepted, b)
	return f.needFull
}

// fixture is a Service over a fakeNode, with what it counted.
type fixture struct {
	s                 *Service[*ringView]
	n                 *fakeNode
	owned             *store.Store
	bans              *store.Bans
	stopping, leaving atomic.Bool
	installMu         sync.RWMutex
	inbound           atomic.Int64
	refused           []string
	refusedStates     []string
}

func newFixture(secure, acceptTimestamps bool) *fixture {
	f := &fixture{n: &fakeNode{rs: &ringView{1}}, owned: store.New(100, xxhash.Sum64String, nil), bans: &store.Bans{}}
	f.s = New(Config[*ringView]{
		Node: f.n, Owned: f.owned, Bans: f.bans, Secure: secure, Clock: func() int64 { return now },
		Bounds:   peerinput.StateBounds{MaxPeriod: time.Hour, MaxLimit: 1000, MaxPeerClockSkew: time.Second, AcceptCallerTimestamps: acceptTimestamps},
		Stopping: &f.stopping, Leaving: &f.leaving, InstallMu: &f.installMu, Inbound: &f.inbound,
		Refused:        func(what string) { f.refused = append(f.refused, what) },
		RefusedState:   func(from, key string, err error) { f.refusedStates = append(f.refusedStates, from+":"+key) },
		TimestampError: func(ns int64) error { return errors.New("timestamp " + strconv.FormatInt(ns, 10)) },
		Stopped:        errStopped,
	})
	return f
}

func (f *fixture) forward(checks ...transport.Check) []transport.Result {
	out := make([]transport.Result, len(checks))
	f.s.Forward(context.Background(), checks, out)
	return out
}

// Each check of a batch gets its own answer, in the order of the rules:
// timestamp and maxima on every path (a backup check too), then backup
// checks to AsBackup, then the owner test, the decision and the lease.
func TestForwardAnswersEachCheck(t *testing.T) {
	t.Parallel()
	f := newFixture(false, false)
	f.n.notOwned = map[string]bool{"theirs": true}
	big := gcra
	big.Period = 2 * time.Hour
	out := f.forward(
		transport.Check{Key: "ts", Limit: gcra, Hits: 1, CreatedAt: 42, AsBackup: true},
		transport.Check{Key: "big", Limit: big, Hits: 1},
		transport.Check{Key: "as-backup", Limit: gcra, Hits: 1, AsBackup: true},
		transport.Check{Key: "theirs", Limit: gcra, Hits: 1},
		transport.Check{Key: "mine", Limit: gcra, Hits: 1},
		transport.Check{Key: "lease", Limit: gcra, Hits: 1, LeaseHits: 5},
	)
	if out[0].Code != transport.CodeInvalidArgument || out[0].Message != "timestamp 42" || !slices.Equal(f.refused, []string{"timestamp"}) {
		t.Errorf("caller timestamp: %+v, refused %v; want InvalidArgument with the node's error, counted", out[0], f.refused)
	}
	if out[1].Code != transport.CodeInvalidArgument || out[1].Message != peerinput.Within(big, time.Hour, 1000).Error() {
		t.Errorf("limit above the maxima: %+v, want InvalidArgument", out[1])
	}
	if out[2].Route != transport.RouteBackup || !slices.Equal(f.n.backup, []string{"as-backup"}) {
		t.Errorf("backup check: %+v, AsBackup got %v; want AsBackup's answer for as-backup only", out[2], f.n.backup)
	}
	if out[3].Code != transport.CodeNotOwner {
		t.Errorf("a key not owned: %+v, want NotOwner", out[3])
	}
	if out[4].Code != transport.CodeOK || out[4].Decision.Remaining != 7 || out[4].LeaseHits != 0 {
		t.Errorf("an owned key: %+v, want Decide's answer without a lease", out[4])
	}
	if out[5].LeaseHits != 5 || !slices.Equal(f.n.leased, []string{"lease"}) {
		t.Errorf("a lease ask: %+v, leased %v; want GrantLease on its Result", out[5], f.n.leased)
	}
	if !slices.Equal(f.n.decided, []string{"mine", "lease"}) || f.inbound.Load() != 1 {
		t.Errorf("decided %v, inbound %d; want [mine lease] and 1", f.n.decided, f.inbound.Load())
	}

	// Caller timestamps accepted: the check goes on its way.
	g := newFixture(false, true)
	if out := g.forward(transport.Check{Key: "ts", Limit: gcra, Hits: 1, CreatedAt: 42}); out[0].Code != transport.CodeOK || len(g.refused) != 0 {
		t.Errorf("caller timestamp accepted: %+v, refused %v", out[0], g.refused)
	}
}

// A stopping node sends no check to AsBackup and decides none: each is
// answered Unavailable.
func TestForwardStopping(t *testing.T) {
	t.Parallel()
	f := newFixture(false, false)
	f.stopping.Store(true)
	out := f.forward(transport.Check{Key: "b", Limit: gcra, Hits: 1, AsBackup: true}, transport.Check{Key: "o", Limit: gcra, Hits: 1})
	for i, r := range out {
		if r.Code != transport.CodeUnavailable || r.Message != "node is stopping" {
			t.Errorf("check %d: %+v, want Unavailable: node is stopping", i, r)
		}
	}
	if len(f.n.backup) != 0 || len(f.n.decided) != 0 {
		t.Errorf("AsBackup %v, Decide %v; want neither", f.n.backup, f.n.decided)
	}
}

// The first checks are hashed by the store before any is decided, the rest
// with the ring state's hash (the fake's Decide panics on a wrong hash);
// every check is decided.
func TestForwardLongBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(false, false)
	checks := make([]transport.Check, 3*prefetched)
	for i := range checks {
		checks[i] = transport.Check{Key: "k" + strconv.Itoa(i), Limit: gcra, Hits: 1}
	}
	out := make([]transport.Result, len(checks))
	f.s.Forward(context.Background(), checks, out)
	if len(f.n.decided) != len(checks) || f.n.hashed != len(checks)-prefetched {
		t.Fatalf("decided %d of %d, hashed %d by the ring state (want %d)", len(f.n.decided), len(checks), f.n.hashed, len(checks)-prefetched)
	}
	for i, r := range out {
		if r.Code != transport.CodeOK {
			t.Fatalf("check %d: %+v", i, r)
		}
	}
}

// When the backups did not acknowledge, the batch's admissions decided here
// are answered Unavailable; peeks, denials and backup checks keep their
// answers. A batch that admitted nothing does not wait.
func TestForwardReplicationSync(t *testing.T) {
	t.Parallel()
	f := newFixture(false, false)
	f.n.awaitErr = errSync
	f.forward(transport.Check{Key: "peek", Limit: gcra}, transport.Check{Key: "deny", Limit: gcra, Hits: 1})
	if f.n.awaits != 0 {
		t.Fatalf("a batch without admissions waited %d times", f.n.awaits)
	}
	out := f.forward(
		transport.Check{Key: "admit", Limit: gcra, Hits: 1},
		transport.Check{Key: "peek", Limit: gcra},
		transport.Check{Key: "deny", Limit: gcra, Hits: 1},
		transport.Check{Key: "backup", Limit: gcra, Hits: 1, AsBackup: true},
	)
	if f.n.awaits != 1 {
		t.Fatalf("awaited %d times, want once per batch", f.n.awaits)
	}
	if out[0].Code != transport.CodeUnavailable || out[0].Message != errSync.Error() {
		t.Errorf("unacknowledged admission: %+v, want Unavailable with the wait's error", out[0])
	}
	if out[1].Code != transport.CodeOK || out[2].Code != transport.CodeOK || out[3].Code != transport.CodeOK || out[3].Route != transport.RouteBackup {
		t.Errorf("peek %+v, denial %+v, backup %+v: want their own answers", out[1], out[2], out[3])
	}
	f.n.awaitErr = nil
	if out := f.forward(transport.Check{Key: "admit", Limit: gcra, Hits: 1}); out[0].Code != transport.CodeOK || f.n.awaits != 2 {
		t.Errorf("acknowledged admission: %+v after %d waits", out[0], f.n.awaits)
	}
}

func TestForwardMayWait(t *testing.T) {
	t.Parallel()
	f := newFixture(false, false)
	plain := []transport.Check{{Key: "a"}, {Key: "b"}}
	if f.s.ForwardMayWait(plain) || f.n.gatedAsk != 0 {
		t.Errorf("no gates: may wait, or asked Gated %d times; want false without asking", f.n.gatedAsk)
	}
	for _, c := range []transport.Check{{Key: "x", AsBackup: true}, {Key: "x", LeaseHits: 1}} {
		if !f.s.ForwardMayWait(append(slices.Clone(plain), c)) {
			t.Errorf("a batch with %+v: want true", c)
		}
	}
	f.n.gating = true
	f.n.gated = map[uint64]bool{xxhash.Sum64String("b"): true}
	if !f.s.ForwardMayWait(plain) {
		t.Error("a gated key: want true")
	}
	if f.s.ForwardMayWait([]transport.Check{{Key: "a"}}) {
		t.Error("only an open key: want false")
	}
	f.n.gating, f.n.sync = false, true
	if !f.s.ForwardMayWait(plain) {
		t.Error("ReplicationSync with backups: want true")
	}
}

// encoded returns the state of gcra after one hit at now, as a peer sends it.
func encoded(t *testing.T) []byte {
	t.Helper()
	src := store.New(10, xxhash.Sum64String, nil)
	src.Track = true
	src.Live.Store(true)
	if _, err := src.Take(1, gcra, 1, now, now, nil); err != nil {
		t.Fatal(err)
	}
	b, err := src.TakeDirty(now)[0].St.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A handoff installs the states and ban states that pass, counts those
// refused, notes the strays and records the marker.
func TestTransferInstalls(t *testing.T) {
	t.Parallel()
	f := newFixture(true, false)
	st := encoded(t)
	b := transport.TransferBatch{From: "p", Sender: "p", Done: true, RingDigest: 9, After: []string{"x", "y"},
		States:    []transport.KeyState{{Key: "ok", Limit: gcra, State: st, LastNow: now}, {Key: "caller", Limit: gcra, State: st, LastNow: now, CallerClock: true}},
		Penalties: []transport.PenaltyState{{Key: "banned", BanUntil: now + int64(time.Minute)}, {Key: "future", Denials: []int64{now + int64(time.Hour)}}},
	}
	if err := f.s.Transfer(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	ok, caller := xxhash.Sum64String("ok"), xxhash.Sum64String("caller")
	if !f.owned.Has(ok, gcra.Kind) || f.owned.Has(caller, gcra.Kind) {
		t.Errorf("installed ok %v, caller %v; want only ok", f.owned.Has(ok, gcra.Kind), f.owned.Has(caller, gcra.Kind))
	}
	if d, err := f.owned.Take(ok, gcra, 0, now, now, nil); err != nil || d.Remaining != 10 {
		t.Errorf("the installed state peeks %+v, %v; want the sender's 10 remaining (11 less its hit)", d, err)
	}
	if f.bans.BanUntil(xxhash.Sum64String("banned"), "banned", now) == 0 || f.bans.BanUntil(xxhash.Sum64String("future"), "future", now) != 0 {
		t.Error("want the ban installed and the future ban state refused")
	}
	if !slices.Equal(f.refusedStates, []string{"p:caller", "p:future"}) {
		t.Errorf("refused states %v, want [p:caller p:future]", f.refusedStates)
	}
	if !slices.Equal(f.n.strays, []uint64{ok}) || !slices.Equal(f.n.done, []string{"p@9x+y"}) {
		t.Errorf("strays %x, markers %v; want [ok] and [p@9x+y] (the marker with its After)", f.n.strays, f.n.done)
	}
	if len(f.n.accepted) != 0 {
		t.Error("a handoff went to AcceptReplica")
	}
	b.Done = false // a batch before the last: no marker
	if err := f.s.Transfer(context.Background(), b); err != nil || len(f.n.done) != 1 {
		t.Errorf("a batch without Done: %v, markers %v; want the one marker still", err, f.n.done)
	}
	b.Done, b.Leaving, b.States, b.Penalties = true, true, nil, nil // the marker of a member leaving
	if err := f.s.Transfer(context.Background(), b); err != nil || len(f.n.done) != 2 || f.n.done[1] != "p@9x+y leaving" {
		t.Errorf("a leaving member's marker: %v, markers %v; want [p@9x+y p@9x+y leaving]", err, f.n.done)
	}
}

// In secure mode a batch whose From is not its certificate's member is
// refused whole.
func TestTransferSender(t *testing.T) {
	t.Parallel()
	f := newFixture(true, false)
	b := transport.TransferBatch{From: "p", Sender: "q", States: []transport.KeyState{{Key: "ok", Limit: gcra, State: encoded(t), LastNow: now}}}
	if err := f.s.Transfer(context.Background(), b); !errors.Is(err, peerinput.ErrRefusedState) {
		t.Errorf("Transfer: %v, want ErrRefusedState", err)
	}
	b.Replica = true
	if _, err := f.s.Replicate(context.Background(), b); !errors.Is(err, peerinput.ErrRefusedState) {
		t.Errorf("Replicate: %v, want ErrRefusedState", err)
	}
	if !slices.Equal(f.refused, []string{"sender", "sender"}) || f.owned.Len() != 0 || len(f.n.accepted) != 0 {
		t.Errorf("refused %v, %d keys, %d replica batches; want two sender refusals and nothing kept", f.refused, f.owned.Len(), len(f.n.accepted))
	}
	g := newFixture(false, false) // insecure: From is all there is
	if err := g.s.Transfer(context.Background(), b); err != nil || len(g.n.accepted) != 1 {
		t.Errorf("insecure: %v, %d replica batches", err, len(g.n.accepted))
	}
}

// Replica batches go to AcceptReplica (by Transfer too), whose need_full
// Replicate returns; a leaving node still accepts them.
func TestReplicate(t *testing.T) {
	t.Parallel()
	f := newFixture(false, false)
	f.n.needFull = []uint64{3, 4}
	f.leaving.Store(true)
	b := transport.TransferBatch{From: "p", Replica: true, States: []transport.KeyState{{KeyHash: 3, Limit: gcra, State: encoded(t), LastNow: now}}}
	need, err := f.s.Replicate(context.Background(), b)
	if err != nil || !slices.Equal(need, []uint64{3, 4}) {
		t.Errorf("Replicate: %v, %v; want AcceptReplica's [3 4]", need, err)
	}
	if err := f.s.Transfer(context.Background(), b); err != nil || len(f.n.accepted) != 2 || f.owned.Len() != 0 {
		t.Errorf("Transfer of a replica batch: %v, %d accepted, %d installed; want AcceptReplica only", err, len(f.n.accepted), f.owned.Len())
	}
}

// A handoff waits for a leave under way (InstallMu) and is then refused
// with an error wrapping Stopped, installing nothing.
func TestTransferWhileLeaving(t *testing.T) {
	t.Parallel()
	f := newFixture(false, false)
	b := transport.TransferBatch{From: "p", States: []transport.KeyState{{Key: "ok", Limit: gcra, State: encoded(t), LastNow: now}}, Done: true}
	f.installMu.Lock()
	errc := make(chan error, 1)
	go func() { errc <- f.s.Transfer(context.Background(), b) }()
	select {
	case err := <-errc:
		t.Fatalf("Transfer returned %v during the leave", err)
	case <-time.After(50 * time.Millisecond):
	}
	f.leaving.Store(true)
	f.installMu.Unlock()
	if err := <-errc; !errors.Is(err, errStopped) {
		t.Errorf("Transfer after the leave: %v, want Stopped", err)
	}
	if f.owned.Len() != 0 || len(f.n.done) != 0 || len(f.n.strays) != 0 {
		t.Errorf("a refused handoff left %d keys, markers %v, strays %v", f.owned.Len(), f.n.done, f.n.strays)
	}
}
