package node_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// A single node owns every key. The limit is redis-cell's
// `CL.THROTTLE user123 15 30 60`: sixteen immediate checks pass, the seventeenth
// waits one emission interval (2 s) and the key is full again 32 s later.
func Example() {
	cfg := nodetest.TestConfig() // loopback, free ports; use DefaultConfig in production
	cfg.Name = "api-1"
	now := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC).UnixNano()
	cfg.Clock = func() int64 { return now } // a stopped clock makes the output exact
	n, err := node.New(cfg)
	if err != nil {
		panic(err)
	}
	defer n.Close()

	l := algo.Limit{Kind: algo.GCRA, Burst: 15, Limit: 30, Period: time.Minute}
	var d node.Decision
	for range 17 {
		if d, err = n.Allow(context.Background(), "user123", l); err != nil {
			panic(err)
		}
	}
	fmt.Println(d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.Route, d.Owner)
	fmt.Println(d.CLThrottleReply())
	// Output:
	// false 16 0 2s owner api-1
	// [1 16 0 2 32]
}
