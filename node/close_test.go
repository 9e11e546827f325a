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
