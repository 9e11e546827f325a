package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// The load harness of the crash tests (crash_test.go): an in-process cluster
// driven by closed-loop callers that check random keys on random live nodes and
// count, per key, what they were admitted; the test aborts nodes and restarts
// them under the same name and ports while the callers keep going.

// loadSpec describes one harness run.
type loadSpec struct {
	// Nodes is the cluster size, Keys the number of keys ("crash:0".."crash:K-1"),
	// Callers the number of closed-loop callers.
	Nodes, Keys, Callers int
	// Limit is the limit of every key; it must not refill during the run.
	Limit algo.Limit
	// Mod modifies nodetest.TestConfig for every node (restarted ones too).
	Mod func(*node.Config)
	// Moved restarts a member on new ports (a new address, as a rescheduled
	// pod gets) instead of the ports of its first start.
	Moved bool
	// EarlyLoad puts a restarted member in the callers' live set as soon as
	// New returns, before it reports Ready: checks reach it while it joins.
	EarlyLoad bool
}

// crashLimit is the limit of the crash tests' keys: 50 hits per 10 minutes,
// which cannot refill during a test.
var crashLimit = algo.Limit{Kind: algo.SlidingWindowLog, Limit: 50, Period: 10 * time.Minute}

// seriesStep is the width of one bucket of the throughput series.
const seriesStep = 100 * time.Millisecond

// loadRun is a running harness. Its methods are called by the test goroutine
// only; the callers touch only the atomics and the live set.
type loadRun struct {
	t     *testing.T
	spec  loadSpec
	base  node.Config
	keys  []string
	start time.Time

	mu    sync.Mutex            // guards nodes
	nodes map[string]*node.Node // current process per name, nil while down
	names []string              // member names in start order
	ports map[string][2]int     // name -> gossip port, peer port of its first start
	live  atomic.Pointer[[]*node.Node]

	admitted   []atomic.Int64  // per key: checks admitted, any route
	remSeen    []atomic.Uint64 // per key: bit i set when an admission reported Remaining i (i < 64)
	lost       []atomic.Int64  // per key: calls that ended in an error (ErrStopped included), or were in flight at the crash and answered by the backup: their owner's answer may have been lost
	lastDenied []atomic.Int64  // per key: ns since start of the last denial by owner, forward or backup (not fallback)
	routes     [8]atomic.Int64
	routeAdmit [8]atomic.Int64
	phase      atomic.Int32 // the scenario's phase (phaseNames), set by abort and restart
	phaseAdmit [len(phaseNames)][8]atomic.Int64
	phaseLat   [len(phaseNames)]atomic.Int64 // max latency (ns) of the calls that ended in each phase
	phaseStop  [len(phaseNames)]atomic.Int64 // ErrStopped and other errors per phase
	stopped    atomic.Int64                  // ErrStopped: the picked node was being aborted
	errs       atomic.Int64
	errMu      sync.Mutex
	firstErrs  []string
	series     []atomic.Int64 // checks completed per seriesStep since start
	maxLat     atomic.Int64   // ns
	maxLatAt   atomic.Int64   // ns since start at which that call began
	slow       atomic.Int64   // calls over slowCall
	stop       chan struct{}
	wg         sync.WaitGroup
}

// phaseNames name the phases of a run, in order: its admissions are counted per
// phase and route.
var phaseNames = [...]string{"before the crash", "while down", "restarted, not Ready", "after Ready"}

// slowCall is the latency above which a call is counted as slow.
const slowCall = 200 * time.Millisecond

// startLoad starts the cluster and the callers. The callers run until stopLoad.
func startLoad(t *testing.T, spec loadSpec) *loadRun {
	t.Helper()
	base, nodes := startClusterBase(t, spec.Nodes, spec.Mod)
	r := &loadRun{
		t: t, spec: spec, base: base,
		nodes:      map[string]*node.Node{},
		ports:      map[string][2]int{},
		admitted:   make([]atomic.Int64, spec.Keys),
		remSeen:    make([]atomic.Uint64, spec.Keys),
		lost:       make([]atomic.Int64, spec.Keys),
		lastDenied: make([]atomic.Int64, spec.Keys),
		series:     make([]atomic.Int64, int(2*time.Minute/seriesStep)),
		stop:       make(chan struct{}),
	}
	for k := range spec.Keys {
		r.keys = append(r.keys, fmt.Sprintf("crash:%d", k))
		r.lastDenied[k].Store(-1)
	}
	for _, n := range nodes {
		r.nodes[n.Name()] = n
		r.names = append(r.names, n.Name())
		r.ports[n.Name()] = [2]int{addrPort(t, n.GossipAddr()), addrPort(t, n.PeerAddr())}
	}
	r.publish()
	r.start = time.Now()
	for g := range spec.Callers {
		r.wg.Add(1)
		go r.caller(g)
	}
	t.Cleanup(r.stopLoad)
	return r
}

