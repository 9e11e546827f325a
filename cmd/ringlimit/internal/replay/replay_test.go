package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/accesslog"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/node"
)

// windowModel is a minimal fixed-window limiter used as both the reference and
// the fake cluster's decider, so these tests depend only on the replay logic.
type windowModel map[string]*[2]int64 // key -> {window, count}

func (m windowModel) Take(key string, now, hits int64, l algo.Limit) (algo.Decision, error) {
	if l.Limit <= 0 || l.Period <= 0 {
		return algo.Decision{}, fmt.Errorf("%w: limit %d period %v", algo.ErrInvalidLimit, l.Limit, l.Period)
	}
	s := m[key]
	if s == nil {
		s = new([2]int64)
		m[key] = s
	}
	win := now / int64(l.Period)
	if win > s[0] {
		s[0], s[1] = win, 0
	}
	reset := time.Duration((s[0]+1)*int64(l.Period) - now)
	if s[1]+hits > l.Limit {
		return algo.Decision{Limit: l.Limit, Remaining: l.Limit - s[1], RetryAfter: reset, ResetAfter: reset}, nil
	}
	s[1] += hits
	return algo.Decision{Allowed: true, Limit: l.Limit, Remaining: l.Limit - s[1], ResetAfter: reset}, nil
}

// fakeCluster decides with one windowModel behind a lock; flip, when non-nil,
// may alter a result (to simulate a wrong cluster).
type fakeCluster struct {
	mu    sync.Mutex
	model windowModel
	calls int
	flip  func(call int, c node.Check, r *node.Decision) error
}

func (f *fakeCluster) Check(ctx context.Context, c node.Check) (node.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	d, err := f.model.Take(c.Key, c.CreatedAt, c.Hits, c.Limit)
	if err != nil {
		return node.Decision{}, err
	}
	r := node.Decision{Decision: d, Route: node.Route(1 + f.calls%2), Owner: fmt.Sprintf("node-%d", len(c.Key)%2)}
	if f.flip != nil {
		if err := f.flip(f.calls, c, &r); err != nil {
			return node.Decision{}, err
		}
	}
	return r, nil
}

// entries builds a seeded synthetic log: n requests over ips client IPs, times
// jittering backwards and forwards like the real log.
func entries(seed uint64, n, ips int) []accesslog.Entry {
	rng := rand.New(rand.NewPCG(seed, 1))
	t0 := time.Date(2015, 5, 17, 10, 5, 0, 0, time.UTC).UnixNano()
	es := make([]accesslog.Entry, n)
	for i := range es {
		t0 += int64(rng.IntN(3)) * int64(time.Second)
		es[i] = accesslog.Entry{Line: i + 1, ClientIP: fmt.Sprintf("10.0.%d.%d", rng.IntN(ips)/256, rng.IntN(ips)%256), Time: t0 - int64(rng.IntN(30))*int64(time.Second)}
	}
	return es
}

var testLimit = algo.Limit{Kind: algo.FixedWindow, Limit: 3, Period: time.Minute}

func options(targets ...target.Target) Options {
	return Options{
		Limit: testLimit, Prefix: "t:", Workers: 4, Targets: targets,
		NewReference: func() Reference { return windowModel{} },
	}
}

