package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

func testNode(t testing.TB, mod func(*Config)) *Node {
	t.Helper()
	cfg := testConfig()
	cfg.Name = "solo"
	if mod != nil {
		mod(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

var hourly = algo.Limit{Kind: algo.FixedWindow, Limit: 5, Period: time.Hour}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		field string
		mod   func(*Config)
	}{
		{"Name", func(c *Config) { c.Name = "" }},
		{"GossipPort", func(c *Config) { c.GossipPort = 70000 }},
		{"MaxKeys", func(c *Config) { c.MaxKeys = 0 }},
		{"MaxPeriod", func(c *Config) { c.MaxPeriod = 0 }},
		{"MaxLimit", func(c *Config) { c.MaxLimit = -1 }},
		{"ForwardTimeout", func(c *Config) { c.ForwardTimeout = 0 }},
		{"Gossip.ProbeTimeout", func(c *Config) { c.Gossip.ProbeTimeout = c.Gossip.ProbeInterval }},
		{"len(SecretKey)", func(c *Config) { c.SecretKey = []byte("short") }},
		{"TLSCertFile", func(c *Config) { c.TLSCertFile = "x.pem" }},
		{"OwnerUnreachable", func(c *Config) { c.OwnerUnreachable = 9 }},
	}
	for _, tc := range cases {
		cfg := testConfig()
		cfg.Name = "x"
		tc.mod(&cfg)
		_, err := New(cfg)
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: got %v, want ErrInvalidConfig", tc.field, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %q does not name the field", tc.field, err)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	for _, p := range []Policy{Local, FailOpen, FailClosed} {
		got, err := ParsePolicy(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
	}
	if _, err := ParsePolicy("open"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ParsePolicy(open): got %v, want ErrInvalidConfig", err)
	}
}

func TestSingleNodeExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	n := testNode(t, nil)
	ctx := context.Background()
	l := algo.Limit{Kind: algo.SlidingWindowLog, Limit: 100, Period: time.Hour}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				d, err := n.Allow(ctx, "k", l)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Route != RouteOwner || d.Owner != "solo" {
					t.Errorf("route %v owner %q, want owner solo", d.Route, d.Owner)
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 100 {
		t.Fatalf("admitted %d, want 100", got)
	}
}

func TestBadInputIsTypedError(t *testing.T) {
	t.Parallel()
	n := testNode(t, nil)
	ctx := context.Background()
	cases := []struct {
		name string
		key  string
		l    algo.Limit
		hits int64
		want error
	}{
		{"empty key", "", hourly, 1, ErrInvalid},
		{"long key", strings.Repeat("k", algo.DefaultMaxKeyLen+1), hourly, 1, ErrInvalid},
		{"negative hits", "k", hourly, -1, algo.ErrInvalidLimit},
		{"zero limit", "k", algo.Limit{Kind: algo.GCRA, Period: time.Second}, 1, algo.ErrInvalidLimit},
		{"no kind", "k", algo.Limit{Limit: 1, Period: time.Second}, 1, algo.ErrInvalidLimit},
	}
	for _, tc := range cases {
		_, err := n.AllowN(ctx, tc.key, tc.l, tc.hits)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if d, err := n.Allow(ctx, "k", hourly); err != nil || !d.Allowed {
		t.Fatalf("after bad input: got %+v, %v; want allowed", d, err)
	}
}

func TestCallerTimestamp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	refuse := testNode(t, nil)
	c := Check{Key: "k", Limit: hourly, Hits: 1, CreatedAt: 1_000_000_000}
	if _, err := refuse.Check(ctx, c); !errors.Is(err, ErrCallerTimestamp) || !errors.Is(err, ErrInvalid) || Classify(err) != ClassInvalid {
		t.Fatalf("got %v, want ErrCallerTimestamp", err)
	}
	accept := testNode(t, func(c *Config) { c.Name = "accept"; c.AcceptCallerTimestamps = true })
	// Two checks an hour apart by the caller's clock fall in two fixed windows.
	for i, at := range []int64{int64(time.Hour), 2 * int64(time.Hour)} {
		for j := 0; j < 5; j++ {
			c.CreatedAt = at
			r, err := accept.Check(ctx, c)
			if err != nil || !r.Decision.Allowed {
				t.Fatalf("window %d hit %d: got %+v, %v; want allowed", i, j, r, err)
			}
		}
		r, _ := accept.Check(ctx, c)
		if r.Decision.Allowed {
			t.Fatalf("window %d: 6th hit allowed, want denied", i)
		}
	}
}

func TestMaxKeysRefusesNewKeysButNeverDropsLiveOnes(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(int64(time.Hour))
	m := (&countMetrics{}).init()
	n := testNode(t, func(c *Config) {
		c.MaxKeys = 3
		c.Clock = now.Load
		c.Metrics = m
		c.IdleScanInterval = time.Hour // only the bound triggers drops here
	})
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Burst: 1, Limit: 1, Period: time.Second}
	for i := 0; i < 3; i++ {
		if _, err := n.Allow(ctx, fmt.Sprint("k", i), l); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Allow(ctx, "k3", l); !errors.Is(err, ErrTooManyKeys) {
		t.Fatalf("4th key: got %v, want ErrTooManyKeys", err)
	}
	if got := m.evictions["refused"].Load(); got != 1 {
		t.Fatalf("refused evictions %d, want 1", got)
	}
	// Existing keys keep their state: a second hit within the same second passes
	// (burst 1 = capacity 2), a third is denied.
	d, _ := n.Allow(ctx, "k0", l)
	d2, _ := n.Allow(ctx, "k0", l)
	if !d.Allowed || d2.Allowed {
		t.Fatalf("k0 lost its state: got %v then %v, want allowed then denied", d.Allowed, d2.Allowed)
	}
	// Once every key is idle (back to full), a new key may replace them.
	now.Add(int64(10 * time.Second))
	if _, err := n.Allow(ctx, "k3", l); err != nil {
		t.Fatalf("after idle: got %v, want nil", err)
	}
	if got := m.evictions["idle"].Load(); got != 3 {
		t.Fatalf("idle evictions %d, want 3", got)
	}
}

func TestCloseIsIdempotentAndStops(t *testing.T) {
	t.Parallel()
	n := testNode(t, nil)
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := n.Allow(context.Background(), "k", hourly); !errors.Is(err, ErrStopped) {
		t.Fatalf("after Close: got %v, want ErrStopped", err)
	}
}

type countMetrics struct {
	checks    atomic.Int64
	evictions map[string]*atomic.Int64
}

func (m *countMetrics) Check(algo.Kind, Route, bool)              { m.checks.Add(1) }
func (m *countMetrics) Forward(string, int, time.Duration, error) {}
func (m *countMetrics) Handoff(int, time.Duration, error)         {}
func (m *countMetrics) Eviction(reason string)                    { m.evictions[reason].Add(1) }
func (m *countMetrics) init() *countMetrics {
	m.evictions = map[string]*atomic.Int64{"idle": {}, "refused": {}}
	return m
}

// BenchmarkAllowLocal measures an owner-local check: the node owns every key.
func BenchmarkAllowLocal(b *testing.B) {
	n := testNode(b, nil)
	ctx := context.Background()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	for _, kind := range algo.Kinds() {
		l := algo.Limit{Kind: kind, Limit: 1 << 20, Period: time.Hour, Burst: 1 << 20}
		if kind == algo.SlidingWindowLog {
			l.Limit, l.Period = algo.MaxLogLimit, time.Millisecond // keep the logs short
		}
		b.Run(kind.String(), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := n.Allow(ctx, keys[i&1023], l); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// A state handed off with a caller's timestamp keeps it: the new owner neither
// drops it as idle at once (its owner clock is years later) nor merges at its own
// clock.
func TestInstallKeepsCallerTime(t *testing.T) {
	t.Parallel()
	s := store.New(10, xxhash.Sum64String, nil)
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 3, Period: time.Minute}
	then := time.Date(2015, 5, 17, 10, 5, 3, 0, time.UTC).UnixNano()
	wall := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC).UnixNano()
	var st algo.State
	for range 2 {
		if _, err := st.Take(then, 1, l); err != nil {
			t.Fatal(err)
		}
	}
	s.Install(s.Hash("k"), l, st, then, true, wall, false)
	s.DropIdle(wall + int64(time.Second))
	if got := s.Len(); got != 1 {
		t.Fatalf("keys after idle scan: got %d, want 1 (a caller-timestamped key is kept for a Period)", got)
	}
	d, err := s.Take(s.Hash("k"), l, 1, then+int64(time.Second), wall, nil)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("third hit in the 2015 window: got %+v, %v; want allowed with 0 remaining", d, err)
	}
	d, _ = s.Take(s.Hash("k"), l, 1, then+int64(2*time.Second), wall, nil)
	if d.Allowed {
		t.Fatal("fourth hit in the 2015 window allowed: the handed-off state was lost")
	}
}

func TestForwardMayWaitOnlyForOpenGatesBeforeTheirDeadline(t *testing.T) {
	t.Parallel()
	r, err := ring.New(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetMembers([]ring.Member{{Name: "a"}, {Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	snap := r.Snapshot()
	n := &Node{} // ForwardMayWait reads only the published ring state
	n.psvc = n.newPeerService()
	p := peerService{n}
	key := "gated-key"
	part := snap.PartitionOfHash(snap.Hash(key))
	other := "other-key"
	for snap.PartitionOfHash(snap.Hash(other)) == part {
		other += "x"
	}
	checks := func(keys ...string) []transport.Check {
		out := make([]transport.Check, len(keys))
		for i, k := range keys {
			out[i] = transport.Check{Key: k}
		}
		return out
	}
	withGate := func(g chan struct{}, deadline time.Time) {
		rs := &ringState{Snap: snap, Gates: make([]chan struct{}, snap.PartitionCount()), Deadline: deadline}
		rs.Gates[part] = g
		n.rs.Store(rs)
	}

	n.rs.Store(&ringState{Snap: snap})
	if p.ForwardMayWait(checks(key, other)) {
		t.Error("ForwardMayWait with no gates = true, want false")
	}
	gate := make(chan struct{})
	withGate(gate, time.Now().Add(time.Hour))
	if !p.ForwardMayWait(checks(other, key)) {
		t.Error("ForwardMayWait with a gated key = false, want true")
	}
	if p.ForwardMayWait(checks(other)) {
		t.Error("ForwardMayWait without a gated key = true, want false")
	}
	close(gate)
	if p.ForwardMayWait(checks(key)) {
		t.Error("ForwardMayWait after the gate opened = true, want false")
	}
	withGate(make(chan struct{}), time.Now().Add(-time.Second))
	if p.ForwardMayWait(checks(key)) {
		t.Error("ForwardMayWait past the handoff deadline = true, want false")
	}
}
