package route

import (
	"context"
	"errors"
	"hash/fnv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/internal/breaker"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// testRing is a Ring whose every key has the same owner and backup.
type testRing struct {
	owner, backup ring.Member
	leaving       bool
	members       int
}

func (r *testRing) Hash(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

func (r *testRing) Owner(uint64) (ring.Member, bool) { return r.owner, r.owner.Name != "" }

func (r *testRing) Backup(uint64) (ring.Member, bool) { return r.backup, r.backup.Name != "" }

func (r *testRing) IsLeaving() bool { return r.leaving }

func (r *testRing) Members() int { return r.members }

// observed is one Config.Observe call.
type observed struct {
	kind    algo.Kind
	route   transport.Route
	allowed bool
}

// harness is a Router of the member "self" with its own stores, a fixed
// clock, a scripted peer pool and a record of what it reported.
type harness struct {
	*Router
	ring     atomic.Pointer[testRing]
	observed []observed
	// forward answers the pool's forwards; sent records them.
	forward func(addr string, c transport.Check) (transport.Result, error)
	sent    []transport.Check
	addrs   []string
	refused [][2]string
	asOwner int
}

var (
	self  = ring.Member{Name: "self", Addr: "10.0.0.1:7947"}
	other = ring.Member{Name: "o", Addr: "10.0.0.2:7947"}
	third = ring.Member{Name: "b", Addr: "10.0.0.3:7947"}
	fw10  = algo.Limit{Kind: algo.FixedWindow, Limit: 10, Period: time.Second}
	// t0 is the harness's clock.
	t0          = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	errRefused  = errors.New("refused by peer")
	errFromWire = transport.Result{Code: transport.CodeUnavailable, Message: "mapped"}
)

func newHarness(t *testing.T, p Policy, r *testRing) *harness {
	t.Helper()
	h := &harness{}
	h.ring.Store(r)
	hash := (&testRing{}).Hash
	h.Router = New(Config{
		Self: self.Name, Owned: store.New(100, hash, nil), Fallback: store.New(100, hash, nil), Bans: &store.Bans{},
		Clock:   func() int64 { return t0 },
		Current: func() Ring { return h.ring.Load() },
		Forward: func(_ context.Context, addr string, c transport.Check) (transport.Result, error) {
			h.sent, h.addrs = append(h.sent, c), append(h.addrs, addr)
			if h.forward == nil {
				t.Fatalf("unexpected forward of %q to %s", c.Key, addr)
			}
			return h.forward(addr, c)
		},
		Breakers: breaker.NewSet(time.Hour), Policy: p, Timeout: 3 * time.Second,
		Observe: func(k algo.Kind, r transport.Route, allowed bool) {
			h.observed = append(h.observed, observed{k, r, allowed})
		},
		Refused: func(peer, msg string) error {
			h.refused = append(h.refused, [2]string{peer, msg})
			return errRefused
		},
		AsOwner: func(_ context.Context, rs Ring, c transport.Check, hh uint64) transport.Result {
			h.asOwner++
			if rs != h.ring.Load() || hh != rs.Hash(c.Key) || c.AsBackup {
				t.Errorf("AsOwner got ring %p, hash %x of %q, AsBackup %v", rs, hh, c.Key, c.AsBackup)
			}
			return transport.Result{Code: transport.CodeOK, Route: transport.RouteOwner, Owner: self.Name}
		},
		ErrorResult: func(error) transport.Result { return errFromWire },
	})
	return h
}

func TestFallbackLocalShare(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Local, &testRing{members: 3})
	rs := h.ring.Load()
	c := transport.Check{Key: "k", Limit: fw10, Hits: 1}
	for i := range 5 {
		d, err := h.Fallback(rs, c)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 4; d.Allowed != want || d.Limit != 4 || d.Route != transport.RouteFallback || d.Owner != self.Name {
			t.Fatalf("check %d: %+v, want allowed %v under the share 4 of 10 among 3, RouteFallback by self", i+1, d, want)
		}
	}
	if len(h.observed) != 5 || h.observed[0] != (observed{algo.FixedWindow, transport.RouteFallback, true}) || h.observed[4].allowed {
		t.Fatalf("observed %+v, want 5 fallback checks, the last denied", h.observed)
	}
	// A cancel gives nothing back and is not a check.
	d, err := h.Fallback(rs, transport.Check{Key: "k", Limit: fw10, Hits: 3, CancelAt: t0})
	if err != nil || !d.Allowed || d.Route != transport.RouteFallback || d.Owner != self.Name || len(h.observed) != 5 {
		t.Fatalf("cancel: %+v, %v, %d observed, want allowed, nothing observed", d, err, len(h.observed))
	}
	if d, _ := h.Fallback(rs, c); d.Allowed {
		t.Fatalf("the cancel gave hits back to the fallback limiter: %+v", d)
	}
	// The caller's timestamp is the check's now: a later window is fresh.
	c.CreatedAt = t0 + int64(time.Hour)
	if d, _ := h.Fallback(rs, c); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("check an hour later by CreatedAt: %+v, want allowed with 3 remaining", d)
	}
	if _, err := h.Fallback(rs, transport.Check{Key: "k", Limit: algo.Limit{Kind: algo.FixedWindow}, Hits: 1}); err == nil {
		t.Fatalf("invalid limit: no error")
	}
}

