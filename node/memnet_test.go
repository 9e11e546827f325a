package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/nodetest/memnet"
)

// memNet is the in-memory peer network of node's tests (nodetest/memnet)
// with its links named by *Node: a forward or a handoff calls the owner's
// peerService directly, with the same per-item codes and errors as the gRPC
// transport. A link can be cut, which makes the owner unreachable from one
// node while gossip still sees it alive (a one-way partition of the data
// path), and healed again.
type memNet struct{ *memnet.Net }

func newMemNet() *memNet { return &memNet{memnet.New()} }

// attach is Config.peerNet's: it puts n on the network under its name and
// gRPC address.
func (m *memNet) attach(n *Node) peerClient {
	return m.Attach(memnet.Member{Name: n.Name(), Addr: n.GRPCAddr(), Handler: peerService{n}, Stopped: n.stop,
		MaxKeyLen: n.cfg.MaxKeyLen, Hash: n.owned.Hash})
}

// setAskAgain makes the next n replication sends from one node to another
// that carry a ban state come back whole in need_full, unapplied.
func (m *memNet) setAskAgain(from, to *Node, n int) { m.SetAskAgain(from.Name(), to.GRPCAddr(), n) }

// setCut cuts (or heals) the link from one node to another.
func (m *memNet) setCut(from, to *Node, cut bool) { m.SetCut(from.Name(), to.GRPCAddr(), cut) }

// misroute makes the calls from one node to another arrive at a third, as
// when a member's address was taken over by another member.
func (m *memNet) misroute(from, to, at *Node) { m.Misroute(from.Name(), to.GRPCAddr(), at.GRPCAddr()) }

// delivered returns how many calls one node made to another's address.
func (m *memNet) delivered(from, to *Node) int64 { return m.Delivered(from.Name(), to.GRPCAddr()) }

// forwarded returns the checks one node forwarded to another that were
// delivered: delivered without the handoffs and replication sends.
func (m *memNet) forwarded(from, to *Node) int64 { return m.Forwarded(from.Name(), to.GRPCAddr()) }

// memCluster starts size nodes on one memNet, converged.
func memCluster(t testing.TB, size int, mod func(*Config)) (*memNet, []*Node) {
	t.Helper()
	mn, nodes, _ := memClusterBase(t, size, mod)
	return mn, nodes
}

// memClusterBase is memCluster that also returns the base Config of the
// cluster: a node that joins later must be made from it (it carries the
// cluster's test CA and gossip key).
func memClusterBase(t testing.TB, size int, mod func(*Config)) (*memNet, []*Node, Config) {
	t.Helper()
	mn := newMemNet()
	cfg := testConfig()
	cfg.peerNet = mn
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := startCluster(ctx, size, cfg)
	if err != nil {
		t.Fatalf("startCluster(%d): %v", size, err)
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes() {
			n.Abort()
		}
	})
	return mn, c.Nodes(), cfg
}

// keyOwnedBy returns a key that owner owns in n's ring.
func keyOwnedBy(t *testing.T, n, owner *Node) string {
	t.Helper()
	for i := range 10_000 {
		k := fmt.Sprintf("key-%d", i)
		if m, ok := n.Owner(k); ok && m.Name == owner.Name() {
			return k
		}
	}
	t.Fatalf("no key owned by %s", owner.Name())
	return ""
}

// Three nodes on the in-memory transport, 48 goroutines spread over them, 60
// keys at capacity 40 that cannot refill: every key admits exactly 40, and the
// forwards really went between the nodes.
func TestMemNetClusterIsExact(t *testing.T) {
	t.Parallel()
	mn, nodes := memCluster(t, 3, nil)
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 40, Period: 24 * time.Hour}
	const keys, callers, tries = 60, 48, 60
	var admitted [keys]atomic.Int64
	var forwarded atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			n := nodes[g%len(nodes)]
			for i := range keys * tries / callers * 2 {
				k := (g + i) % keys
				d, err := n.Allow(context.Background(), fmt.Sprintf("exact-%d", k), l)
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
				if d.Route == RouteForwarded {
					forwarded.Add(1)
				} else if d.Route == RouteCachedDenial && d.Allowed || d.Route != RouteOwner && d.Route != RouteCachedDenial {
					errs <- fmt.Errorf("key %d decided by %v (allowed %v), want owner, forwarded or a cached denial", k, d.Route, d.Allowed)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range admitted {
		if got := admitted[k].Load(); got != l.Limit {
			t.Errorf("key exact-%d: admitted %d, want %d", k, got, l.Limit)
		}
	}
	if forwarded.Load() == 0 {
		t.Error("no check was forwarded")
	}
	if mn.delivered(nodes[0], nodes[1])+mn.delivered(nodes[0], nodes[2]) == 0 {
		t.Error("node-0 delivered no forward through the in-memory transport")
	}
}

// With the data path to an owner cut while gossip still sees it, every policy
// answers without error through the fallback, and once the link heals the
// owner decides again, with the state it had before the cut.
func TestOwnerUnreachablePolicies(t *testing.T) {
	t.Parallel()
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 3, Period: 24 * time.Hour}
	for _, tc := range []struct {
		policy      Policy
		wantAllowed []bool // 5 checks during the cut
	}{
		// Local: this node's share of the limit, ceil(3/2) = 2 of 2 members.
		{Local, []bool{true, true, false, false, false}},
		{FailOpen, []bool{true, true, true, true, true}},
		{FailClosed, []bool{false, false, false, false, false}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			t.Parallel()
			mn, nodes := memCluster(t, 2, func(c *Config) {
				c.OwnerUnreachable = tc.policy
				c.Replication = ReplicationOff // no backup: the policy decides
			})
			a, b := nodes[0], nodes[1]
			key := keyOwnedBy(t, a, b)
			ctx := context.Background()

			d, err := a.Allow(ctx, key, l)
			if err != nil || d.Route != RouteForwarded || !d.Allowed || d.Owner != b.Name() {
				t.Fatalf("before the cut: got %+v, %v; want allowed, forwarded to %s", d, err, b.Name())
			}

			mn.setCut(a, b, true)
			for i, want := range tc.wantAllowed {
				d, err := a.Allow(ctx, key, l)
				if err != nil {
					t.Fatalf("check %d during the cut: %v", i, err)
				}
				if d.Route != RouteFallback || d.Allowed != want {
					t.Errorf("check %d during the cut: got route %v allowed %v, want fallback, %v", i, d.Route, d.Allowed, want)
				}
			}

			mn.setCut(a, b, false)
			d, err = a.Allow(ctx, key, l)
			if err != nil || d.Route != RouteForwarded {
				t.Fatalf("after healing: got %+v, %v; want forwarded", d, err)
			}
			if !d.Allowed || d.Remaining != 1 {
				t.Errorf("after healing: got allowed %v remaining %d, want the owner's second hit: allowed, 1 remaining", d.Allowed, d.Remaining)
			}
		})
	}
}

