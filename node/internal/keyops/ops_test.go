package keyops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

var (
	errIncomplete  = errors.New("incomplete")
	errUnavailable = errors.New("unavailable")
	errRefused     = errors.New("refused")
)

// ringView is the fake node's ring state.
type ringView struct {
	snap    *ring.Snapshot
	leaving bool
}

// fakeNode is member "a" of a ring of a, b and c; answer answers its sends
// (nil: CodeOK).
type fakeNode struct {
	rs     *ringView
	mu     sync.Mutex
	sent   []string // "addr op key"
	answer func(addr string, r transport.KeyOpRequest) (transport.KeyOpResult, error)
	awaits int
	resets []string
}

func (f *fakeNode) Ring() *ringView                              { return f.rs }
func (f *fakeNode) Snapshot(rs *ringView) (*ring.Snapshot, bool) { return rs.snap, rs.leaving }
func (f *fakeNode) AwaitRingChange(_ context.Context, _ *ringView, d time.Duration) {
	f.awaits++
	time.Sleep(d)
}

func (f *fakeNode) Send(ctx context.Context, addr string, r transport.KeyOpRequest) (transport.KeyOpResult, error) {
	f.mu.Lock()
	f.sent = append(f.sent, fmt.Sprintf("%s %v %s", addr, r.Op, r.Key))
	f.mu.Unlock()
	if f.answer == nil {
		return transport.KeyOpResult{}, nil
	}
	return f.answer(addr, r)
}

func (f *fakeNode) LeaseReset(h uint64, k algo.Kind, all, complete bool) {
	f.resets = append(f.resets, fmt.Sprintf("%v all=%v complete=%v", k, all, complete))
}

type opsFixture struct {
	o        *Ops[*ringView]
	n        *fakeNode
	owned    *store.Store
	stopping atomic.Bool
	// mine is a key "a" owns, theirs one "b" owns.
	mine, theirs string
}

func newOps(t *testing.T) *opsFixture {
	t.Helper()
	snap, err := ring.SnapshotOf(ring.DefaultConfig(), []ring.Member{{Name: "a", Addr: "addr-a"}, {Name: "b", Addr: "addr-b"}, {Name: "c", Addr: "addr-c"}})
	if err != nil {
		t.Fatal(err)
	}
	f := &opsFixture{n: &fakeNode{rs: &ringView{snap: snap}}, owned: store.New(10, snap.Hash, nil)}
	for i := 0; f.mine == "" || f.theirs == ""; i++ {
		k := fmt.Sprint("key-", i)
		switch m, _ := snap.Owner(k); m.Name {
		case "a":
			f.mine = k
		case "b":
			f.theirs = k
		}
	}
	f.o = NewOps(Config[*ringView]{
		Node: f.n, Self: "a", Stores: Stores{Owned: f.owned, Bans: &store.Bans{}}, Clock: func() int64 { return 1e12 },
		Stopping: &f.stopping, Timeout: 50 * time.Millisecond, Retry: time.Millisecond,
		Incomplete: errIncomplete, Unavailable: errUnavailable,
		RefusedByPeer: func(peer, msg string) error { return fmt.Errorf("%w by %s: %s", errRefused, peer, msg) },
	})
	return f
}

var reset = func(key string) transport.KeyOpRequest {
	return transport.KeyOpRequest{Op: transport.KeyOpReset, Key: key, Limit: algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second}}
}

// An operation on a key another member owns goes to it, and its answer is
// mapped: CodeOK (with an incomplete invalidation said in Message),
// CodeInvalidArgument, an unreachable owner.
func TestRouteToOwner(t *testing.T) {
	t.Parallel()
	f := newOps(t)
	f.n.answer = func(addr string, r transport.KeyOpRequest) (transport.KeyOpResult, error) {
		return transport.KeyOpResult{Found: true}, nil
	}
	res, owner, err := f.o.Route(context.Background(), reset(f.theirs))
	if err != nil || owner != "b" || !res.Found || !slices.Equal(f.n.sent, []string{fmt.Sprintf("addr-b %v %s", transport.KeyOpReset, f.theirs)}) {
		t.Fatalf("Route: %+v, %q, %v, sent %v; want the owner b's answer", res, owner, err, f.n.sent)
	}
	f.n.answer = func(string, transport.KeyOpRequest) (transport.KeyOpResult, error) {
		return transport.KeyOpResult{Found: true, Message: "c missed it"}, nil
	}
	if res, _, err := f.o.Route(context.Background(), reset(f.theirs)); !errors.Is(err, errIncomplete) || !strings.Contains(err.Error(), "c missed it") || !res.Found {
		t.Errorf("an incomplete invalidation: %+v, %v; want the result and an error wrapping Incomplete", res, err)
	}
	f.n.answer = func(string, transport.KeyOpRequest) (transport.KeyOpResult, error) {
		return transport.KeyOpResult{Code: transport.CodeInvalidArgument, Message: "bad"}, nil
	}
	if _, _, err := f.o.Route(context.Background(), reset(f.theirs)); !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "by b: bad") {
		t.Errorf("refused: %v, want RefusedByPeer's error", err)
	}
	f.n.answer = func(string, transport.KeyOpRequest) (transport.KeyOpResult, error) {
		return transport.KeyOpResult{}, errors.New("dial")
	}
	if _, _, err := f.o.Route(context.Background(), reset(f.theirs)); !errors.Is(err, errUnavailable) {
		t.Errorf("unreachable: %v, want Unavailable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := f.o.Route(ctx, reset(f.theirs)); !errors.Is(err, context.Canceled) || errors.Is(err, errUnavailable) {
		t.Errorf("canceled: %v, want ctx's error alone", err)
	}
}