func TestFallbackFailPolicies(t *testing.T) {
	t.Parallel()
	c := transport.Check{Key: "k", Limit: fw10, Hits: 1}
	open := newHarness(t, FailOpen, &testRing{members: 3})
	for range 20 {
		if d, err := open.Fallback(open.ring.Load(), c); err != nil || !d.Allowed || d.Remaining != 10 || d.Route != transport.RouteFallback {
			t.Fatalf("fail open: %+v, %v, want allowed, the full limit remaining", d, err)
		}
	}
	if open.cfg.Fallback.Len() != 0 {
		t.Fatalf("fail open took from the fallback store")
	}
	closed := newHarness(t, FailClosed, &testRing{members: 3})
	d, err := closed.Fallback(closed.ring.Load(), c)
	if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter != 3*time.Second || d.Owner != self.Name {
		t.Fatalf("fail closed: %+v, %v, want denied, RetryAfter the 3 s timeout", d, err)
	}
	if len(closed.observed) != 1 || closed.observed[0] != (observed{algo.FixedWindow, transport.RouteFallback, false}) {
		t.Fatalf("fail closed observed %+v", closed.observed)
	}
}

func TestViaBackupAnswers(t *testing.T) {
	t.Parallel()
	full := &store.FullError{}
	for _, tc := range []struct {
		name  string
		res   transport.Result
		err   error
		want  error // nil: a decision
		route transport.Route
	}{
		{name: "decided on the replica", res: transport.Result{Code: transport.CodeOK, Route: transport.RouteBackup, Owner: "b", Banned: true, Decision: algo.Decision{Allowed: true, Limit: 10}}, route: transport.RouteBackup},
		{name: "the backup reached the owner", res: transport.Result{Code: transport.CodeOK, Route: transport.RouteOwner, Owner: "o", Decision: algo.Decision{Limit: 10}}, route: transport.RouteForwarded},
		{name: "invalid", res: transport.Result{Code: transport.CodeInvalidArgument, Message: "key too long"}, want: errRefused},
		{name: "full", res: transport.Result{Code: transport.CodeResourceExhausted, Message: "holds 100 keys", Decision: algo.Decision{RetryAfter: 2 * time.Second}}, want: full},
		{name: "full without a retry", res: transport.Result{Code: transport.CodeResourceExhausted, Message: "holds 100 keys", Decision: algo.Decision{RetryAfter: -1}}, want: full},
		{name: "not the backup", res: transport.Result{Code: transport.CodeNotOwner}, want: store.ErrNotOwner},
		{name: "stopping", res: transport.Result{Code: transport.CodeUnavailable}, want: ErrNoBackup},
		{name: "unreachable", err: errors.New("connection refused"), want: ErrNoBackup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Local, &testRing{owner: other, backup: third, members: 3})
			h.forward = func(string, transport.Check) (transport.Result, error) { return tc.res, tc.err }
			c := transport.Check{Key: "k", Limit: fw10, Hits: 1, AsBackup: true}
			d, err := h.ViaBackup(context.Background(), h.ring.Load(), c, 7)
			if len(h.sent) != 1 || h.addrs[0] != third.Addr || h.sent[0] != c {
				t.Fatalf("sent %+v to %v, want the check once to the backup %s", h.sent, h.addrs, third.Addr)
			}
			switch {
			case tc.want == nil:
				want := Decision{Decision: tc.res.Decision, Route: tc.route, Owner: tc.res.Owner, Banned: tc.res.Banned}
				if err != nil || d != want {
					t.Fatalf("%+v, %v, want %+v", d, err, want)
				}
				if len(h.observed) != 1 || h.observed[0] != (observed{algo.FixedWindow, tc.route, tc.res.Decision.Allowed}) {
					t.Fatalf("observed %+v, want one check on %v", h.observed, tc.route)
				}
				return
			case tc.want == full:
				var fe *store.FullError
				if !errors.As(err, &fe) || !errors.Is(err, store.ErrTooManyKeys) {
					t.Fatalf("error %v, want a *store.FullError", err)
				}
				if fe.Who != "b (the key's backup, or the owner it asked)" || fe.Text != tc.res.Message || fe.RetryAfter != max(tc.res.Decision.RetryAfter, 0) {
					t.Fatalf("%+v, want the backup named, its text and RetryAfter (0 for none)", fe)
				}
			case !errors.Is(err, tc.want):
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if d != (Decision{}) || len(h.observed) != 0 {
				t.Fatalf("error with decision %+v, %d observed, want zero and none", d, len(h.observed))
			}
			if tc.want == errRefused && (len(h.refused) != 1 || h.refused[0] != [2]string{"b", "key too long"}) {
				t.Fatalf("refused %v, want the backup and its message", h.refused)
			}
		})
	}
}