func TestRunExactClusterHasNoMismatches(t *testing.T) {
	t.Parallel()
	es := entries(1, 3000, 40)
	f := &fakeCluster{model: windowModel{}}
	o := options(target.Target{Name: "a", Checker: f}, target.Target{Name: "b", Checker: f}, target.Target{Name: "c", Checker: f})
	r, err := Run(context.Background(), es, o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mismatches != 0 || r.Err() != nil {
		t.Fatalf("got %d mismatches (%v), want 0", r.Mismatches, r.First)
	}
	if r.Requests != len(es) || r.Admitted+r.Denied != len(es) {
		t.Errorf("got requests=%d admitted=%d denied=%d, want %d decided", r.Requests, r.Admitted, r.Denied, len(es))
	}
	if r.Admitted != r.RefAdmitted || r.Denied == 0 || r.Admitted == 0 {
		t.Errorf("got admitted=%d reference=%d denied=%d, want equal and both outcomes present", r.Admitted, r.RefAdmitted, r.Denied)
	}
	if got := r.ByTarget["a"] + r.ByTarget["b"] + r.ByTarget["c"]; got != len(es) || r.ByTarget["c"] == 0 {
		t.Errorf("got by-target %v, want all three used, summing to %d", r.ByTarget, len(es))
	}
	if got := r.Routes[node.RouteOwner] + r.Routes[node.RouteForwarded]; got != len(es) {
		t.Errorf("got routes %v, want them to sum to %d", r.Routes, len(es))
	}
	if got := r.ByOwner["node-0"] + r.ByOwner["node-1"]; got != len(es) || len(r.ByOwner) != 2 {
		t.Errorf("got by-owner %v, want node-0 and node-1 summing to %d", r.ByOwner, len(es))
	}
	if r.Keys > 40 || r.Keys < 30 {
		t.Errorf("got %d keys, want about 40", r.Keys)
	}
	var buf bytes.Buffer
	if err := r.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^mismatches +0 `).MatchString(buf.String()) {
		t.Errorf("report lacks a zero mismatch line:\n%s", buf.String())
	}
	for _, want := range []string{"decided by node-1", "route owner", "route forwarded", "sent via b", "throughput"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestRunOrderMatters checks the replay keeps per-key order: a cluster that
// sees a key's requests in another order would disagree with the reference.
func TestRunKeepsPerKeyOrder(t *testing.T) {
	t.Parallel()
	es := entries(2, 2000, 5) // few keys: many requests per key
	for _, workers := range []int{1, 3, 64} {
		f := &fakeCluster{model: windowModel{}}
		o := options(target.Target{Name: "a", Checker: f})
		o.Workers = workers
		r, err := Run(context.Background(), es, o)
		if err != nil {
			t.Fatal(err)
		}
		if r.Mismatches != 0 {
			t.Errorf("workers=%d: got %d mismatches, want 0", workers, r.Mismatches)
		}
	}
}

func TestRunDetectsFlippedDecision(t *testing.T) {
	t.Parallel()
	es := entries(3, 1000, 20)
	f := &fakeCluster{model: windowModel{}}
	f.flip = func(call int, c node.Check, r *node.Decision) error {
		if call == 500 {
			r.Decision.Allowed = !r.Decision.Allowed
		}
		return nil
	}
	r, err := Run(context.Background(), es, options(target.Target{Name: "a", Checker: f}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Mismatches != 1 || len(r.First) != 1 {
		t.Fatalf("got %d mismatches (%d detailed), want 1", r.Mismatches, len(r.First))
	}
	if !errors.Is(r.Err(), ErrMismatch) {
		t.Errorf("got Err() %v, want ErrMismatch", r.Err())
	}
	m := r.First[0]
	if m.Got.Decision.Allowed == m.Want.Allowed || m.Err != nil || !strings.HasPrefix(m.Key, "t:10.0.") || m.Line == 0 {
		t.Errorf("got mismatch %+v, want a flipped Allowed with key and line", m)
	}
}

func TestRunCountsClusterErrorsAsMismatches(t *testing.T) {
	t.Parallel()
	es := entries(4, 600, 10)
	f := &fakeCluster{model: windowModel{}}
	f.flip = func(call int, c node.Check, r *node.Decision) error {
		switch {
		case call%100 == 0:
			return fmt.Errorf("%w: peer down", node.ErrUnavailable)
		case call%100 == 50:
			return fmt.Errorf("%w: shutting down", node.ErrStopped)
		}
		return nil
	}
	o := options(target.Target{Name: "a", Checker: f})
	o.Details = 100
	r, err := Run(context.Background(), es, o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors != 12 || r.Mismatches < 12 || r.Err() == nil {
		t.Fatalf("got errors=%d mismatches=%d err=%v, want 12 errors counted as mismatches", r.Errors, r.Mismatches, r.Err())
	}
	for i := 1; i < len(r.First); i++ {
		if r.First[i-1].Line > r.First[i].Line {
			t.Fatalf("mismatch details not in log order: line %d before %d", r.First[i-1].Line, r.First[i].Line)
		}
	}
	var buf bytes.Buffer
	r.Write(&buf)
	if !strings.Contains(buf.String(), "MISMATCH line") || !strings.Contains(buf.String(), "peer down") {
		t.Errorf("report lacks mismatch details:\n%s", buf.String())
	}
}

func TestRunDetailsAreTheFirstInLogOrder(t *testing.T) {
	t.Parallel()
	es := entries(5, 1000, 50)
	f := &fakeCluster{model: windowModel{}}
	f.flip = func(call int, c node.Check, r *node.Decision) error {
		r.Decision.Remaining++ // every decision wrong
		return nil
	}
	r, err := Run(context.Background(), es, options(target.Target{Name: "a", Checker: f}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Mismatches != len(es) {
		t.Fatalf("got %d mismatches, want %d", r.Mismatches, len(es))
	}
	for i, m := range r.First {
		if m.Line != i+1 {
			t.Errorf("detail %d: got line %d, want %d", i, m.Line, i+1)
		}
	}
	if len(r.First) != DefaultDetails {
		t.Errorf("got %d details, want %d", len(r.First), DefaultDetails)
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	t.Parallel()
	f := &fakeCluster{model: windowModel{}}
	es := entries(6, 10, 2)
	bad := options(target.Target{Name: "a", Checker: f})
	bad.Limit.Limit = 0
	if _, err := Run(context.Background(), es, bad); !errors.Is(err, algo.ErrInvalidLimit) {
		t.Errorf("invalid limit: got %v, want ErrInvalidLimit", err)
	}
	if _, err := Run(context.Background(), es, options()); err == nil {
		t.Errorf("no targets: got nil error")
	}
	neg := options(target.Target{Name: "a", Checker: f})
	neg.Hits = -1
	if _, err := Run(context.Background(), es, neg); !errors.Is(err, algo.ErrInvalidLimit) {
		t.Errorf("hits -1: got %v, want ErrInvalidLimit", err)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeCluster{model: windowModel{}}
	f.flip = func(call int, c node.Check, r *node.Decision) error {
		if call == 10 {
			cancel()
		}
		return nil
	}
	if _, err := Run(ctx, entries(7, 1000, 10), options(target.Target{Name: "a", Checker: f})); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

func TestDefaultPrefixIsFreshPerRun(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 1431857103000000001)
	if got, want := DefaultPrefix(now), "replay:1431857103000000001:"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if DefaultPrefix(now) == DefaultPrefix(now.Add(1)) {
		t.Errorf("got equal prefixes 1 ns apart")
	}
}
