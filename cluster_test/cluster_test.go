// Package cluster_test runs whole ringlimit clusters: in-process nodes on
// loopback (this file) and docker-compose clusters of the daemon (docker_*.go).
package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/transport"
)

// startCluster starts size nodes with TestConfig (modified by mod) and waits
// until they agree on the ring.
func startCluster(t testing.TB, size int, mod func(*node.Config)) []*node.Node {
	t.Helper()
	_, nodes := startClusterBase(t, size, mod)
	return nodes
}

// startClusterBase is startCluster that also returns the base config the nodes
// were made from: a node that joins later must be made from it (it carries the
// cluster's test CA and gossip key).
func startClusterBase(t testing.TB, size int, mod func(*node.Config)) (node.Config, []*node.Node) {
	t.Helper()
	base := nodetest.TestConfig()
	if mod != nil {
		mod(&base)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := nodetest.StartCluster(ctx, size, base)
	if err != nil {
		t.Fatalf("StartCluster(%d): %v", size, err)
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes() {
			n.Abort()
		}
	})
	return base, c.Nodes()
}

func waitConverged(t testing.TB, within time.Duration, nodes ...*node.Node) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := nodetest.WaitConverged(ctx, nodes...); err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	return time.Since(start)
}

// noRefill are limits of capacity c that cannot refill during a test: the window
// algorithms use a period far longer than the test with a clock started in the
// middle of a window, the bucket algorithms refill one hit per day (or, for
// a capacity above 300, per 300 days / c: a bucket must drain within the
// node's MaxPeriod, 366 days by default, or the check is refused).
func noRefill(c int64) []algo.Limit {
	const day = 24 * time.Hour
	per := min(day, 300*day/time.Duration(c+1))
	return []algo.Limit{
		{Kind: algo.SlidingWindowLog, Limit: c, Period: day},
		{Kind: algo.SlidingWindowCounter, Limit: c, Period: day},
		{Kind: algo.FixedWindow, Limit: c, Period: day},
		{Kind: algo.GCRA, Burst: c - 1, Limit: 1, Period: per},
		{Kind: algo.TokenBucket, Burst: c, Limit: 1, Period: per},
		{Kind: algo.BucketedSlidingWindow, Limit: c, Period: day},
	}
}

// midWindowClock is a clock that starts at the middle of a day-long window and
// advances at the wall-clock rate, shared by every node of a test.
func midWindowClock() func() int64 {
	start := time.Now()
	base := int64(20_000*24*time.Hour) + int64(12*time.Hour)
	return func() int64 { return base + int64(time.Since(start)) }
}

// hammer runs callers goroutines that check every key of every limit through the
// nodes that pick returns until each key has been denied deny times in a row, and
// returns the admitted count per limit and key.
func hammer(t *testing.T, callers, keys int, limits []algo.Limit, pick func(i int) *node.Node) [][]int64 {
	t.Helper()
	admitted := make([][]int64, len(limits))
	for i := range admitted {
		admitted[i] = make([]int64, keys)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var fallbacks atomic.Int64
	defer func() {
		if f := fallbacks.Load(); f > 0 {
			t.Logf("%d checks were decided by the fallback policy", f)
		}
	}()
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 42))
			local := make([][]int64, len(limits))
			for i := range local {
				local[i] = make([]int64, keys)
			}
			done := make([]bool, len(limits)*keys)
			left := len(done)
			for step := 0; left > 0; step++ {
				j := r.IntN(len(done))
				if done[j] {
					continue
				}
				li, k := j/keys, j%keys
				n := pick(g + step)
				d, err := n.Allow(context.Background(), fmt.Sprintf("k%d", k), limits[li])
				if errors.Is(err, node.ErrStopped) {
					continue // the node is being replaced: use another
				}
				if err != nil {
					t.Errorf("check: %v", err)
					return
				}
				if d.Route == node.RouteFallback {
					fallbacks.Add(1)
				}
				if d.Allowed {
					local[li][k]++
				} else if d.Route != node.RouteFallback {
					done[j] = true
					left--
				}
			}
			mu.Lock()
			for i := range local {
				for k := range local[i] {
					admitted[i][k] += local[i][k]
				}
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return admitted
}

