package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// When a key's cached denial expires, the checks of it on a member do not
// all forward: while one forward of the key is in flight, the others wait
// for it (none is sent), and when it admitted the key's last hit the
// waiting checks send one more forward, whose denial answers the rest from
// the cache. Nothing is admitted beyond the one hit the key freed.
func TestCachedDenialSingleFlight(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	mn, nodes := memCluster(t, 3, func(c *Config) { c.Clock = clk.now })
	a, owner := nodes[0], nodes[1]
	key := keyOwnedBy(t, a, owner)
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second, Burst: 0} // one hit per 100 ms
	ctx := context.Background()
	if d, err := a.Allow(ctx, key, l); err != nil || !d.Allowed {
		t.Fatalf("first check: %+v, %v", d, err)
	}
	den, err := a.Allow(ctx, key, l)
	if err != nil || den.Allowed || den.Route != RouteForwarded {
		t.Fatalf("second check: %+v, %v; want a forwarded denial", den, err)
	}
	clk.add(den.RetryAfter) // the cached denial expires, the key holds one hit
	// The test leads the flight of the expired denial itself.
	c := Check{Key: key, Limit: l, Hits: 1}
	h := a.rs.Load().Snap.Hash(key)
	var out Decision
	ok, flight := a.answerDenied(ctx, &c, h, clk.now(), true, &out)
	if ok || flight == nil {
		t.Fatalf("after the expiry: answered %v, flight %v; want a flight to lead", ok, flight)
	}
	const waiters = 8
	fwd := mn.forwarded(a, owner)
	var wg sync.WaitGroup
	results := make([]Decision, waiters)
	for i := range waiters {
		wg.Go(func() {
			d, err := a.Allow(ctx, key, l)
			if err != nil {
				t.Error(err)
			}
			results[i] = d
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.denied.Waiting() < waiters {
		if time.Now().After(deadline) {
			t.Fatalf("%d checks wait for the flight, want %d", a.denied.Waiting(), waiters)
		}
		time.Sleep(time.Millisecond) // poll
	}
	if got := mn.forwarded(a, owner) - fwd; got != 0 {
		t.Fatalf("%d checks forwarded while the flight was in flight, want 0", got)
	}
	res, err := a.peers.Forward(ctx, owner.GRPCAddr(), c.wire(false))
	if err != nil || !res.Decision.Allowed || res.Decision.Remaining != 0 {
		t.Fatalf("the flight: %+v, %v; want the key's last hit admitted", res, err)
	}
	a.landDenied(h, flight, &res, err)
	wg.Wait()
	var routes [RouteLease + 1]int
	for _, d := range results {
		if d.Allowed {
			t.Errorf("a waiting check was admitted: %+v (the key had one hit, which the flight took)", d)
		}
		routes[d.Route]++
	}
	if routes[RouteForwarded] != 1 || routes[RouteCachedDenial] != waiters-1 {
		t.Errorf("routes %v: want 1 forwarded and %d cached denials", routes, waiters-1)
	}
	if got := mn.forwarded(a, owner) - fwd; got != 2 {
		t.Errorf("%d forwards for %d checks, want 2 (the flight and one more)", got, waiters+1)
	}
}