func TestViaBackupBreakerAndContext(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Local, &testRing{owner: other, backup: third, members: 3})
	h.forward = func(string, transport.Check) (transport.Result, error) {
		return transport.Result{}, errors.New("timeout")
	}
	c := transport.Check{Key: "k", Limit: fw10, Hits: 1, AsBackup: true}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.ViaBackup(ctx, h.ring.Load(), c, 7); !errors.Is(err, context.Canceled) {
		t.Fatalf("ctx ended: %v, want its error", err)
	}
	if _, err := h.ViaBackup(context.Background(), h.ring.Load(), c, 7); !errors.Is(err, ErrNoBackup) {
		t.Fatalf("unreachable backup: %v, want ErrNoBackup", err)
	}
	if _, err := h.ViaBackup(context.Background(), h.ring.Load(), c, 7); !errors.Is(err, ErrNoBackup) || len(h.sent) != 2 {
		t.Fatalf("backup whose breaker is open: %v after %d sends, want ErrNoBackup without a third", err, len(h.sent))
	}
	none := newHarness(t, Local, &testRing{owner: other, members: 1})
	if _, err := none.ViaBackup(context.Background(), none.ring.Load(), c, 7); !errors.Is(err, ErrNoBackup) {
		t.Fatalf("no backup: %v, want ErrNoBackup", err)
	}
}

func TestViaBackupSelf(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Local, &testRing{owner: other, backup: self, members: 3})
	rs := h.ring.Load()
	c := transport.Check{Key: "k", Limit: algo.Limit{Kind: algo.FixedWindow, Limit: 1, Period: time.Second}, Hits: 1, AsBackup: true,
		Penalty: transport.Penalty{Denials: 1, Within: time.Minute, Ban: time.Minute}}
	hk := rs.Hash(c.Key)
	d, err := h.ViaBackup(context.Background(), rs, c, hk)
	if err != nil || !d.Allowed || d.Route != transport.RouteBackup || d.Owner != self.Name || d.Banned {
		t.Fatalf("first check on the replica: %+v, %v, want allowed on RouteBackup by self", d, err)
	}
	if h.cfg.Owned.Len() != 1 {
		t.Fatalf("the replica holds %d keys, want 1", h.cfg.Owned.Len())
	}
	d, _ = h.ViaBackup(context.Background(), rs, c, hk) // denied: the ban starts
	d, err = h.ViaBackup(context.Background(), rs, c, hk)
	if err != nil || d.Allowed || !d.Banned {
		t.Fatalf("check during the ban: %+v, %v, want denied by the ban", d, err)
	}
	if len(h.observed) != 3 || h.observed[0] != (observed{algo.FixedWindow, transport.RouteBackup, true}) {
		t.Fatalf("observed %+v, want 3 backup checks", h.observed)
	}
	// The current ring no longer makes this node the backup (nor the owner):
	// the replica refuses.
	h.ring.Store(&testRing{owner: other, backup: third, members: 3})
	c.Penalty = transport.Penalty{}
	if _, err := h.ViaBackup(context.Background(), rs, c, hk); !errors.Is(err, store.ErrNotOwner) || len(h.observed) != 3 {
		t.Fatalf("no longer the backup: %v, want store.ErrNotOwner, not observed", err)
	}
	// A cancel gives back nothing.
	c.CancelAt = t0
	if d, err := h.ViaBackup(context.Background(), rs, c, hk); err != nil || !d.Allowed {
		t.Fatalf("cancel: %+v, %v, want allowed", d, err)
	}
}

