package failover_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/failover"
	"github.com/ringlimit/ringlimit/node/failover/redislimit"
	"github.com/ringlimit/ringlimit/node/failover/redistest"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// record is one check as a caller saw it.
type record struct {
	start, done time.Time
	side        failover.Side
	allowed     bool
}

// TestFailoverUnderLoad drives a few thousand checks/s from 8 goroutines
// through a failover limiter on a real redis-server and a 3-node cluster, kills
// Redis (SIGKILL) and restarts it on the same port, then freezes it (SIGSTOP)
// and thaws it (SIGCONT). Callers must see no error; the breaker must open
// within the budget (plus scheduling slack) after each fault and close after
// each recovery, checks must go back to Redis, and every key must admit no more
// than one limiter would over the test plus one capacity per switch of side
// that key saw (the bound in the package doc).
func TestFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: skipping the failover load test")
	}
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := nodetest.StartCluster(ctx, 3, nodetest.TestConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	rc, err := redislimit.NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	rl, err := redislimit.New(rc, redislimit.Options{Prefix: "load:"})
	if err != nil {
		t.Fatal(err)
	}
	type change struct {
		from, to failover.State
		at       time.Time
	}
	var mu sync.Mutex
	var changes []change
	cfg := failover.Config{
		Budget: 200 * time.Millisecond, SlowCall: 180 * time.Millisecond, FailureThreshold: 3,
		CoolDown: 300 * time.Millisecond, SuccessThreshold: 2,
		OnStateChange: func(from, to failover.State, at time.Time) {
			mu.Lock()
			changes = append(changes, change{from, to, at})
			mu.Unlock()
		},
	}
	fl, err := failover.New(rl, cl.Nodes()[0], cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Warm up: scripts loaded, connections dialled, so that a slow first call
	// under -race does not open the breaker before the faults.
	if err := rl.Load(ctx); err != nil {
		t.Fatal(err)
	}
	var warm sync.WaitGroup
	for w := range 8 {
		warm.Go(func() {
			for i := range 20 {
				if _, err := rl.Take(ctx, fmt.Sprintf("warm-%d-%d", w, i), time.Now().UnixNano(), 1, algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Second}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	warm.Wait()

	// GCRA, 50 hits/s, capacity C = 5: each of the 32 keys gets about 100
	// checks/s, twice its rate, so every key is at its limit all the time.
	lim := algo.Limit{Kind: algo.GCRA, Limit: 50, Period: time.Second, Burst: 4}
	const keys, workers = 32, 8
	var errs atomic.Int64
	var recMu sync.Mutex
	recs := make([][]record, keys)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 11))
			tick := time.NewTicker(2 * time.Millisecond) // up to 500 checks/s per worker
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				k := r.IntN(keys)
				start := time.Now()
				d, err := fl.Allow(ctx, fmt.Sprintf("key-%d", k), lim)
				done := time.Now()
				if err != nil {
					if errs.Add(1) < 5 {
						t.Errorf("check: %v", err)
					}
					continue
				}
				recMu.Lock()
				recs[k] = append(recs[k], record{start, done, d.Side, d.Allowed})
				recMu.Unlock()
			}
		}()
	}
	// run lets the load run for d.
	run := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	// waitFor polls the breaker state until want, returning when it changed.
	waitFor := func(want failover.State, since time.Time, within time.Duration) time.Time {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			mu.Lock()
			for _, c := range changes {
				if c.to == want && !c.at.Before(since) {
					mu.Unlock()
					return c.at
				}
			}
			mu.Unlock()
			if time.Now().After(deadline) {
				t.Fatalf("breaker not %v within %v of %v (now %v)", want, within, since, fl.State())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	sideShare := func(from, to time.Time) (redis, all int) {
		recMu.Lock()
		defer recMu.Unlock()
		for _, rs := range recs {
			for _, r := range rs {
				if !r.start.Before(from) && r.done.Before(to) {
					all++
					if r.side == failover.SideRedis {
						redis++
					}
				}
			}
		}
		return redis, all
	}

	t0 := time.Now()
	run(time.Second)
	if r, all := sideShare(t0, time.Now()); r*2 < all {
		t.Errorf("healthy Redis decided %d of %d checks, want at least half", r, all)
	}
	maxSwitch := cfg.Budget + cfg.CoolDown + 500*time.Millisecond // the budget plus one probe, plus slack for -race on a loaded machine

	// 1. SIGKILL, then restart on the same port.
	tKill := time.Now()
	srv.Kill()
	tOpen := waitFor(failover.Open, tKill, 5*time.Second)
	if sw := tOpen.Sub(tKill); sw > maxSwitch {
		t.Errorf("SIGKILL: switched to the cluster after %v, want within %v", sw, maxSwitch)
	}
	run(1500 * time.Millisecond)
	// Before Restart: it returns once a ping is answered, and by then the
	// breaker may have probed and closed already (seen on a loaded machine).
	tUp := time.Now()
	srv.Restart()
	tClosed := waitFor(failover.Closed, tUp, 10*time.Second)
	run(time.Second)
	if r, all := sideShare(tClosed.Add(200*time.Millisecond), time.Now()); r*2 < all {
		t.Errorf("after restart Redis decided %d of %d checks, want at least half (the breaker closed)", r, all)
	}
	t.Logf("SIGKILL: open after %v, closed %v after restart", tOpen.Sub(tKill), tClosed.Sub(tUp))

	// 2. SIGSTOP, then SIGCONT.
	tStop := time.Now()
	srv.Freeze()
	tOpen2 := waitFor(failover.Open, tStop, 5*time.Second)
	if sw := tOpen2.Sub(tStop); sw > maxSwitch {
		t.Errorf("SIGSTOP: switched to the cluster after %v, want within %v", sw, maxSwitch)
	}
	run(1500 * time.Millisecond)
	tCont := time.Now()
	srv.Thaw()
	tClosed2 := waitFor(failover.Closed, tCont, 10*time.Second)
	run(time.Second)
	if r, all := sideShare(tClosed2.Add(200*time.Millisecond), time.Now()); r*2 < all {
		t.Errorf("after SIGCONT Redis decided %d of %d checks, want at least half (the breaker closed)", r, all)
	}
	t.Logf("SIGSTOP: open after %v, closed %v after SIGCONT", tOpen2.Sub(tStop), tClosed2.Sub(tCont))
	close(stop)
	wg.Wait()

	if n := errs.Load(); n != 0 {
		t.Fatalf("callers saw %d errors, want 0", n)
	}
	// Over-admission per key: a single GCRA limiter admits at most
	// C + ceil(D/T) hits over D; the failover limiter may add C per switch of
	// side the key sees. Checked over the whole test and, where it shows, over
	// 2 s around each switch (the outage's own lull, up to the budget with no
	// admission, hides part of it over longer spans).
	c := lim.Burst + 1
	tEm := int64(lim.Period) / lim.Limit
	var total, maxLat time.Duration
	var checks int
	for _, rs := range recs {
		slices.SortFunc(rs, func(a, b record) int { return a.done.Compare(b.done) })
		checks += len(rs)
		for _, r := range rs {
			lat := r.done.Sub(r.start)
			total += lat
			maxLat = max(maxLat, lat)
		}
	}
	// excess returns the largest admitted - single-limiter allowance over the
	// keys' checks that started at or after from and finished before to, and
	// that key's switches; it fails t when a key exceeds the bound.
	excess := func(name string, from, to time.Time) (worst int64, worstSw int) {
		worst = -1 << 62
		for k, rs := range recs {
			var admitted int64
			sw := 0
			var first, last time.Time
			var prev failover.Side
			for _, r := range rs {
				if r.start.Before(from) || !r.done.Before(to) {
					continue
				}
				if first.IsZero() {
					first = r.start
				}
				last = r.done
				if r.allowed {
					admitted++
				}
				if prev != 0 && r.side != prev {
					sw++
				}
				prev = r.side
			}
			if first.IsZero() {
				continue
			}
			span := int64(last.Sub(first))
			single := c + (span+tEm-1)/tEm
			if bound := single + c*int64(sw); admitted > bound {
				t.Errorf("%s: key-%d admitted %d, want <= %d (single limiter %d + C %d * %d switches)", name, k, admitted, bound, single, c, sw)
			}
			if ex := admitted - single; ex > worst {
				worst, worstSw = ex, sw
			}
		}
		t.Logf("%s: worst key admitted %+d hits beyond one limiter (C = %d), with %d switches", name, worst, c, worstSw)
		return worst, worstSw
	}
	excess("whole test", t0, time.Now())
	for _, w := range []struct {
		name string
		at   time.Time
	}{{"SIGKILL switch", tOpen}, {"restart switch", tClosed}, {"SIGSTOP switch", tOpen2}, {"SIGCONT switch", tClosed2}} {
		excess(w.name, w.at.Add(-time.Second), w.at.Add(time.Second))
	}
	st := fl.Stats()
	t.Logf("%d checks in %v (%.0f/s), mean latency %v, max %v; stats %+v",
		checks, time.Since(t0).Round(time.Millisecond), float64(checks)/time.Since(t0).Seconds(), total/time.Duration(checks), maxLat, st)
	// Plus 1 s for scheduling: a CI run of every package under -race on a
	// slow 2-core VM saw 2.71 s against 2.5 s; a check stuck without bound
	// still fails.
	if maxLat > cfg.Budget+2*time.Second+time.Second {
		t.Errorf("a check took %v, want at most the budget plus the cluster's forward timeout (and 1 s of scheduling)", maxLat)
	}
	if st.Checks[failover.SideCluster] == 0 || st.Switches[failover.HalfOpen][failover.Closed] < 2 {
		t.Errorf("stats %+v: want cluster decisions and two recoveries", st)
	}
}
