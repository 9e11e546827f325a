package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/lease"
)

// leasesOn turns capacity leases on in a test config.
func leasesOn(c *Config) {
	c.Lease = LeaseConfig{Size: 1024, Threshold: 10, Period: 100 * time.Millisecond, MaxShare: 0.5}
}

// manualClock is a node clock the test moves: every member of a cluster
// shares it, so rates, leases and states are measured on one timeline.
type manualClock struct{ ns atomic.Int64 }

func newManualClock() *manualClock {
	c := &manualClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *manualClock) now() int64                { return c.ns.Load() }
func (c *manualClock) add(d time.Duration) int64 { return c.ns.Add(int64(d)) }

// One hot key checked by callers on all three members of a gRPC cluster (the
// forward stream's codec carries the ask and the grant), limit high enough
// that every check is admitted: once the key is hot, at least 95% of the
// non-owners' checks are decided from leases, without a forward (at least
// 80% on each).
func TestLeaseHotKeyDecidedLocally(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := testConfig()
	leasesOn(&base)
	// Slices for a second of checks: the owner's own callers take most of
	// the CPU under the race detector, and the non-owners' rates vary.
	base.Lease.Period = time.Second
	c, err := startCluster(ctx, 3, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	nodes := c.Nodes()
	key := keyOwnedBy(t, nodes[0], nodes[1])
	l := algo.Limit{Kind: algo.TokenBucket, Limit: 10_000_000, Period: time.Second, Burst: 10_000_000}
	var hot atomic.Bool
	var routes [3][RouteLease + 1]atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i, n := range nodes {
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					d, err := n.Allow(ctx, key, l)
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed {
						t.Errorf("denied under a limit that admits all: %+v", d)
						return
					}
					if hot.Load() {
						routes[i][d.Route].Add(1)
					}
					// A caller that does some work between checks: callers
					// deciding locally in a spin would starve the others'
					// forwards of CPU under the race detector.
					runtime.Gosched()
				}
			})
		}
	}
	// Warm up until a non-owner holds a lease, then count for a while.
	for nodes[0].Stats().LeasesGranted == 0 || nodes[2].Stats().LeasesGranted == 0 {
		if ctx.Err() != nil {
			close(stop)
			wg.Wait()
			t.Fatal("no lease granted to the non-owners")
		}
		time.Sleep(5 * time.Millisecond) // poll
	}
	hot.Store(true)
	<-time.After(2 * time.Second) // the measured span
	close(stop)
	wg.Wait()
	// At least 95% of the non-owners' checks in all; at least 80% on each
	// (a member whose callers the race detector and the other tests starve
	// of CPU makes few checks a second, so a lease cycle's forwards weigh
	// more there).
	var all, allLeased int64
	for _, i := range []int{0, 2} {
		var total int64
		for r := range routes[i] {
			total += routes[i][r].Load()
		}
		leased := routes[i][RouteLease].Load()
		all, allLeased = all+total, allLeased+leased
		t.Logf("%s: %d checks, %d from leases, %d forwarded", nodes[i].Name(), total, leased, routes[i][RouteForwarded].Load())
		if total == 0 || float64(leased) < 0.80*float64(total) {
			t.Errorf("%s: %d of %d checks decided from leases, want at least 80%%", nodes[i].Name(), leased, total)
		}
	}
	if float64(allLeased) < 0.95*float64(all) {
		t.Errorf("the non-owners decided %d of %d checks from leases, want at least 95%%", allLeased, all)
	}
	if got := routes[1][RouteOwner].Load(); got == 0 {
		t.Errorf("the owner decided none of its own checks")
	}
}