func TestAsBackup(t *testing.T) {
	t.Parallel()
	c := transport.Check{Key: "k", Limit: fw10, Hits: 1, AsBackup: true}
	ctx := context.Background()

	owner := newHarness(t, Local, &testRing{owner: self, backup: third, members: 3})
	if res := owner.AsBackup(ctx, c); res.Route != transport.RouteOwner || owner.asOwner != 1 {
		t.Fatalf("owner now: %+v after %d AsOwner, want the owner's answer", res, owner.asOwner)
	}
	for name, r := range map[string]*testRing{
		"not the backup": {owner: other, backup: third, members: 3},
		"leaving owner":  {owner: self, backup: third, members: 3, leaving: true},
		"leaving backup": {owner: other, backup: self, members: 3, leaving: true},
		"no owner":       {backup: self},
	} {
		h := newHarness(t, Local, r)
		if res := h.AsBackup(ctx, c); res.Code != transport.CodeNotOwner || res.Message != "not the key's backup" || h.asOwner != 0 {
			t.Fatalf("%s: %+v, want CodeNotOwner", name, res)
		}
	}

	h := newHarness(t, Local, &testRing{owner: other, backup: self, members: 3})
	h.forward = func(string, transport.Check) (transport.Result, error) {
		return transport.Result{Code: transport.CodeOK, Route: transport.RouteOwner, Owner: "o", Decision: algo.Decision{Limit: 10}}, nil
	}
	if res := h.AsBackup(ctx, c); res.Owner != "o" || res.Route != transport.RouteOwner || len(h.sent) != 1 || h.addrs[0] != other.Addr || h.sent[0].AsBackup {
		t.Fatalf("owner reachable: %+v, sent %+v to %v, want the owner's answer to the check (AsBackup cleared)", res, h.sent, h.addrs)
	}
	if h.cfg.Owned.Len() != 0 {
		t.Fatalf("the replica decided a check the owner answered")
	}
	h.forward = func(string, transport.Check) (transport.Result, error) {
		return transport.Result{}, errors.New("timeout")
	}
	res := h.AsBackup(ctx, c)
	if res.Code != transport.CodeOK || res.Route != transport.RouteBackup || res.Owner != self.Name || !res.Decision.Allowed || res.Decision.Remaining != 9 {
		t.Fatalf("owner unreachable: %+v, want decided on the replica", res)
	}
	if len(h.observed) != 0 {
		t.Fatalf("observed %+v: the sender counts the check, not its backup", h.observed)
	}
	// The replica's failure is mapped by ErrorResult: the ring changes
	// between the route and the take.
	calls := 0
	h.Router.cfg.Current = func() Ring {
		if calls++; calls > 1 {
			return &testRing{owner: other, backup: third, members: 3}
		}
		return h.ring.Load()
	}
	if res := h.AsBackup(ctx, c); res != errFromWire {
		t.Fatalf("replica refusing: %+v, want ErrorResult's", res)
	}
}

func TestAwaitChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	next, stop := make(chan struct{}), make(chan struct{})
	if AwaitChange(ctx, next, stop, 0) {
		t.Fatalf("d 0: changed")
	}
	start := time.Now()
	if AwaitChange(ctx, next, stop, 20*time.Millisecond) || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("no change: returned true or before d")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if AwaitChange(cctx, next, stop, time.Hour) {
		t.Fatalf("ctx ended: changed")
	}
	close(stop)
	if AwaitChange(ctx, next, stop, time.Hour) {
		t.Fatalf("stopped: changed")
	}
	close(next)
	if !AwaitChange(ctx, next, make(chan struct{}), time.Hour) {
		t.Fatalf("next closed: not changed")
	}
}
