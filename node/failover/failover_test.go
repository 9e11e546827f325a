package failover_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/failover"
	"github.com/ringlimit/ringlimit/node/failover/redislimit"
)

var errDown = errors.New("fake: redis down")

// fakeRedis answers from an algo.State per key, or fails, or waits.
type fakeRedis struct {
	mu    sync.Mutex
	fail  bool
	delay time.Duration
	calls int
	st    map[string]*algo.State
}

func (f *fakeRedis) set(fail bool, delay time.Duration) {
	f.mu.Lock()
	f.fail, f.delay = fail, delay
	f.mu.Unlock()
}

func (f *fakeRedis) Take(ctx context.Context, key string, now, hits int64, l algo.Limit) (algo.Decision, error) {
	f.mu.Lock()
	f.calls++
	fail, delay := f.fail, f.delay
	f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return algo.Decision{}, err
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return algo.Decision{}, ctx.Err()
		}
	}
	if fail {
		return algo.Decision{}, errDown
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.st == nil {
		f.st = map[string]*algo.State{}
	}
	s := f.st[key]
	if s == nil {
		s = new(algo.State)
		f.st[key] = s
	}
	return s.Take(now, hits, l)
}

// fakeCluster decides everything with Remaining 42, RouteOwner.
type fakeCluster struct {
	mu    sync.Mutex
	calls int
}

func (c *fakeCluster) AllowN(ctx context.Context, key string, l algo.Limit, hits int64) (node.Decision, error) {
	if err := ctx.Err(); err != nil {
		return node.Decision{}, err
	}
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return node.Decision{Decision: algo.Decision{Allowed: true, Limit: 100, Remaining: 42}, Route: node.RouteOwner, Owner: "n0"}, nil
}

var lim = algo.Limit{Kind: algo.GCRA, Limit: 1000, Period: time.Hour, Burst: 99}