// The same key at 100/s from callers on all three members for 3 s, under
// GCRA, token bucket and fixed window: admitted within one limiter's bound
// in every run, and at least 95% of it.
func TestLeaseHotKeyWithinTheBound(t *testing.T) {
	t.Parallel()
	for _, l := range []algo.Limit{
		{Kind: algo.GCRA, Limit: 100, Period: time.Second, Burst: 99},
		{Kind: algo.TokenBucket, Limit: 100, Period: time.Second, Burst: 100},
		{Kind: algo.FixedWindow, Limit: 100, Period: time.Second},
	} {
		t.Run(l.Kind.String(), func(t *testing.T) {
			t.Parallel()
			_, nodes := memCluster(t, 3, leasesOn)
			key := keyOwnedBy(t, nodes[0], nodes[1])
			var admitted, first atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			end := start.Add(3 * time.Second)
			for _, n := range nodes {
				for range 3 {
					wg.Go(func() {
						for time.Now().Before(end) {
							d, err := n.Allow(context.Background(), key, l)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								admitted.Add(1)
								first.CompareAndSwap(0, time.Now().UnixNano())
							}
						}
					})
				}
			}
			wg.Wait()
			elapsed := time.Since(start)
			// The bound counts from before the first admission to after the
			// last; what a limiter would admit, from the first admission to the
			// planned end (under load the callers start late).
			span := time.Duration(max(time.Now().UnixNano()-first.Load(), 0))
			planned := time.Duration(max(end.UnixNano()-first.Load(), 0))
			var bound, fair int64
			switch l.Kind {
			case algo.FixedWindow:
				p := int64(l.Period)
				windows := time.Now().UnixNano()/p - start.UnixNano()/p + 1
				bound = windows * l.Limit
				fair = (end.UnixNano()/p - first.Load()/p) * l.Limit // whole windows after the first
			default:
				bound = lease.Capacity(l) + int64(span/(l.Period/time.Duration(l.Limit))) + 1
				fair = lease.Capacity(l) + int64(planned.Seconds()*float64(l.Limit))
			}
			var leased uint64
			for _, n := range nodes {
				leased += n.Stats().LeasedChecks
			}
			got := admitted.Load()
			t.Logf("admitted %d in %v (bound %d), %d from leases", got, elapsed.Round(time.Millisecond), bound, leased)
			if got > bound {
				t.Errorf("admitted %d, over the bound %d", got, bound)
			}
			if float64(got) < 0.95*float64(fair) {
				t.Errorf("admitted %d, want at least 95%% of %d", got, fair)
			}
		})
	}
}

// leaseUp checks key under l on each of the members from the shared clock
// at 1,000 checks/s until each holds a lease, and returns the hits admitted
// on the way.
func leaseUp(t *testing.T, clk *manualClock, key string, l algo.Limit, members ...*Node) int64 {
	t.Helper()
	var admitted int64
	for _, n := range members {
		for i := 0; ; i++ {
			if i > 1000 {
				t.Fatalf("%s got no lease", n.Name())
			}
			clk.add(time.Millisecond)
			d, err := n.Allow(context.Background(), key, l)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
			if d.Route == RouteLease {
				break
			}
		}
	}
	return admitted
}

// drain checks key under l on every member until each is denied 20 times in
// a row, at one instant, and returns the hits admitted.
func drain(t *testing.T, key string, l algo.Limit, nodes ...*Node) int64 {
	t.Helper()
	var admitted int64
	for _, n := range nodes {
		for denied := 0; denied < 20; {
			d, err := n.Allow(context.Background(), key, l)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
				denied = 0
			} else {
				denied++
			}
		}
	}
	return admitted
}

// A reset of a key whose capacity is lent to two members: after the reset,
// the members together admit at most one full key. Without the invalidation
// of the leases, the members would admit their slices on top of it.
func TestLeaseReset(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	_, nodes := memCluster(t, 3, func(c *Config) { leasesOn(c); c.Clock = clk.now })
	key := keyOwnedBy(t, nodes[0], nodes[1])
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 999} // 1,000, no refill to speak of
	leaseUp(t, clk, key, l, nodes[0], nodes[2])
	if _, err := nodes[0].ResetKey(context.Background(), key, l); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, key, l, nodes...); got > 1000 {
		t.Errorf("admitted %d after the reset, want at most 1000", got)
	}
}

// A limit change while capacity is lent under the old limit: checks under the
// new limit are never admitted from the old limit's leases, so the new,
// smaller limit holds.
func TestLeaseLimitChange(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	_, nodes := memCluster(t, 3, func(c *Config) { leasesOn(c); c.Clock = clk.now })
	key := keyOwnedBy(t, nodes[0], nodes[1])
	old := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 999}
	small := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 9}
	before := leaseUp(t, clk, key, old, nodes[0], nodes[2])
	// The old limit's TAT stands under the new one: the key holds
	// max(0, 10 − before) hits.
	if got, most := drain(t, key, small, nodes...), max(0, 10-before); got > most {
		t.Errorf("admitted %d under the new limit, want at most %d", got, most)
	}
}