func addrPort(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return port
}

// publish makes the nodes that are up the callers' live set.
func (r *loadRun) publish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	var live []*node.Node
	for _, name := range r.names {
		if n := r.nodes[name]; n != nil {
			live = append(live, n)
		}
	}
	r.live.Store(&live)
}

// since returns the time elapsed since the load started, in ns.
func (r *loadRun) since() int64 { return int64(time.Since(r.start)) }

func (r *loadRun) caller(g int) {
	defer r.wg.Done()
	rng := rand.New(rand.NewPCG(uint64(g), 14))
	ctx := context.Background()
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		live := *r.live.Load()
		n := live[rng.IntN(len(live))]
		k := rng.IntN(len(r.keys))
		began, phBegan := r.since(), r.phase.Load()
		d, err := n.Allow(ctx, r.keys[k], r.spec.Limit)
		end := r.since()
		ph := r.phase.Load()
		storeMax(&r.phaseLat[ph], end-began)
		if storeMax(&r.maxLat, end-began) {
			r.maxLatAt.Store(began) // approximate when racing: for the log only
		}
		if time.Duration(end-began) > slowCall {
			r.slow.Add(1)
		}
		if b := end / int64(seriesStep); b < int64(len(r.series)) {
			r.series[b].Add(1)
		}
		switch {
		case errors.Is(err, node.ErrStopped):
			r.stopped.Add(1) // picked a node while it was aborted
			r.phaseStop[ph].Add(1)
			r.lost[k].Add(1)
			continue
		case err != nil:
			r.errs.Add(1)
			r.phaseStop[ph].Add(1)
			r.lost[k].Add(1)
			r.errMu.Lock()
			if len(r.firstErrs) < 5 {
				r.firstErrs = append(r.firstErrs, fmt.Sprintf("%s via %s: %v", r.keys[k], n.Name(), err))
			}
			r.errMu.Unlock()
			continue
		}
		if phBegan == 0 && ph > 0 && d.Route == node.RouteBackup {
			// In flight when its owner was aborted, then answered by the
			// backup: the owner may have taken the hit (and, under sync
			// replication, passed it to the backup) before its answer was
			// lost with it.
			r.lost[k].Add(1)
		}
		r.routes[d.Route&7].Add(1)
		if d.Allowed {
			r.admitted[k].Add(1)
			if d.Remaining >= 0 && d.Remaining < 64 {
				r.remSeen[k].Or(1 << d.Remaining)
			}
			r.routeAdmit[d.Route&7].Add(1)
			r.phaseAdmit[ph][d.Route&7].Add(1)
		} else if d.Route != node.RouteFallback {
			r.lastDenied[k].Store(end)
		}
	}
}

// storeMax raises a to v if v is larger and reports whether it did.
func storeMax(a *atomic.Int64, v int64) bool {
	for {
		cur := a.Load()
		if v <= cur {
			return false
		}
		if a.CompareAndSwap(cur, v) {
			return true
		}
	}
}

// stopLoad stops the callers and waits for them; safe to call twice.
func (r *loadRun) stopLoad() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.wg.Wait()
}

// liveNodes returns the nodes that are up, the callers' live set.
func (r *loadRun) liveNodes() []*node.Node { return *r.live.Load() }

// mostKeys returns the live node that owns the most of the run's keys.
func (r *loadRun) mostKeys() (*node.Node, int) {
	live := r.liveNodes()
	count := map[string]int{}
	for _, k := range r.keys {
		if m, ok := live[0].Owner(k); ok {
			count[m.Name]++
		}
	}
	best := live[0]
	for _, n := range live {
		if count[n.Name()] > count[best.Name()] {
			best = n
		}
	}
	return best, count[best.Name()]
}