// waitState polls l until it is in want or the deadline passes, driving checks
// so that a cool-down can end in a probe.
func waitState(t *testing.T, l *failover.Limiter, want failover.State) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("state %v, want %v", l.State(), want)
		}
		if _, err := l.Allow(context.Background(), "poll", lim); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBreakerCycle(t *testing.T) {
	t.Parallel()
	r, c := &fakeRedis{}, &fakeCluster{}
	var mu sync.Mutex
	var seen []string
	l, err := failover.New(r, c, failover.Config{
		Budget: 50 * time.Millisecond, FailureThreshold: 3, CoolDown: 20 * time.Millisecond, SuccessThreshold: 2,
		OnStateChange: func(from, to failover.State, _ time.Time) {
			mu.Lock()
			seen = append(seen, from.String()+">"+to.String())
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := l.Allow(ctx, "k", lim)
	if err != nil || d.Side != failover.SideRedis || !d.Allowed || d.Remaining != 99 {
		t.Fatalf("healthy: got %+v %v, want redis, allowed, Remaining 99", d, err)
	}
	r.set(true, 0)
	for i := range 3 {
		d, err := l.Allow(ctx, "k", lim)
		if err != nil || d.Side != failover.SideCluster || d.Remaining != 42 || d.Owner != "n0" {
			t.Fatalf("failure %d: got %+v %v, want decided by the cluster", i, d, err)
		}
	}
	if l.State() != failover.Open {
		t.Fatalf("after 3 failures: state %v, want open", l.State())
	}
	calls := r.calls
	d, _ = l.Allow(ctx, "k", lim)
	if d.Side != failover.SideCluster || r.calls != calls {
		t.Fatalf("open: got side %v and %d Redis calls, want cluster and none", d.Side, r.calls-calls)
	}
	// A failed probe opens again.
	deadline := time.Now().Add(5 * time.Second)
	for l.Stats().Switches[failover.HalfOpen][failover.Open] == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no failed probe after the cool-down")
		}
		if d, err := l.Allow(ctx, "k", lim); err != nil || d.Side != failover.SideCluster {
			t.Fatalf("probing a failing redis: got %+v %v, want the cluster's decision", d, err)
		}
		time.Sleep(time.Millisecond)
	}
	r.set(false, 0)
	waitState(t, l, failover.Closed)
	d, _ = l.Allow(ctx, "k", lim)
	if d.Side != failover.SideRedis || d.Remaining != 98 {
		t.Fatalf("closed again: got %+v, want redis with the key's Redis state (Remaining 98)", d)
	}
	st := l.Stats()
	if st.Switches[failover.Closed][failover.Open] != 1 || st.Switches[failover.HalfOpen][failover.Closed] != 1 || st.Switches[failover.Open][failover.HalfOpen] < 1 {
		t.Errorf("switches %v, want closed>open 1, open>half_open >= 1, half_open>closed 1", st.Switches)
	}
	if st.TimeIn[failover.Open] <= 0 || st.Checks[failover.SideRedis] < 2 || st.Checks[failover.SideCluster] < 4 {
		t.Errorf("stats %+v", st)
	}
	mu.Lock()
	if seen[0] != "closed>open" || seen[len(seen)-1] != "half_open>closed" {
		t.Errorf("transitions %v", seen)
	}
	mu.Unlock()
	m := `
# HELP ringlimit_failover_state Circuit breaker state: 1 for the current one.
# TYPE ringlimit_failover_state gauge
ringlimit_failover_state{state="closed"} 1
ringlimit_failover_state{state="half_open"} 0
ringlimit_failover_state{state="open"} 0
`
	if err := testutil.CollectAndCompare(l.Collector(), strings.NewReader(m), "ringlimit_failover_state"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(l.Collector()); n != 3+3+6+2+1 {
		t.Errorf("%d metrics, want 15", n)
	}
}

// A Redis that hangs: each check waits at most the budget, then the cluster
// decides; slow answers count as failures.
func TestBudgetAndSlowCalls(t *testing.T) {
	t.Parallel()
	r, c := &fakeRedis{}, &fakeCluster{}
	l, err := failover.New(r, c, failover.Config{Budget: 30 * time.Millisecond, SlowCall: 10 * time.Millisecond, FailureThreshold: 2, CoolDown: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r.set(false, time.Hour)
	start := time.Now()
	d, err := l.Allow(context.Background(), "k", lim)
	if err != nil || d.Side != failover.SideCluster {
		t.Fatalf("hung redis: got %+v %v, want the cluster's decision", d, err)
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("returned after %v, before the budget", took)
	}
	// Slow but within budget: decided by Redis, counted as a failure.
	r.set(false, 15*time.Millisecond)
	d, err = l.Allow(context.Background(), "k", lim)
	if err != nil || d.Side != failover.SideRedis {
		t.Fatalf("slow redis: got %+v %v, want redis", d, err)
	}
	if l.State() != failover.Open {
		t.Errorf("after a timeout and a slow call: state %v, want open", l.State())
	}
}

func TestInputAndCallerErrors(t *testing.T) {
	t.Parallel()
	r, c := &fakeRedis{}, &fakeCluster{}
	l, err := failover.New(r, c, failover.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(context.Background(), "k", algo.Limit{Kind: algo.GCRA}, 1); !errors.Is(err, algo.ErrInvalidLimit) {
		t.Errorf("invalid limit: got %v, want algo.ErrInvalidLimit", err)
	}
	for _, key := range []string{"", strings.Repeat("x", node.DefaultConfig().MaxKeyLen+1)} {
		if _, err := l.Allow(context.Background(), key, lim); !errors.Is(err, failover.ErrInvalidKey) || node.Classify(err) != node.ClassInvalid {
			t.Errorf("key of %d bytes: got %v, want ErrInvalidKey", len(key), err)
		}
	}
	if _, err := l.AllowN(context.Background(), "k", lim, -1); !errors.Is(err, algo.ErrInvalidLimit) {
		t.Errorf("hits -1: got %v, want algo.ErrInvalidLimit", err)
	}
	// algo accepts it, Redis cannot compute it exactly: the cluster decides.
	big := algo.Limit{Kind: algo.FixedWindow, Limit: 1, Period: redislimit.MaxDuration + 1}
	if d, err := l.Allow(context.Background(), "k", big); err != nil || d.Side != failover.SideCluster || r.calls != 0 {
		t.Errorf("unsupported by redis: got %+v %v after %d Redis calls, want the cluster", d, err, r.calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Allow(ctx, "k", lim); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled caller: got %v, want context.Canceled", err)
	}
	if l.State() != failover.Closed {
		t.Errorf("a caller's cancel counted against Redis: state %v", l.State())
	}
	for _, cfg := range []failover.Config{{Budget: -1}, {Budget: time.Millisecond, SlowCall: time.Second}, {FailureThreshold: -1}} {
		if _, err := failover.New(r, c, cfg); !errors.Is(err, failover.ErrInvalidConfig) {
			t.Errorf("%+v: got %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := failover.New(nil, c, failover.Config{}); !errors.Is(err, failover.ErrInvalidConfig) {
		t.Errorf("nil primary: got %v", err)
	}
}

// algoCluster decides on algo states of its own, like a cluster that has not
// seen Redis's hits.
type algoCluster struct {
	mu sync.Mutex
	st map[string]*algo.State
}

func (c *algoCluster) AllowN(ctx context.Context, key string, l algo.Limit, hits int64) (node.Decision, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st == nil {
		c.st = map[string]*algo.State{}
	}
	s := c.st[key]
	if s == nil {
		s = new(algo.State)
		c.st[key] = s
	}
	d, err := s.Take(time.Now().UnixNano(), hits, l)
	return node.Decision{Decision: d, Route: node.RouteOwner, Owner: "n0"}, err
}

// TestOverAdmissionPerSwitch measures the bound of the package doc where it is
// reached: a key at its limit on Redis switches to a cluster that never saw it
// and gets exactly one more capacity C; back on a Redis that kept its state it
// gets nothing more, and on a Redis that lost it (restart without persistence)
// one more C again.
func TestOverAdmissionPerSwitch(t *testing.T) {
	t.Parallel()
	slow := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 4} // C = 5, no refill during the test
	const c = 5
	r, cl := &fakeRedis{}, &algoCluster{}
	l, err := failover.New(r, cl, failover.Config{FailureThreshold: 1, CoolDown: time.Millisecond, SuccessThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// admit sends n checks and counts the admitted ones by side.
	admit := func(n int) (redis, cluster int) {
		for range n {
			d, err := l.Allow(ctx, "k", slow)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed && d.Side == failover.SideRedis {
				redis++
			}
			if d.Allowed && d.Side == failover.SideCluster {
				cluster++
			}
		}
		return redis, cluster
	}
	if rd, _ := admit(20); rd != c {
		t.Fatalf("on Redis: admitted %d, want C = %d", rd, c)
	}
	r.set(true, 0) // Redis fails: switch 1
	if _, cd := admit(20); cd != c {
		t.Errorf("switch to the cluster: admitted %d more, want exactly C = %d (the bound, reached)", cd, c)
	}
	r.set(false, 0) // Redis back with its state: switch 2
	waitState(t, l, failover.Closed)
	if rd, cd := admit(20); rd+cd != 0 {
		t.Errorf("back on a Redis that kept its state: admitted %d more, want 0", rd+cd)
	}
	r.set(true, 0) // switch 3: the cluster still holds its state
	if _, cd := admit(20); cd != 0 {
		t.Errorf("to a cluster that kept its state: admitted %d more, want 0", cd)
	}
	r.mu.Lock()
	r.st = nil // Redis restarted empty
	r.fail = false
	r.mu.Unlock()
	waitState(t, l, failover.Closed)
	if rd, _ := admit(20); rd != c {
		t.Errorf("back on a Redis that lost its state: admitted %d more, want C = %d", rd, c)
	}
}