// A lessee that crashes loses its slice: the others admit at most one full
// key in all.
func TestLeaseLesseeCrash(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	_, nodes := memCluster(t, 3, func(c *Config) { leasesOn(c); c.Clock = clk.now })
	key := keyOwnedBy(t, nodes[0], nodes[1])
	l := algo.Limit{Kind: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 1000}
	got := leaseUp(t, clk, key, l, nodes[0], nodes[2])
	nodes[2].Abort()
	got += drain(t, key, l, nodes[0], nodes[1])
	if got > 1000 {
		t.Errorf("admitted %d, want at most 1000", got)
	}
}

// An owner that crashes while its capacity is lent: the key's backup, which
// takes over, holds the lent hits (the grant reached it before it was
// answered, though async replication sends nothing else here), so the
// lessees' slices and the new owner's admissions stay within one key.
func TestLeaseOwnerCrash(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	_, nodes := memCluster(t, 3, func(c *Config) {
		leasesOn(c)
		c.Clock = clk.now
		c.Replication = ReplicationAsync
		c.ReplicationLag = time.Hour // nothing but the grants reaches the backup
	})
	owner := nodes[1]
	key := keyOwnedBy(t, nodes[0], owner)
	b, ok := owner.Backup(key)
	if !ok {
		t.Fatal("no backup")
	}
	var lessee, backup *Node
	for _, n := range []*Node{nodes[0], nodes[2]} {
		if n.Name() == b.Name {
			backup = n
		} else {
			lessee = n
		}
	}
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 999}
	got := leaseUp(t, clk, key, l, lessee)
	owner.Abort()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		if m, ok := backup.Owner(key); ok && m.Name == backup.Name() {
			if m, ok := lessee.Owner(key); ok && m.Name == backup.Name() {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the crash was not detected")
		}
		time.Sleep(5 * time.Millisecond) // poll
	}
	got += drain(t, key, l, lessee, backup)
	if got > 1000 {
		t.Errorf("admitted %d, want at most 1000", got)
	}
}

// A slice whose lease ended while no check of its key reached the owner is
// recorded in the key's state by the idle sweep, and the owner holds nothing
// any more.
func TestLeaseSweepRecordsEndedSlices(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	_, nodes := memCluster(t, 3, func(c *Config) { leasesOn(c); c.Clock = clk.now })
	owner := nodes[1]
	key := keyOwnedBy(t, nodes[0], owner)
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 999}
	before := leaseUp(t, clk, key, l, nodes[0])
	if !owner.holds.Any() {
		t.Fatal("the owner holds no slice after a grant")
	}
	d, err := owner.Allow(context.Background(), key, l)
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	if lent := 1000 - before - 1 - d.Remaining; lent <= 0 {
		t.Fatalf("remaining %d after %d admitted: want the slice held back", d.Remaining, before+1)
	}
	clk.add(time.Second) // past the lease's end
	owner.sweepHolds(clk.now())
	if owner.holds.Any() {
		t.Errorf("slices still held after the sweep")
	}
	d2, err := owner.Allow(context.Background(), key, l)
	if err != nil || !d2.Allowed || d2.Remaining != d.Remaining-1 {
		t.Errorf("after the sweep: %+v, %v; want admitted with %d left (the slice recorded)", d2, err, d.Remaining-1)
	}
}

// A member joins while capacity of keys it gains is lent: the old owner
// records its held slices in the states it hands off, so the new owner
// counts them, and each key admits at most one full key in all. (Without
// replication: a backup's replica of a grant's state would reach the new
// owner too.)
func TestLeaseHandoffCarriesSlices(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	_, nodes, base := memClusterBase(t, 3, func(c *Config) {
		leasesOn(c)
		c.Clock = clk.now
		c.Lease.Period = time.Hour // no lease ends while the keys are leased one after another
		// No backups: no replica holds the grants' states, only the handoff
		// can carry the slices to the new owner.
		c.Replication = ReplicationOff
	})
	owner, lessee := nodes[1], nodes[0]
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 999}
	admitted := map[string]int64{}
	for i := 0; len(admitted) < 24; i++ {
		k := fmt.Sprintf("handoff-%d", i)
		if m, ok := lessee.Owner(k); ok && m.Name == owner.Name() {
			admitted[k] = leaseUp(t, clk, k, l, lessee)
		}
	}
	cfg := base
	cfg.Name = "node-3"
	cfg.Join = []string{nodes[0].GossipAddr()}
	joined, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { joined.Abort() })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	all := append(nodes[:3:3], joined)
	if err := waitConverged(ctx, all...); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for k, got := range admitted {
		m, ok := joined.Owner(k)
		if !ok || m.Name != joined.Name() {
			continue
		}
		moved++
		got += drain(t, k, l, all...)
		if got > 1000 {
			t.Errorf("%s: admitted %d, want at most 1000", k, got)
		}
	}
	if moved == 0 {
		t.Fatal("no leased key moved to the new member")
	}
}

