package node

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// After the owner denied a key, its other members deny further checks of the
// key and limit themselves, with the owner's answer counted down, and
// forward nothing; fewer hits, a peek and another limit still go to the owner.
func TestCachedDenialAnswersWithoutForward(t *testing.T) {
	t.Parallel()
	mn, nodes := memCluster(t, 3, nil)
	a, owner := nodes[0], nodes[1]
	key := keyOwnedBy(t, a, owner)
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 3, Period: time.Hour}
	ctx := context.Background()
	for i := range 3 {
		if d, err := a.Allow(ctx, key, l); err != nil || !d.Allowed || d.Route != RouteForwarded {
			t.Fatalf("check %d: %+v, %v; want admitted by the owner", i, d, err)
		}
	}
	first, err := a.AllowN(ctx, key, l, 2)
	if err != nil || first.Allowed || first.Route != RouteForwarded || first.RetryAfter <= 0 {
		t.Fatalf("the denial: %+v, %v; want a forwarded denial with a RetryAfter", first, err)
	}
	fwd := mn.forwarded(a, owner)
	for i := range 50 {
		d, err := a.AllowN(ctx, key, l, 2+int64(i%3))
		if err != nil || d.Allowed || d.Route != RouteCachedDenial || d.Owner != owner.Name() || d.Remaining != 0 || d.Limit != 3 {
			t.Fatalf("check %d after the denial: %+v, %v; want a cached denial", i, d, err)
		}
		if d.RetryAfter <= 0 || d.RetryAfter > first.RetryAfter || d.ResetAfter < d.RetryAfter {
			t.Fatalf("check %d: RetryAfter %v ResetAfter %v; want in (0, %v], reset >= retry", i, d.RetryAfter, d.ResetAfter, first.RetryAfter)
		}
	}
	if got := mn.forwarded(a, owner) - fwd; got != 0 {
		t.Errorf("%d checks forwarded after the denial, want 0", got)
	}
	if got := a.Stats().CachedDenials; got != 50 {
		t.Errorf("Stats.CachedDenials = %d, want 50", got)
	}
	// Fewer hits than denied, a peek, another limit: the owner decides.
	for _, c := range []Check{{Key: key, Limit: l, Hits: 1}, {Key: key, Limit: l, Hits: 0}, {Key: key, Limit: algo.Limit{Kind: algo.FixedWindow, Limit: 4, Period: time.Hour}, Hits: 2}} {
		d, err := a.Check(ctx, c)
		if err != nil || d.Route != RouteForwarded {
			t.Errorf("%+v: %+v, %v; want forwarded", c, d, err)
		}
	}
}

// Three members hammer one key: exactly the limit is admitted, and the
// non-owners answer most denials themselves.
func TestCachedDenialExactAcrossMembers(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 3, nil)
	key := keyOwnedBy(t, nodes[0], nodes[1])
	l := algo.Limit{Kind: algo.TokenBucket, Limit: 25, Period: time.Hour, Burst: 25}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, n := range nodes {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 40 {
					d, err := n.Allow(context.Background(), key, l)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if got := admitted.Load(); got != 25 {
		t.Errorf("admitted %d, want exactly 25", got)
	}
	if got := nodes[0].Stats().CachedDenials + nodes[2].Stats().CachedDenials; got == 0 {
		t.Errorf("no check answered from a cached denial on the non-owners")
	}
}

// With the cache off, every check is forwarded.
func TestCachedDenialOff(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 2, func(c *Config) { c.DeniedCacheSize = 0 })
	key := keyOwnedBy(t, nodes[0], nodes[1])
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	for i := range 3 {
		d, err := nodes[0].Allow(context.Background(), key, l)
		if err != nil || d.Route != RouteForwarded || d.Allowed != (i == 0) {
			t.Fatalf("check %d: %+v, %v", i, d, err)
		}
	}
}