// A check that reaches a member which does not own its key is answered "not
// owner", never forwarded on; the sender routes again while its ring may still
// change and then lets the policy decide, without an error.
func TestNotOwnerIsNeverReforwarded(t *testing.T) {
	t.Parallel()
	const forwardTimeout = 300 * time.Millisecond
	mn, nodes := memCluster(t, 3, func(c *Config) { c.ForwardTimeout = forwardTimeout })
	a, b, c := nodes[0], nodes[1], nodes[2]
	key := keyOwnedBy(t, a, b)
	mn.misroute(a, b, c)
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 3, Period: 24 * time.Hour}
	start := time.Now()
	d, err := a.Allow(context.Background(), key, l)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Allow: %v", err)
	}
	if d.Route != RouteFallback || !d.Allowed {
		t.Errorf("got route %v allowed %v, want the Local fallback to admit", d.Route, d.Allowed)
	}
	if took < forwardTimeout {
		t.Errorf("fell back after %v, want after retrying for ForwardTimeout %v", took, forwardTimeout)
	}
	if n := mn.delivered(a, b); n < 2 {
		t.Errorf("%s sent %d forwards for the key, want the first and at least one retry", a.Name(), n)
	}
	// Forwards only: every member's handoff marker for its last ring goes to
	// every other member, and c's may be sent while this runs.
	if n := mn.forwarded(c, b) + mn.forwarded(c, a); n != 0 {
		t.Errorf("%s forwarded %d checks on, want 0: a receiver never re-forwards", c.Name(), n)
	}
	if got := c.Stats().Keys; got != 0 {
		t.Errorf("%s holds %d keys, want 0: it does not own the key", c.Name(), got)
	}
}

// A fourth node joins three that hold states of every algorithm: the keys it
// takes over (and any that move between the others) arrive with their state,
// carried by key hash alone, and every key still has its 3 admitted hits.
func TestMemNetJoinHandsOffEveryAlgorithm(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(int64(20_000*24*time.Hour) + int64(12*time.Hour))
	_, nodes, base := memClusterBase(t, 3, func(c *Config) { c.Clock = clock.Load })
	ctx := context.Background()
	const keys = 200
	limit := func(k algo.Kind) algo.Limit {
		return algo.Limit{Kind: k, Limit: 10, Period: 24 * time.Hour, Burst: 9}
	}
	for _, kind := range algo.Kinds() {
		for k := range keys {
			if _, err := nodes[k%3].AllowN(ctx, fmt.Sprint("join:", k), limit(kind), 3); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := base // the cluster's CA, gossip key, memory network and clock
	cfg.Name = "node-3"
	cfg.Join = []string{nodes[0].GossipAddr()}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Abort() })
	all := append(nodes, d)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := waitConverged(wctx, all...); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for k := range keys {
		key := fmt.Sprint("join:", k)
		if m, _ := d.Owner(key); m.Name == "node-3" {
			moved++
		}
		for _, kind := range algo.Kinds() {
			res, err := all[k%4].AllowN(ctx, key, limit(kind), 0) // peek
			if err != nil {
				t.Fatal(err)
			}
			want := int64(10 - 3) // windows: Limit 10; GCRA: capacity Burst+1 = 10
			if kind == algo.TokenBucket {
				want = 9 - 3 // capacity Burst
			}
			if res.Remaining != want {
				t.Fatalf("%v key %s (owner %s): remaining %d after the join, want %d", kind, key, res.Owner, res.Remaining, want)
			}
		}
	}
	if moved == 0 {
		t.Fatal("node-3 took over no key: the test proves nothing")
	}
	if got, want := d.OwnedKeys(), moved*len(algo.Kinds()); got != want {
		t.Fatalf("node-3 holds %d states, want %d", got, want)
	}
}
