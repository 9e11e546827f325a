package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/transport"
)

// TestWaitOverGRPC: the public Limiter's max_wait_ns waits for the slot on
// the server and answers allowed with the wait in delay_ns; a client's
// cancel_at_unix_ns gives nothing back (only nodes cancel): the check is
// taken as an ordinary one.
func TestWaitOverGRPC(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3, nil)
	c, err := transport.Dial(serveLimiter(t, nodes[1]), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second} // one per 100 ms
	var delayed int
	for i := range 3 {
		r, err := c.Check(ctx, transport.Check{Key: "wait", Limit: l, Hits: 1, MaxWait: 2 * time.Second})
		if err != nil || !r.Decision.Allowed {
			t.Fatalf("check %d: got %+v, %v, want allowed after a wait", i, r, err)
		}
		if r.Delay > 0 {
			delayed++
		}
	}
	if delayed < 2 {
		t.Errorf("got %d answers with a delay, want 2 (the 2nd and 3rd waited for their slots)", delayed)
	}
	hourly := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	if r, err := c.Check(ctx, transport.Check{Key: "hourly", Limit: hourly, Hits: 1}); err != nil || !r.Decision.Allowed {
		t.Fatalf("first hourly check: got %+v, %v, want allowed", r, err)
	}
	for i := range 2 {
		r, err := c.Check(ctx, transport.Check{Key: "hourly", Limit: hourly, Hits: 1, CancelAt: time.Now().Add(time.Minute).UnixNano()})
		if err != nil || r.Decision.Allowed {
			t.Errorf("a client's cancel %d: got %+v, %v, want an ordinary check, denied", i, r, err)
		}
	}
}
