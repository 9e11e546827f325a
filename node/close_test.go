package node

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// TestWholeClusterClosesTogether is issue 13's sixth point: every member of a
// cluster stopped at once (a compose down, a deploy) is an ordinary event. Each
// Close must return nil: a leave that nobody is left to hear, or a handoff with no
// member left to take the keys, is not an error.
func TestWholeClusterClosesTogether(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := startCluster(ctx, 3, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	lim := algo.Limit{Kind: algo.GCRA, Burst: 5, Limit: 10, Period: time.Minute}
	for i := range 60 {
		if _, err := c.Nodes()[i%3].Allow(ctx, fmt.Sprintf("k%d", i), lim); err != nil {
			t.Fatal(err)
		}
	}
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, n := range c.Nodes() {
		wg.Go(func() { errs[i] = n.Close() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("node-%d Close: got %v, want nil", i, err)
		}
	}
}

// Members that leave at once (an autoscaler's scale-down, a deploy that
// replaces several instances together) each hand their keys off under a
// ring that still holds the others. A leaving member refuses a handoff (its
// own has run, so what it took would end with it), and the sender gives
// those keys to the owner under the ring without it: no state is lost.
// Before, 5 of 10 members leaving at once left keys admitted up to twice
// their limit (the fleet harness's burst); here 3 of 5 leave, and every
// exhausted key must stay denied on the two that stay.
func TestMembersLeavingAtOnceLoseNoState(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 5, nil)
	stay, leave := nodes[3:], nodes[:3]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const keys, limit = 300, 3
	l := algo.Limit{Kind: algo.SlidingWindowLog, Limit: limit, Period: time.Hour}
	for k := range keys {
		for range limit {
			d, err := stay[k%2].Allow(ctx, fmt.Sprintf("together-%d", k), l)
			if err != nil || !d.Allowed {
				t.Fatalf("exhausting key %d: %+v, %v", k, d, err)
			}
		}
	}
	var wg sync.WaitGroup
	for _, n := range leave {
		wg.Go(func() {
			if err := n.Close(); err != nil {
				t.Errorf("close %s: %v", n.Name(), err)
			}
		})
	}
	wg.Wait()
	if err := waitConverged(ctx, stay...); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for k := range keys {
		d, err := stay[k%2].Allow(ctx, fmt.Sprintf("together-%d", k), l)
		if err != nil {
			t.Fatalf("key %d after the leave: %v", k, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted > 0 {
		t.Errorf("%d of %d exhausted keys admitted again after 3 of 5 members left at once: their states were lost", admitted, keys)
	}
}
