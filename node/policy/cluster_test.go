package policy

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// TestPenaltyBanHoldsAcrossNodesAndHandoff: a key banned through one node is
// banned through every node, and stays banned after its owner leaves and the
// key (with its ban) moves to another member.
func TestPenaltyBanHoldsAcrossNodesAndHandoff(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := nodetest.StartCluster(ctx, 3, nodetest.TestConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := mustParse(t, `
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 2
      name: per_user
      penalty: {denials: 2, within: 1m, ban: 1h}
`)
	lims := make([]*Limiter, 3)
	for i, n := range c.Nodes() {
		if lims[i], err = NewLimiter(n, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	desc := one("user", "mallory")
	check := func(i int) Decision {
		t.Helper()
		res, err := lims[i].Check(ctx, "api", desc, 1)
		if err != nil {
			t.Fatalf("via node %d: %v", i, err)
		}
		return res.Decisions[0]
	}
	// Two admitted, one denied by the limit, the next denial bans: spread over
	// the nodes, so the count is the owner's.
	for i, want := range []struct{ allowed, banned bool }{{true, false}, {true, false}, {false, false}, {false, true}} {
		d := check(i % 3)
		if d.Allowed != want.allowed || d.Banned != want.banned {
			t.Fatalf("check %d via node %d: got allowed=%v banned=%v, want %v/%v", i, i%3, d.Allowed, d.Banned, want.allowed, want.banned)
		}
	}
	for i := range lims {
		d := check(i)
		if d.Allowed || !d.Banned || d.RetryAfter <= 59*time.Minute || d.Rule.ID() != "per_user" {
			t.Fatalf("via node %d: got %+v, want banned by per_user for about 1h", i, d)
		}
	}
	key := Key("api", desc[0].Entries)
	owner, ok := c.Nodes()[0].Owner(key)
	if !ok {
		t.Fatal("no owner")
	}
	var rest []int
	for i, n := range c.Nodes() {
		if n.Name() == owner.Name {
			if err := n.Close(); err != nil {
				t.Fatalf("closing the owner %s: %v", owner.Name, err)
			}
		} else {
			rest = append(rest, i)
		}
	}
	if err := nodetest.WaitConverged(ctx, c.Nodes()[rest[0]], c.Nodes()[rest[1]]); err != nil {
		t.Fatal(err)
	}
	newOwner, ok := c.Nodes()[rest[0]].Owner(key)
	if !ok {
		t.Fatal("no new owner")
	}
	for _, i := range rest {
		d := check(i)
		if c.Nodes()[i].Name() != newOwner.Name && d.Route == node.RouteCachedDenial {
			// A member that cached the ban before the owner left may answer
			// it itself: the ban still holds, and the answer says how long.
			if d.Allowed || !d.Banned || d.RetryAfter <= 59*time.Minute {
				t.Fatalf("after the owner %s left, via node %d: got %+v, want the cached ban of about 1h", owner.Name, i, d)
			}
			continue
		}
		if d.Allowed || !d.Banned || d.Owner == owner.Name || d.Route == node.RouteFallback || d.RetryAfter <= 59*time.Minute {
			t.Fatalf("after the owner %s left, via node %d: got %+v, want banned by the new owner for about 1h", owner.Name, i, d)
		}
	}
}