// Test 1: every key admits exactly its limit, whatever node each check enters by.
// 100 keys per algorithm at capacity 1000, 64 callers spread over the nodes:
// 500,000 admissions and about 32,000 denials per cluster size (15 s for 3
// nodes, 36 s for 5 under -race on two shared cores).
func TestExactness(t *testing.T) {
	t.Parallel()
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprintf("nodes=%d", size), func(t *testing.T) {
			clock := midWindowClock()
			nodes := startCluster(t, size, func(c *node.Config) { c.Clock = clock })
			const capacity = 1000
			limits := noRefill(capacity)
			start := time.Now()
			admitted := hammer(t, 64, 100, limits, func(i int) *node.Node { return nodes[i%len(nodes)] })
			t.Logf("%d nodes: 500 keys exhausted in %v", size, time.Since(start))
			for li, l := range limits {
				for k, got := range admitted[li] {
					if got != capacity {
						t.Errorf("%v key k%d: admitted %d, want %d", l.Kind, k, got, capacity)
					}
				}
			}
		})
	}
}

// Test 2: a crashed node is detected; meanwhile checks on its keys follow the
// policy without error; afterwards its keys have live owners.
func TestCrash(t *testing.T) {
	t.Parallel()
	for _, policy := range []node.Policy{node.Local, node.FailOpen, node.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			nodes := startCluster(t, 3, func(c *node.Config) {
				c.OwnerUnreachable = policy
				c.Replication = node.ReplicationOff // no backup: the policy decides
			})
			dead, survivors := nodes[2], nodes[:2]
			var keys []string
			for i := 0; len(keys) < 20; i++ {
				k := fmt.Sprintf("crash:%d", i)
				if m, _ := survivors[0].Owner(k); m.Name == dead.Name() {
					keys = append(keys, k)
				}
			}
			l := algo.Limit{Kind: algo.GCRA, Burst: 10, Limit: 10, Period: time.Second}
			crashed := time.Now()
			dead.Abort()
			fallbacks := 0
			for !agreeNow(survivors...) {
				if time.Since(crashed) > 3*time.Second {
					t.Fatalf("survivors did not agree on the ring within 3s")
				}
				for _, k := range keys {
					d, err := survivors[0].Allow(context.Background(), k, l)
					if err != nil {
						t.Fatalf("check during crash: %v", err)
					}
					if d.Route == node.RouteFallback {
						fallbacks++
						if policy == node.FailClosed && d.Allowed || policy == node.FailOpen && !d.Allowed {
							t.Fatalf("policy %v decided allowed=%v", policy, d.Allowed)
						}
					}
				}
			}
			if fallbacks == 0 {
				t.Fatalf("no check reached the fallback while the crash went undetected; the test proves nothing")
			}
			t.Logf("crash detected and ring agreed in %v (%d fallback decisions meanwhile)", time.Since(crashed), fallbacks)
			for _, k := range keys {
				m, ok := survivors[1].Owner(k)
				if !ok || m.Name == dead.Name() {
					t.Fatalf("key %s owned by %q after the crash", k, m.Name)
				}
				d, err := survivors[1].Allow(context.Background(), k, l)
				if err != nil || d.Route == node.RouteFallback {
					t.Fatalf("key %s after the crash: route %v err %v, want a live owner", k, d.Route, err)
				}
			}
		})
	}
}