// awaitRenewals waits until n has no lease request in flight (a renewal
// runs in the background), polling against a deadline.
func awaitRenewals(t *testing.T, n *Node) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.leases.InFlight() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("a lease renewal did not return")
		}
		runtime.Gosched()
	}
}

// A member that checks a hot key at a steady rate renews its leases ahead,
// in the background: once it holds the first lease, every one of its checks
// is decided from a lease, none is forwarded (a renewal rides on a forward
// of its own that no caller waits for), and the owner keeps lending.
func TestLeaseRenewedAheadNoCallerForwards(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	_, nodes := memCluster(t, 3, func(c *Config) { leasesOn(c); c.Clock = clk.now })
	lessee, owner := nodes[0], nodes[1]
	key := keyOwnedBy(t, lessee, owner)
	l := algo.Limit{Kind: algo.GCRA, Limit: 1_000_000, Period: time.Second, Burst: 1_000_000}
	leaseUp(t, clk, key, l, lessee)
	awaitRenewals(t, lessee)
	granted := lessee.leases.Granted()
	var routes [RouteLease + 1]int
	const checks = 3000 // 3 s at 1,000 checks/s: 30 lease periods
	for range checks {
		clk.add(time.Millisecond)
		d, err := lessee.Allow(context.Background(), key, l)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			t.Fatalf("denied under a limit no check reaches: %+v", d)
		}
		routes[d.Route]++
		awaitRenewals(t, lessee) // the renewal's round trip is short against the clock's step
	}
	if routes[RouteLease] != checks {
		t.Errorf("routes %v: got %d of %d checks from leases, want all (no caller waits for a renewal)", routes, routes[RouteLease], checks)
	}
	if got := lessee.leases.Granted() - granted; got < 20 {
		t.Errorf("got %d grants in 30 lease periods, want the leases renewed (at least 20)", got)
	}
}

// A member whose rate varies renews its leases, and each renewal hands back
// the rest of the lease it renews (the owner records only what was used):
// a key that nothing refills lends all of its capacity over many leases,
// and the members admit it in full, exactly: no slice's unused rest is
// counted as admitted. Without the account, every renewed slice's unused
// rest would be recorded as admitted when its lease ended.
func TestLeaseRenewalReturnsTheUnusedRest(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	_, nodes := memCluster(t, 3, func(c *Config) { leasesOn(c); c.Clock = clk.now })
	lessee, owner := nodes[0], nodes[1]
	key := keyOwnedBy(t, lessee, owner)
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: 10 * time.Minute, Burst: 9_999} // 10,000, no refill within the test
	r := rand.New(rand.NewPCG(3, 5))
	got := leaseUp(t, clk, key, l, lessee)
	awaitRenewals(t, lessee)
	granted := lessee.leases.Granted()
	for range 4000 {
		// From 1,000 checks/s down to 200: slices sized for the faster
		// rate are left half used.
		clk.add(time.Duration(1+r.IntN(5)) * time.Millisecond)
		d, err := lessee.Allow(context.Background(), key, l)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			got++
		}
		awaitRenewals(t, lessee)
	}
	if n := lessee.leases.Granted() - granted; n < 20 {
		t.Fatalf("%d grants, want the leases renewed (at least 20)", n)
	}
	// Drain until nothing is admitted with no renewal in flight (one that
	// returns after a drain brings a lease to use).
	for {
		d := drain(t, key, l, nodes...)
		awaitRenewals(t, lessee)
		got += d
		if d == 0 {
			break
		}
	}
	if got != 10_000 {
		t.Errorf("admitted %d in all, want 10000 (the key's capacity, every unused rest handed back)", got)
	}
}