// An owner that keeps answering another code is asked again after each
// ring change wait, until Timeout.
func TestRouteRetries(t *testing.T) {
	t.Parallel()
	f := newOps(t)
	f.n.answer = func(string, transport.KeyOpRequest) (transport.KeyOpResult, error) {
		return transport.KeyOpResult{Code: transport.CodeNotOwner, Message: "not the owner"}, nil
	}
	t0 := time.Now()
	_, owner, err := f.o.Route(context.Background(), reset(f.theirs))
	if !errors.Is(err, errUnavailable) || owner != "b" || time.Since(t0) < 50*time.Millisecond {
		t.Fatalf("Route: %q, %v after %v; want Unavailable after Timeout", owner, err, time.Since(t0))
	}
	if len(f.n.sent) < 2 || f.n.awaits != len(f.n.sent)-1 {
		t.Errorf("%d sends, %d ring waits; want a wait between sends", len(f.n.sent), f.n.awaits)
	}
}

// The owner resets here and sends the invalidation to every other member;
// one that does not acknowledge makes the reset incomplete (which KeyOp
// says in Message), and the leases hear of it.
func TestHereResetBroadcasts(t *testing.T) {
	t.Parallel()
	f := newOps(t)
	res, owner, err := f.o.Route(context.Background(), reset(f.mine))
	if err != nil || owner != "a" || res.Found {
		t.Fatalf("Route of an own key: %+v, %q, %v; want a's answer, nothing found", res, owner, err)
	}
	slices.Sort(f.n.sent)
	want := []string{fmt.Sprintf("addr-b %v %s", transport.KeyOpInvalidate, f.mine), fmt.Sprintf("addr-c %v %s", transport.KeyOpInvalidate, f.mine)}
	if !slices.Equal(f.n.sent, want) || !slices.Equal(f.n.resets, []string{"gcra all=false complete=true"}) {
		t.Fatalf("sent %v, lease resets %v; want %v and one complete GCRA reset", f.n.sent, f.n.resets, want)
	}
	f.n.answer = func(addr string, r transport.KeyOpRequest) (transport.KeyOpResult, error) {
		if addr == "addr-c" {
			return transport.KeyOpResult{}, errors.New("dial")
		}
		return transport.KeyOpResult{}, nil
	}
	if _, err := f.o.Here(context.Background(), reset(f.mine)); !errors.Is(err, errIncomplete) || !strings.Contains(err.Error(), "[c]") {
		t.Errorf("Here with c down: %v, want Incomplete naming c", err)
	}
	res, err = f.o.KeyOp(context.Background(), reset(f.mine))
	if err != nil || res.Code != transport.CodeOK || !strings.Contains(res.Message, "[c]") {
		t.Errorf("KeyOp with c down: %+v, %v; want CodeOK with the incomplete invalidation in Message", res, err)
	}
	if len(f.n.resets) != 3 || f.n.resets[2] != "gcra all=false complete=false" {
		t.Errorf("lease resets %v, want the last incomplete", f.n.resets)
	}
}

// A stopping node answers Unavailable; a leaving one owns nothing; neither
// sends an invalidation.
func TestHereStoppingLeaving(t *testing.T) {
	t.Parallel()
	f := newOps(t)
	f.stopping.Store(true)
	if res, err := f.o.Here(context.Background(), reset(f.mine)); err != nil || res.Code != transport.CodeUnavailable {
		t.Errorf("stopping: %+v, %v; want Unavailable", res, err)
	}
	f.stopping.Store(false)
	f.n.rs = &ringView{snap: f.n.rs.snap, leaving: true}
	if res, err := f.o.Here(context.Background(), reset(f.mine)); err != nil || res.Code != transport.CodeNotOwner {
		t.Errorf("leaving: %+v, %v; want NotOwner", res, err)
	}
	if len(f.n.sent) != 0 || len(f.n.resets) != 0 {
		t.Errorf("sent %v, lease resets %v; want none", f.n.sent, f.n.resets)
	}
}