// With replication (the default), a crashed owner's keys are decided by their
// backup from the first check after the crash (no fallback, no wait for gossip),
// on the replicated state, and the backup owns them once the crash is detected.
func TestCrashBackupDecides(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3, func(c *node.Config) { c.Replication = node.ReplicationSync })
	dead, survivors := nodes[2], nodes[:2]
	type key struct {
		name   string
		backup string
	}
	var keys []key
	for i := 0; len(keys) < 20; i++ {
		k := fmt.Sprintf("crash:%d", i)
		if m, _ := survivors[0].Owner(k); m.Name == dead.Name() {
			b, ok := survivors[0].Backup(k)
			if !ok {
				t.Fatalf("key %s has no backup", k)
			}
			keys = append(keys, key{k, b.Name})
		}
	}
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 5, Period: 24 * time.Hour}
	ctx := context.Background()
	for _, k := range keys {
		if d, err := survivors[0].AllowN(ctx, k.name, l, 3); err != nil || !d.Allowed || d.Owner != dead.Name() {
			t.Fatalf("before the crash: %+v, %v", d, err)
		}
	}
	crashed := time.Now()
	dead.Abort()
	admitted := make(map[string]int)
	byBackup := 0
	for !agreeNow(survivors...) {
		if time.Since(crashed) > 10*time.Second {
			t.Fatalf("survivors did not agree on the ring within 10s")
		}
		for _, k := range keys {
			d, err := survivors[0].Allow(ctx, k.name, l)
			if err != nil {
				t.Fatalf("check during crash: %v", err)
			}
			if d.Route == node.RouteFallback {
				t.Fatalf("key %s fell back with a live backup %s", k.name, k.backup)
			}
			if d.Route == node.RouteBackup {
				byBackup++
				if d.Owner != k.backup {
					t.Fatalf("key %s decided by %s, its backup is %s", k.name, d.Owner, k.backup)
				}
			}
			if d.Allowed {
				admitted[k.name]++
			}
		}
	}
	if byBackup == 0 {
		t.Fatalf("no check reached the backup while the crash went undetected; the test proves nothing")
	}
	t.Logf("crash detected and ring agreed in %v (%d backup decisions meanwhile)", time.Since(crashed), byBackup)
	for _, k := range keys {
		if m, _ := survivors[1].Owner(k.name); m.Name != k.backup {
			t.Fatalf("key %s owned by %s after the crash, its backup was %s", k.name, m.Name, k.backup)
		}
		for range 3 {
			d, err := survivors[1].Allow(ctx, k.name, l)
			if err != nil || d.Route == node.RouteFallback {
				t.Fatalf("key %s after the crash: %+v, %v", k.name, d, err)
			}
			if d.Allowed {
				admitted[k.name]++
			}
		}
		if admitted[k.name] != 2 {
			t.Fatalf("key %s admitted %d more after the crash, want exactly the 2 left of 5", k.name, admitted[k.name])
		}
	}
}

// agreeNow reports whether the nodes already agree on a ring of exactly them.
func agreeNow(nodes ...*node.Node) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // WaitConverged checks once before it looks at ctx
	return nodetest.WaitConverged(ctx, nodes...) == nil
}

// Test 3: every node is closed and replaced one at a time while callers keep
// going; no key admits more than its limit across the whole restart. The keys are
// exhausted first, so any state lost in a handoff would show as an admission.
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	clock := midWindowClock()
	mod := func(c *node.Config) { c.Clock = clock }
	base, nodes := startClusterBase(t, 3, mod)
	limits := noRefill(1000)
	const keys = 10
	before := hammer(t, 32, keys, limits, func(i int) *node.Node { return nodes[i%3] })

	var live atomic.Pointer[[]*node.Node]
	live.Store(&nodes)
	var during [][]int64
	var fallbacks atomic.Int64
	stopCallers := make(chan struct{})
	callersDone := make(chan struct{})
	go func() {
		defer close(callersDone)
		during = hammerUntil(t, 32, keys, limits, stopCallers, &fallbacks, func(i int) *node.Node {
			ns := *live.Load()
			return ns[i%len(ns)]
		})
	}()
	for i := range 3 {
		cur := *live.Load()
		cfg := base
		cfg.Name = fmt.Sprintf("node-r%d", i)
		cfg.Join = []string{cur[1].GossipAddr()}
		nn, err := node.New(cfg)
		if err != nil {
			t.Fatalf("replacement %d: %v", i, err)
		}
		t.Cleanup(func() { nn.Abort() })
		next := append(append([]*node.Node{}, cur...), nn)
		took := waitConverged(t, 10*time.Second, next...)
		live.Store(&next)
		old, rest := cur[0], next[1:]
		start := time.Now()
		if err := old.Close(); err != nil {
			t.Errorf("close %s: %v", old.Name(), err)
		}
		closeTook := time.Since(start)
		live.Store(&rest)
		conv := waitConverged(t, 10*time.Second, rest...)
		t.Logf("replaced %s by %s: join converged in %v, Close (leave+handoff+drain) took %v, ring agreed %v later",
			old.Name(), nn.Name(), took, closeTook, conv)
	}
	close(stopCallers)
	<-callersDone
	t.Logf("%d fallback decisions during the restart", fallbacks.Load())
	for li, l := range limits {
		for k := range keys {
			if got := before[li][k] + during[li][k]; got > 1000 || during[li][k] != 0 {
				t.Errorf("%v key k%d: admitted %d before and %d during the restart, want at most 1000 in all", l.Kind, k, before[li][k], during[li][k])
			}
		}
	}
}