// waitExhausted waits until every key has been denied by an owner, a forward or
// a backup (not a fallback) after the moment at, and at least minTail has passed
// since at; it fails the test after within. It returns when that happened.
func (r *loadRun) waitExhausted(at time.Time, minTail, within time.Duration) time.Time {
	r.t.Helper()
	from := int64(at.Sub(r.start))
	deadline := time.Now().Add(within)
	for {
		left := 0
		for k := range r.keys {
			if r.lastDenied[k].Load() < from {
				left++
			}
		}
		if left == 0 && time.Since(at) >= minTail {
			return time.Now()
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d of %d keys not denied by an owner or backup within %v after %v (admitted so far: %s)",
				left, len(r.keys), within, at.Sub(r.start).Round(time.Millisecond), r.summary().String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// abort aborts the member name as a crash would and takes it out of the live set
// first, so that callers stop picking it.
func (r *loadRun) abort(name string) time.Time {
	r.t.Helper()
	r.mu.Lock()
	n := r.nodes[name]
	r.nodes[name] = nil
	r.mu.Unlock()
	r.publish()
	at := time.Now()
	r.phase.Store(1)
	if err := n.Abort(); err != nil {
		r.t.Logf("abort %s: %v", name, err)
	}
	return at
}

// waitDetected waits until the nodes that are up agree on a ring of exactly
// them, and returns when.
func (r *loadRun) waitDetected(within time.Duration) time.Time {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for !agreeNow(r.liveNodes()...) {
		if time.Now().After(deadline) {
			r.t.Fatalf("the live nodes did not agree on their ring within %v", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Now()
}

// restart starts a new process for the member name, on the ports of its first
// start, joining the live nodes, and waits until it reports Ready before it
// enters the callers' live set (a load balancer's readiness check). It returns
// the node, when New returned and when it was Ready.
func (r *loadRun) restart(name string, within time.Duration) (n *node.Node, started, ready time.Time) {
	r.t.Helper()
	cfg := r.base
	cfg.Name = name
	cfg.GossipPort, cfg.PeerPort = r.ports[name][0], r.ports[name][1]
	if r.spec.Moved {
		cfg.GossipPort, cfg.PeerPort = 0, 0
	}
	for _, m := range r.liveNodes() {
		cfg.Join = append(cfg.Join, m.GossipAddr())
	}
	deadline := time.Now().Add(within)
	for {
		var err error
		n, err = node.New(cfg)
		if err == nil {
			break
		}
		// The aborted process's listeners are closed; a port may still be held
		// for a moment by the kernel.
		if !strings.Contains(err.Error(), "address already in use") || time.Now().After(deadline) {
			r.t.Fatalf("restart %s on ports %v: %v", name, r.ports[name], err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	started = time.Now()
	r.phase.Store(2)
	r.t.Cleanup(func() { n.Abort() })
	if r.spec.EarlyLoad {
		r.mu.Lock()
		r.nodes[name] = n
		r.mu.Unlock()
		r.publish()
	}
	for !n.Ready() {
		if time.Now().After(deadline) {
			r.t.Fatalf("restarted %s not Ready within %v", name, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
	ready = time.Now()
	r.phase.Store(3)
	r.t.Logf("restarted %s Ready; instance seen by the others at that moment: %s", name, r.instanceSeen(n))
	r.mu.Lock()
	r.nodes[name] = n
	r.mu.Unlock()
	r.publish()
	return n, started, ready
}

// instanceSeen says, for every live node, whether its member list holds the
// instance id of n (the restarted process) or still an older one.
func (r *loadRun) instanceSeen(n *node.Node) string {
	var self string
	for _, m := range n.Members() {
		if m.Self {
			self = m.ID
		}
	}
	var parts []string
	for _, o := range r.liveNodes() {
		got := "absent"
		for _, m := range o.Members() {
			if m.Name == n.Name() {
				got = "old instance"
				if m.ID == self {
					got = "new instance"
				}
				got += " (" + m.State
				if m.Reason != "" {
					got += ": " + m.Reason
				}
				got += ")"
			}
		}
		parts = append(parts, o.Name()+": "+got)
	}
	return strings.Join(parts, ", ")
}

// loadSummary is what the callers counted.
type loadSummary struct {
	limit     int64
	keys      int
	admitted  []int64
	lost      []int64  // per key: calls whose answer may have been lost (see loadRun.lost)
	over      int      // keys admitted more than the limit
	maxKey    int64    // largest admitted count of one key
	extra     int64    // sum over keys of the admissions above the limit
	under     int      // keys admitted less than the limit
	underWhy  []string // for the first keys under the limit: the Remaining values no admission reported
	routes    map[string]int64
	admits    map[string]int64
	phases    []string                       // admissions by route, errors and max latency of each phase that had calls
	phaseMax  [len(phaseNames)]time.Duration // max latency of the calls that ended in each phase
	errs      int64
	stopped   int64
	firstErrs []string
	maxLat    time.Duration
	maxLatAt  time.Duration
	slow      int64
	checks    int64
}

func (r *loadRun) summary() loadSummary {
	s := loadSummary{limit: r.spec.Limit.Limit, keys: len(r.keys), routes: map[string]int64{}, admits: map[string]int64{}}
	for k := range r.keys {
		a := r.admitted[k].Load()
		s.admitted = append(s.admitted, a)
		s.lost = append(s.lost, r.lost[k].Load())
		s.maxKey = max(s.maxKey, a)
		if a > s.limit {
			s.over++
			s.extra += a - s.limit
		}
		if a < s.limit {
			s.under++
			if len(s.underWhy) < 5 && s.limit <= 64 {
				var missing []int64
				seen := r.remSeen[k].Load()
				for i := range s.limit {
					if seen&(1<<i) == 0 {
						missing = append(missing, i)
					}
				}
				s.underWhy = append(s.underWhy, fmt.Sprintf("%s admitted %d (%d calls whose answer may have been lost), no admission reported remaining %v", r.keys[k], a, r.lost[k].Load(), missing))
			}
		}
	}
	for i := range r.routes {
		if c := r.routes[i].Load(); c > 0 {
			name := node.Route(i).String()
			s.routes[name] = c
			s.admits[name] = r.routeAdmit[i].Load()
			s.checks += c
		}
	}
	for p, name := range phaseNames {
		var parts []string
		for i := range r.phaseAdmit[p] {
			if c := r.phaseAdmit[p][i].Load(); c > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", node.Route(i), c))
			}
		}
		lat := time.Duration(r.phaseLat[p].Load())
		s.phaseMax[p] = lat
		if lat > 0 {
			if len(parts) == 0 {
				parts = []string{"none"}
			}
			s.phases = append(s.phases, fmt.Sprintf("%s: admitted %s; errors %d; max latency %v",
				name, strings.Join(parts, ", "), r.phaseStop[p].Load(), lat.Round(time.Millisecond)))
		}
	}
	s.errs, s.stopped = r.errs.Load(), r.stopped.Load()
	r.errMu.Lock()
	s.firstErrs = slices.Clone(r.firstErrs)
	r.errMu.Unlock()
	s.maxLat, s.maxLatAt = time.Duration(r.maxLat.Load()), time.Duration(r.maxLatAt.Load())
	s.slow = r.slow.Load()
	return s
}

func (s loadSummary) String() string {
	return fmt.Sprintf("%d checks; keys over the limit %d of %d, max per key %d (limit %d), extra admissions %d, keys under the limit %d %v; routes %v, admitted by route %v; by phase [%s]; errors %d, ErrStopped %d; max latency %v (call began at +%v), calls over %v: %d",
		s.checks, s.over, s.keys, s.maxKey, s.limit, s.extra, s.under, s.underWhy, s.routes, s.admits, strings.Join(s.phases, "; "), s.errs, s.stopped,
		s.maxLat.Round(time.Microsecond), s.maxLatAt.Round(time.Millisecond), slowCall, s.slow)
}

// rate returns the checks completed per second in [from, to), both taken from
// the throughput series (rounded to whole buckets).
func (r *loadRun) rate(from, to time.Time) float64 {
	b0, b1 := int(from.Sub(r.start)/seriesStep), int(to.Sub(r.start)/seriesStep)
	b0, b1 = max(b0, 0), min(b1, len(r.series))
	if b1 <= b0 {
		return 0
	}
	var n int64
	for b := b0; b < b1; b++ {
		n += r.series[b].Load()
	}
	return float64(n) / (float64(b1-b0) * seriesStep.Seconds())
}

// seriesAround returns the throughput series from before to after around at, in
// checks per bucket, formatted for the log.
func (r *loadRun) seriesAround(at time.Time, before, after time.Duration) string {
	b0 := max(int(at.Add(-before).Sub(r.start)/seriesStep), 0)
	b1 := min(int(at.Add(after).Sub(r.start)/seriesStep), len(r.series))
	mid := int(at.Sub(r.start) / seriesStep)
	var sb strings.Builder
	for b := b0; b < b1; b++ {
		if b == mid {
			sb.WriteString("| ")
		}
		fmt.Fprintf(&sb, "%d ", r.series[b].Load())
	}
	return strings.TrimSpace(sb.String())
}

// join starts a new member named name, joining the live nodes, and puts it in
// the callers' live set as soon as New returns, before it reports Ready (a
// client that does not wait for readiness). It returns the node.
func (r *loadRun) join(name string) *node.Node {
	r.t.Helper()
	cfg := r.base
	cfg.Name = name
	for _, m := range r.liveNodes() {
		cfg.Join = append(cfg.Join, m.GossipAddr())
	}
	n, err := node.New(cfg)
	if err != nil {
		r.t.Fatalf("join %s: %v", name, err)
	}
	r.t.Cleanup(func() { n.Abort() })
	r.mu.Lock()
	r.nodes[name] = n
	r.names = append(r.names, name)
	r.mu.Unlock()
	r.publish()
	return n
}

// waitAdmitted waits until the callers were admitted at least total hits in
// all, failing the test after within.
func (r *loadRun) waitAdmitted(total int64, within time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		sum := int64(0)
		for k := range r.keys {
			sum += r.admitted[k].Load()
		}
		if sum >= total {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("only %d of %d hits admitted within %v", sum, total, within)
		}
		time.Sleep(time.Millisecond) // poll: admissions have no event to wait on
	}
}
