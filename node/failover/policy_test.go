package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/failover"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/node/policy"
)

// TestDescriptorsRedisFirst: a failover Limiter is a policy.Checker, so the
// policy file's descriptors are checked on Redis first; a rule with a penalty
// is decided by the cluster (the ban lives on the key's owner).
func TestDescriptorsRedisFirst(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := nodetest.StartCluster(ctx, 1, nodetest.TestConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := &fakeRedis{}
	f, err := failover.New(r, c.Nodes()[0], failover.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("p.yaml", []byte(`
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: abuser
    rate_limit:
      unit: hour
      requests_per_unit: 1
      penalty: {denials: 1, within: 1m, ban: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := policy.NewLimiter(f, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	one := func(k, v string) []policy.Descriptor {
		return []policy.Descriptor{{Entries: []policy.Entry{{Key: k, Value: v}}}}
	}
	for i, want := range []bool{true, true, false} {
		res, err := lim.Check(ctx, "api", one("user", "u1"), 1)
		if err != nil {
			t.Fatal(err)
		}
		if d := res.Decisions[0]; d.Allowed != want || d.Owner != "redis" {
			t.Fatalf("user check %d: got allowed %v owner %q, want %v decided by redis", i, d.Allowed, d.Owner, want)
		}
	}
	for i, want := range []struct{ allowed, banned bool }{{true, false}, {false, true}, {false, true}} {
		res, err := lim.Check(ctx, "api", one("abuser", "a1"), 1)
		if err != nil {
			t.Fatal(err)
		}
		if d := res.Decisions[0]; d.Allowed != want.allowed || d.Banned != want.banned || d.Owner == "redis" {
			t.Fatalf("abuser check %d: got %+v, want allowed %v banned %v decided by the cluster", i, d.Decision, want.allowed, want.banned)
		}
	}
	// A cluster that cannot decide penalties says so.
	g, err := failover.New(r, &fakeCluster{}, failover.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.AllowPenalized(ctx, "k", algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}, 1, node.Penalty{Denials: 1, Within: time.Minute, Ban: time.Hour}); !errors.Is(err, failover.ErrNoPenalties) {
		t.Errorf("penalty on a plain cluster: got %v, want ErrNoPenalties", err)
	}
}

// TestRedisTakesOnlyWhatTheNodeTakes: a limit the cluster's node refuses for
// its size (a period above MaxPeriod, a burst that takes longer than MaxPeriod
// to drain) is refused before Redis is asked, with the node's error; a normal
// burst is decided by Redis.
func TestRedisTakesOnlyWhatTheNodeTakes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := nodetest.TestConfig()
	cfg.MaxPeriod = 31 * 24 * time.Hour
	c, err := nodetest.StartCluster(ctx, 1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := &fakeRedis{}
	f, err := failover.New(r, c.Nodes()[0], failover.Config{})
	if err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	for _, l := range []algo.Limit{
		{Kind: algo.GCRA, Limit: 1, Period: 30 * day, Burst: 1},    // drains in 60 days
		{Kind: algo.TokenBucket, Limit: 1, Period: day, Burst: 40}, // refills in 40 days
		{Kind: algo.FixedWindow, Limit: 1, Period: 40 * day},       // period above MaxPeriod
	} {
		if _, err := f.Allow(ctx, "k", l); !errors.Is(err, node.ErrLimitAboveMax) || node.Classify(err) != node.ClassInvalid {
			t.Errorf("%+v: got %v, want node.ErrLimitAboveMax", l, err)
		}
	}
	if r.calls != 0 {
		t.Errorf("Redis was asked %d times for limits the node refuses, want 0", r.calls)
	}
	if d, err := f.Allow(ctx, "k", algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Minute, Burst: 100}); err != nil || d.Side != failover.SideRedis {
		t.Errorf("a normal burst: got %+v, %v; want decided by Redis", d, err)
	}
}