// Test 4: a fourth node takes over about a quarter of the keys, with their state.
func TestJoinTakesKeysWithState(t *testing.T) {
	t.Parallel()
	clock := midWindowClock()
	base, nodes := startClusterBase(t, 3, func(c *node.Config) { c.Clock = clock })
	ctx := context.Background()
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 10, Period: 24 * time.Hour}
	const keys = 2000
	for k := 0; k < keys; k++ {
		if _, err := nodes[k%3].AllowN(ctx, fmt.Sprintf("join:%d", k), l, 3); err != nil {
			t.Fatal(err)
		}
	}
	cfg := base
	cfg.Name = "node-3"
	cfg.Join = []string{nodes[0].GossipAddr()}
	start := time.Now()
	d, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Abort() })
	all := append(nodes, d)
	waitConverged(t, 10*time.Second, all...)
	t.Logf("join converged in %v", time.Since(start))
	moved := 0
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("join:%d", k)
		m, _ := nodes[0].Owner(key)
		if m.Name == "node-3" {
			moved++
		}
		res, err := all[k%4].AllowN(ctx, key, l, 0) // peek
		if err != nil {
			t.Fatal(err)
		}
		if res.Remaining != 7 {
			t.Fatalf("key %s (owner %s): remaining %d after the join, want 7", key, res.Owner, res.Remaining)
		}
	}
	share := float64(moved) / keys
	t.Logf("node-3 owns %d of %d keys (%.1f%%), %d states resident on it (with replicas)", moved, keys, 100*share, d.Stats().Keys)
	if share < 0.15 || share > 0.35 {
		t.Fatalf("node-3 owns %.1f%% of keys, want about 25%%", 100*share)
	}
	if got := d.OwnedKeys(); got != moved {
		t.Fatalf("node-3 holds %d states of keys it owns, want %d", got, moved)
	}
}

// Test 5: bad input over gRPC is InvalidArgument naming the field, and the node
// keeps serving.
func TestBadInputOverGRPC(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 1, nil)
	c, err := transport.Dial(serveLimiter(t, nodes[0]), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	ok := algo.Limit{Kind: algo.GCRA, Burst: 1, Limit: 10, Period: time.Second}
	cases := []struct {
		name  string
		check transport.Check
		field string
	}{
		{"empty key", transport.Check{Key: "", Limit: ok, Hits: 1}, "key"},
		{"long key", transport.Check{Key: strings.Repeat("x", transport.DefaultMaxKeyLen+1), Limit: ok, Hits: 1}, "key"},
		{"negative hits", transport.Check{Key: "k", Limit: ok, Hits: -1}, "hits"},
		{"zero limit", transport.Check{Key: "k", Limit: algo.Limit{Kind: algo.GCRA, Period: time.Second}, Hits: 1}, "limit"},
		{"zero period", transport.Check{Key: "k", Limit: algo.Limit{Kind: algo.FixedWindow, Limit: 1}, Hits: 1}, "period"},
		{"negative burst", transport.Check{Key: "k", Limit: algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Second, Burst: -1}, Hits: 1}, "burst"},
		{"unknown algorithm", transport.Check{Key: "k", Limit: algo.Limit{Kind: 0, Limit: 1, Period: time.Second}, Hits: 1}, "algorithm"},
	}
	for _, tc := range cases {
		_, err := c.Check(ctx, tc.check)
		if !errors.Is(err, transport.ErrInvalidCheck) {
			t.Errorf("%s: got %v, want ErrInvalidCheck (InvalidArgument)", tc.name, err)
			continue
		}
		if !strings.Contains(strings.ToLower(err.Error()), tc.field) {
			t.Errorf("%s: error %q does not name %q", tc.name, err, tc.field)
		}
	}
	big := make([]transport.Check, transport.DefaultMaxBatch+1)
	for i := range big {
		big[i] = transport.Check{Key: "k", Limit: ok, Hits: 1}
	}
	if _, err := c.CheckBatch(ctx, big); !errors.Is(err, transport.ErrInvalidCheck) {
		t.Errorf("oversized batch: got %v, want ErrInvalidCheck", err)
	}
	r, err := c.Check(ctx, transport.Check{Key: "k", Limit: ok, Hits: 1})
	if err != nil || !r.Decision.Allowed {
		t.Fatalf("node stopped serving after bad input: %+v, %v", r, err)
	}
}