// Renewals that hand back the unused rest of a lease never let the members
// admit more than one limiter: callers on all three members check one key
// under GCRA and token bucket at random instants (the shared clock jumps
// now and then past a lease's end while a renewal is in flight, so that
// some reports arrive after the owner recorded their slice), and in every
// interval of the run the admissions stay within the limiter's bound,
// capacity + interval / emission interval.
func TestLeaseRenewalNeverOverAdmits(t *testing.T) {
	t.Parallel()
	for _, l := range []algo.Limit{
		{Kind: algo.GCRA, Limit: 1000, Period: time.Second, Burst: 199},
		{Kind: algo.TokenBucket, Limit: 1000, Period: time.Second, Burst: 200},
	} {
		t.Run(l.Kind.String(), func(t *testing.T) {
			t.Parallel()
			clk := newManualClock()
			_, nodes := memCluster(t, 3, func(c *Config) { leasesOn(c); c.Clock = clk.now })
			key := keyOwnedBy(t, nodes[0], nodes[1])
			r := rand.New(rand.NewPCG(uint64(l.Kind), 9))
			var at []int64 // the instants of the admissions, in order
			var leased int
			for i := range 6000 {
				switch x := r.IntN(1000); {
				case x < 3:
					clk.add(time.Duration(50+r.IntN(200)) * time.Millisecond) // past a lease's end
				case x < 600:
					clk.add(time.Duration(r.IntN(100)) * time.Microsecond)
				}
				if i%7 == 0 {
					for _, n := range nodes {
						awaitRenewals(t, n)
					}
				}
				now := clk.now()
				d, err := nodes[r.IntN(3)].Allow(context.Background(), key, l)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					at = append(at, now)
					if d.Route == RouteLease {
						leased++
					}
				}
			}
			if leased < len(at)/4 {
				t.Fatalf("%d of %d admissions from leases, want leases in use", leased, len(at))
			}
			emission := int64(l.Period) / l.Limit
			for i := range at {
				for j := i; j < len(at); j++ {
					if bound := lease.Capacity(l) + (at[j]-at[i])/emission; int64(j-i+1) > bound {
						t.Fatalf("%d admitted in %v, over the bound %d", j-i+1, time.Duration(at[j]-at[i]), bound)
					}
				}
			}
			t.Logf("%d admitted, %d from leases", len(at), leased)
		})
	}
}

// At fleet size: nine members check one hot key owned by a tenth, each at a
// steady rate. Once each holds its first lease, every check on every one of
// them is decided from a lease (the renewals go in the background), and
// the owner receives only the renewals: at most one forward message per
// 20 checks of its lessees.
func TestLeaseRenewedAheadTenMembers(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	mn, nodes := memCluster(t, 10, func(c *Config) { leasesOn(c); c.Clock = clk.now })
	owner := nodes[0]
	key := keyOwnedBy(t, nodes[1], owner)
	l := algo.Limit{Kind: algo.TokenBucket, Limit: 10_000_000, Period: time.Second, Burst: 10_000_000}
	lessees := nodes[1:]
	leaseUp(t, clk, key, l, lessees...)
	// The first lessees' leases ended while the others leased up: a round
	// of checks on every member brings each back to a lease.
	for range 200 {
		clk.add(time.Millisecond)
		for _, n := range lessees {
			if _, err := n.Allow(context.Background(), key, l); err != nil {
				t.Fatal(err)
			}
			awaitRenewals(t, n)
		}
	}
	var sent int64
	for _, n := range lessees {
		sent += mn.forwarded(n, owner)
	}
	var routes [RouteLease + 1]int
	const rounds = 1000 // 1 s at 1,000 checks/s per member: 10 lease periods
	for range rounds {
		clk.add(time.Millisecond)
		for _, n := range lessees {
			d, err := n.Allow(context.Background(), key, l)
			if err != nil || !d.Allowed {
				t.Fatalf("%s: %+v, %v; want admitted", n.Name(), d, err)
			}
			routes[d.Route]++
		}
		for _, n := range lessees {
			awaitRenewals(t, n)
		}
	}
	if want := rounds * len(lessees); routes[RouteLease] != want {
		t.Errorf("routes %v: %d of %d checks from leases, want all", routes, routes[RouteLease], want)
	}
	var msgs int64
	for _, n := range lessees {
		msgs += mn.forwarded(n, owner)
	}
	if msgs -= sent; msgs*20 > int64(rounds*len(lessees)) {
		t.Errorf("the owner received %d forwards for %d checks of its lessees, want at most 1 per 20", msgs, rounds*len(lessees))
	}
	t.Logf("%d forwards to the owner for %d checks", msgs, rounds*len(lessees))
}