// Test 6a: a node with the wrong gossip key cannot join.
func TestWrongGossipKeyCannotJoin(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef")
	nodes := startCluster(t, 2, func(c *node.Config) { c.SecretKey = key })
	cfg := nodetest.TestConfig()
	cfg.Name = "intruder"
	cfg.SecretKey = []byte("fedcba9876543210")
	cfg.Join = []string{nodes[0].GossipAddr()}
	in, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Abort()
	if got := len(in.Members()); got != 1 {
		t.Fatalf("intruder sees %d members, want 1 (itself)", got)
	}
	for _, n := range nodes {
		for _, m := range n.Members() {
			if m.Name == "intruder" {
				t.Fatalf("%s lists the intruder as a member", n.Name())
			}
		}
	}
	if in.Ready() {
		t.Fatal("intruder reports ready without having joined")
	}
}

// hammerUntil checks random keys of every limit through the nodes that pick
// returns until stop is closed, counting fallback decisions, and returns the
// admitted count per limit and key.
func hammerUntil(t *testing.T, callers, keys int, limits []algo.Limit, stop chan struct{}, fallbacks *atomic.Int64, pick func(i int) *node.Node) [][]int64 {
	t.Helper()
	admitted := make([][]int64, len(limits))
	for i := range admitted {
		admitted[i] = make([]int64, keys)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				li, k := r.IntN(len(limits)), r.IntN(keys)
				d, err := pick(g+r.IntN(8)).Allow(context.Background(), fmt.Sprintf("k%d", k), limits[li])
				if errors.Is(err, node.ErrStopped) {
					continue
				}
				if err != nil {
					t.Errorf("check: %v", err)
					return
				}
				if d.Route == node.RouteFallback {
					fallbacks.Add(1)
				}
				if d.Allowed {
					mu.Lock()
					admitted[li][k]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return admitted
}

// A node restarted under the same name (new ports, new instance id) takes its
// place back at once: DeadNodeReclaimTime lets the name be reused, the peers
// drop the old address, and checks reach the new process.
func TestRestartUnderSameName(t *testing.T) {
	t.Parallel()
	base, nodes := startClusterBase(t, 3, nil)
	old := nodes[2]
	oldAddr := old.PeerAddr()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, 10*time.Second, nodes[:2]...)
	cfg := base
	cfg.Name = old.Name()
	cfg.Join = []string{nodes[0].GossipAddr()}
	start := time.Now()
	again, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { again.Abort() })
	all := []*node.Node{nodes[0], nodes[1], again}
	took := waitConverged(t, 10*time.Second, all...)
	t.Logf("%s restarted at %s (was %s); ring agreed after %v", again.Name(), again.PeerAddr(), oldAddr, took)
	if time.Since(start) > 5*time.Second {
		t.Fatalf("rejoin under the same name took %v", time.Since(start))
	}
	l := algo.Limit{Kind: algo.GCRA, Burst: 5, Limit: 10, Period: time.Second}
	reached := 0
	for i := 0; i < 60; i++ {
		d, err := nodes[0].Allow(context.Background(), fmt.Sprintf("same:%d", i), l)
		if err != nil {
			t.Fatal(err)
		}
		if d.Route == node.RouteFallback {
			t.Fatalf("check fell back after the restart: owner %s", d.Owner)
		}
		if d.Owner == again.Name() {
			reached++
		}
	}
	if reached == 0 {
		t.Fatal("no check reached the restarted node")
	}
}

// serveLimiter serves the public Limiter service of n on a loopback port, as
// the daemon does on --grpc-port, and returns its address.
func serveLimiter(t testing.TB, n *node.Node) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := transport.NewLimiterServer(transport.ServerConfig{}, node.LimiterHandler(n))
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}
