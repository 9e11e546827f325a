package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// The fleet harness: N members in one process (real gossip on loopback, the
// peer traffic on the in-memory memNet), callers checking keys through random
// live members the whole time, and every member rolled in turn: closed
// gracefully, then started again under the same name (at a new address, with a
// new instance id, as a rescheduled pod). Every key is a sliding-window log of
// fleetLimit hits per hour; the callers exhaust the keys within seconds, so a
// state lost or duplicated in a handoff shows as admissions over the limit.
//
// Each caller yields the processor after each check (runtime.Gosched), as a
// service's caller waits for its next request between checks. The peer
// traffic is in memory: a forward is a function call on the caller's
// goroutine, so without the yield the callers never park, each runs out its
// 10 ms time slice, and the members' own goroutines (gossip's probes and
// acks, admission handshakes, handoff sends) wait behind 64 of them: on a
// 2-core machine at load average 10, handoffs then arrived up to 1.2 s late
// at 20 members (gates expired: 6 keys over, 6 fallback admissions, the
// slowest call 2.2 s, 513 false deaths) where yielding callers gave 0, 0,
// 370 ms and 4 at the same load. RINGLIMIT_FLEET_SPIN=1 keeps them spinning.
//
// TestFleetRollingRestart runs it at 10 members in the default suite; larger
// fleets run with RINGLIMIT_FLEET set to a list of sizes (make fleet):
//
//	RINGLIMIT_FLEET=20,50 go test -run TestFleetRollingRestart -v -timeout 60m ./node/
//
// Each run prints one line of figures (see fleetResult.String).

const (
	fleetKeys  = 300
	fleetLimit = 50
)

// fleetResult is what one harness run measured.
type fleetResult struct {
	members   int
	callers   int
	seed      uint64
	formed    time.Duration // StartCluster until every member agrees
	rolled    time.Duration // the whole rolling restart
	rebuilds  uint64        // ring rebuilds, all members, formation and roll
	rebuildNs int64         // their time in all
	changes   int           // membership changes the roll made (2 per member)
	goroutine float64       // per member, once formed
	heapBytes float64       // heap in use per member, once formed
	checks    int64
	over      int   // keys admitted past their limit
	overMax   int64 // the most one key was over
	fallbacks int64 // admissions decided by a local fallback
	slowest   time.Duration
	errs      int64
	stuck     string // why the roll stopped early, "" when every member was rolled
	// excess counts the admissions past a key's limit by route and by the
	// phase of the roll they happened in ("leave": a member closing until
	// the others agree; "join": its restart until all agree).
	excess map[string]int64
	// slow counts the checks that took over 1 s, by route (or "error") and
	// phase, as excess does.
	slow   map[string]int64
	logs   map[string]int // log lines at WARN and above, and expired handoff gates, by message
	spread time.Duration
	// join is the longest join phase (a restarted member's New until every
	// member agrees); heard the longest time from a restarted member's
	// New returning to the last member's first Hello to it (the last
	// previous owner to hear of it).
	join, heard time.Duration
	spin        bool // the callers never yield (RINGLIMIT_FLEET_SPIN=1)
	// burst is the members joining at once, then leaving at once, instead
	// of the roll (RINGLIMIT_FLEET_BURST); 0: the roll.
	burst int
	// grow: the fleet forms under load instead of rolling: it starts with 2
	// members, and once the keys are exhausted the others join one at a
	// time (RINGLIMIT_FLEET_GROW=1).
	grow bool
}

// countingHandler counts the log lines of every member by level and message.
type countingHandler struct {
	mu          sync.Mutex
	counts      map[string]int
	first, last map[uint64]time.Time
	gateMax     map[string]time.Duration
}

// spread returns the longest time between the first and the last member
// publishing one ring since the last call.
func (h *countingHandler) spread() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var m time.Duration
	for d, f := range h.first {
		m = max(m, h.last[d].Sub(f))
	}
	h.first, h.last = nil, nil
	return m
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "handoff gate opened" {
		r.Attrs(func(a slog.Attr) bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.gateMax == nil {
				h.gateMax = map[string]time.Duration{}
			}
			if d, ok := a.Value.Any().(time.Duration); ok {
				h.gateMax[r.Message+" "+a.Key] = max(h.gateMax[r.Message+" "+a.Key], d)
				if d > 500*time.Millisecond {
					h.counts[r.Message+" "+a.Key+" > 500ms"]++
				}
			}
			return true
		})
		return nil
	}
	if r.Message == "ring changed" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "digest" {
				d := a.Value.Uint64()
				h.mu.Lock()
				if h.first == nil {
					h.first, h.last = map[uint64]time.Time{}, map[uint64]time.Time{}
				}
				if _, ok := h.first[d]; !ok {
					h.first[d] = r.Time
				}
				h.last[d] = r.Time
				h.mu.Unlock()
			}
			return true
		})
		return nil
	}
	key := r.Level.String() + " " + r.Message
	switch {
	case strings.Contains(r.Message, "gate expired"), strings.Contains(r.Message, "gate held past"):
	case strings.Contains(r.Message, "as failed"):
		key = falseDeath
	case strings.Contains(r.Message, "its probe failed"):
		// A member that closed (the roll) answers "leaving" or refuses the
		// connection; a live member too slow to answer times out.
		key = "node: a member dropped after its probe failed (closed)"
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" && strings.Contains(strings.ToLower(a.Value.String()), "deadline") {
				key = probeDrop
			}
			return true
		})
		h.mu.Lock()
		h.counts[key]++
		h.mu.Unlock()
		return nil
	case strings.Contains(r.Message, "Refuting"):
		key = "memberlist: a member refuted its suspicion"
	case r.Level < slog.LevelWarn:
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "reason" || a.Key == "err" {
			v := a.Value.String()
			key += " " + v[:min(len(v), 50)]
		}
		return true
	})
	h.mu.Lock()
	h.counts[key]++
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) snapshot() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := maps.Clone(h.counts)
	for k, d := range h.gateMax {
		c["longest "+k+" (ms)"] = int(d / time.Millisecond)
	}
	return c
}

func (r fleetResult) String() string {
	perChange := time.Duration(0)
	if r.rebuilds > 0 {
		perChange = time.Duration(r.rebuildNs / int64(r.rebuilds))
	}
	return fmt.Sprintf("members=%d burst=%d grow=%v callers=%d spin=%v seed=%d formed=%v roll=%v rebuilds=%d (%.1f per member per change) rebuild=%v/change "+
		"goroutines/member=%.0f heap/member=%.1fMiB checks=%d over=%d (max +%d) fallback-admissions=%d slowest=%v errors=%d stuck=%q excess=%v slow=%v logs=%v spread=%v join=%v heard=%v",
		r.members, r.burst, r.grow, r.callers, r.spin, r.seed, r.formed.Round(time.Millisecond), r.rolled.Round(time.Millisecond), r.rebuilds,
		float64(r.rebuilds)/float64(r.members)/float64(max(r.changes, 1)), perChange.Round(time.Microsecond),
		r.goroutine, r.heapBytes/(1<<20), r.checks, r.over, r.overMax, r.fallbacks, r.slowest.Round(time.Millisecond), r.errs, r.stuck, r.excess, r.slow, r.logs, r.spread, r.join.Round(time.Millisecond), r.heard.Round(time.Millisecond))
}

// runFleet runs the harness once with size members.
func runFleet(t *testing.T, size, callers int, seed uint64, spin bool, burst int, grow bool) fleetResult {
	res := fleetResult{members: size, callers: callers, seed: seed, spin: spin, burst: burst, grow: grow}
	first := size
	if grow {
		first = 2
	}
	runtime.GC()
	g0 := runtime.NumGoroutine()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)

	mn := newMemNet()
	base := testConfig()
	base.peerNet = mn
	if os.Getenv("RINGLIMIT_FLEET_GOSSIP") == "lan" {
		// DefaultConfig's timings, as a fleet on a LAN runs, instead of
		// FastGossip's.
		base.Gossip = DefaultConfig().Gossip
	}
	base.MembershipDebounce = DefaultConfig().MembershipDebounce
	if v := os.Getenv("RINGLIMIT_FLEET_DEBOUNCE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("RINGLIMIT_FLEET_DEBOUNCE=%q: %v", v, err)
		}
		base.MembershipDebounce = d
	}
	logs := &countingHandler{counts: map[string]int{}}
	base.Logger = slog.New(logs)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(size)*6*time.Second)
	c, err := startCluster(ctx, first, base)
	cancel()
	if err != nil {
		t.Fatalf("startCluster(%d): %v", first, err)
	}
	res.formed = time.Since(start)
	var allMu sync.Mutex
	all := append([]*Node(nil), c.Nodes()...) // every node ever started, for cleanup and stats
	t.Cleanup(func() {
		allMu.Lock()
		defer allMu.Unlock()
		for _, n := range all {
			n.Abort()
		}
	})
	runtime.GC()
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	res.goroutine = float64(runtime.NumGoroutine()-g0) / float64(first)
	res.heapBytes = float64(int64(ms1.HeapInuse)-int64(ms0.HeapInuse)) / float64(first)

	// live holds the members callers may use; a member is taken out before it
	// closes and put back once it is in every ring again.
	var live atomic.Pointer[[]*Node]
	nodes := append([]*Node(nil), c.Nodes()...)
	live.Store(&nodes)
	l := algo.Limit{Kind: algo.SlidingWindowLog, Limit: fleetLimit, Period: time.Hour}
	var admitted [fleetKeys]atomic.Int64
	var checks, fallbacks, errs, slowest atomic.Int64
	var phase atomic.Pointer[string]
	idle := "idle"
	phase.Store(&idle)
	var excessMu sync.Mutex
	res.excess, res.slow = map[string]int64{}, map[string]int64{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ns := *live.Load()
				n := ns[r.IntN(len(ns))]
				k := r.IntN(fleetKeys)
				t0 := time.Now()
				d, err := n.Allow(context.Background(), "fleet:"+strconv.Itoa(k), l)
				took := time.Since(t0)
				for s := slowest.Load(); int64(took) > s && !slowest.CompareAndSwap(s, int64(took)); s = slowest.Load() {
				}
				checks.Add(1)
				if took > time.Second {
					route := "error"
					if err == nil {
						route = d.Route.String()
					}
					excessMu.Lock()
					res.slow[route+"/"+*phase.Load()]++
					excessMu.Unlock()
				}
				if !spin {
					// A caller waits for its next request (a network read)
					// between checks; see TestFleetRollingRestart.
					runtime.Gosched()
				}
				switch {
				case errors.Is(err, ErrStopped):
					continue // the member closed under the caller
				case err != nil:
					if errs.Add(1) <= 3 {
						t.Logf("check on %s: %v", n.Name(), err)
					}
					continue
				}
				if d.Allowed {
					if admitted[k].Add(1) > fleetLimit {
						excessMu.Lock()
						res.excess[fmt.Sprintf("%v/%s", d.Route, *phase.Load())]++
						excessMu.Unlock()
					}
					if d.Route == RouteFallback {
						fallbacks.Add(1)
					}
				}
			}
		})
	}

	// Let the callers exhaust the keys before rolling.
	deadline := time.Now().Add(30 * time.Second)
	for exhausted := 0; exhausted < fleetKeys && time.Now().Before(deadline); {
		exhausted = 0
		for k := range admitted {
			if admitted[k].Load() >= fleetLimit {
				exhausted++
			}
		}
		if exhausted < fleetKeys {
			time.Sleep(10 * time.Millisecond) // poll, bounded by deadline
		}
	}

	rollStart := time.Now()
	if grow {
		res.stuck = growFleet(base, size, &live, &phase, func(n *Node) {
			allMu.Lock()
			all = append(all, n)
			allMu.Unlock()
		})
		res.changes = size - first
		size = 0 // no roll
	}
	if burst > 0 {
		res.stuck = burstFleet(base, burst, &live, &phase, func(n *Node) {
			allMu.Lock()
			all = append(all, n)
			allMu.Unlock()
		})
		res.changes = 2 * burst
		size = 0 // no roll
	}
	for i := range size {
		cur := *live.Load()
		old := cur[0]
		rest := append([]*Node(nil), cur[1:]...)
		live.Store(&rest)
		leave, join := "leave", "join"
		phase.Store(&leave)
		res.spread = max(res.spread, logs.spread())
		if err := old.Close(); err != nil {
			t.Errorf("close %s: %v", old.Name(), err)
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := waitConverged(cctx, rest...)
		ccancel()
		if err != nil {
			res.stuck = fmt.Sprintf("after closing %s (%d of %d): %v; %s", old.Name(), i+1, size, err, ringGaps(rest))
			break
		}
		phase.Store(&join)
		res.spread = max(res.spread, logs.spread())
		cfg := base
		cfg.Name = old.Name()
		cfg.Join = []string{rest[len(rest)/2].GossipAddr()}
		joinStart := time.Now()
		nn, err := New(cfg)
		started := time.Now()
		if err != nil {
			res.stuck = fmt.Sprintf("restart %s: %v", cfg.Name, err)
			break
		}
		allMu.Lock()
		all = append(all, nn)
		allMu.Unlock()
		next := append(rest, nn)
		cctx, ccancel = context.WithTimeout(context.Background(), 30*time.Second)
		err = waitConverged(cctx, next...)
		ccancel()
		if err != nil {
			res.stuck = fmt.Sprintf("after restarting %s (%d of %d): %v; %s", nn.Name(), i+1, size, err, ringGaps(next))
			break
		}
		res.join = max(res.join, time.Since(joinStart))
		res.heard = max(res.heard, nn.hellos.Latest().Sub(started))
		live.Store(&next)
		phase.Store(&idle)
		res.changes += 2
	}
	res.rolled = time.Since(rollStart)
	close(stop)
	wg.Wait()

	allMu.Lock()
	for _, n := range all {
		st := n.Stats()
		res.rebuilds += st.Rebuilds
		res.rebuildNs += int64(st.RebuildTime)
	}
	allMu.Unlock()
	res.checks, res.fallbacks, res.errs = checks.Load(), fallbacks.Load(), errs.Load()
	res.logs = logs.snapshot()
	res.spread = max(res.spread, logs.spread())
	res.slowest = time.Duration(slowest.Load())
	for k := range admitted {
		if over := admitted[k].Load() - fleetLimit; over > 0 {
			res.over++
			res.overMax = max(res.overMax, over)
		}
	}
	return res
}

// growFleet is the harness's formation under load instead of its roll: the
// members join one at a time (named grow-2, grow-3, ...), each once every
// live member agrees on the last, until there are size (phase "join"), as
// a fleet forms while its first instances already serve. added is called
// with each member started. It returns why it stopped early, "" when every
// member joined.
func growFleet(base Config, size int, live *atomic.Pointer[[]*Node], phase *atomic.Pointer[string], added func(*Node)) string {
	join, idle := "join", "idle"
	phase.Store(&join)
	for i := len(*live.Load()); i < size; i++ {
		cur := *live.Load()
		cfg := base
		cfg.Name = fmt.Sprintf("grow-%d", i)
		cfg.Join = []string{cur[i%len(cur)].GossipAddr()}
		n, err := New(cfg)
		if err != nil {
			return fmt.Sprintf("start %s: %v", cfg.Name, err)
		}
		added(n)
		next := append(append([]*Node(nil), cur...), n)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = waitConverged(ctx, next...)
		cancel()
		if err != nil {
			return fmt.Sprintf("after %s joined (%d of %d): %v; %s", cfg.Name, i+1, size, err, ringGaps(next))
		}
		live.Store(&next)
	}
	phase.Store(&idle)
	return ""
}

// burstFleet is the harness's burst instead of its roll: burst new members
// (named burst-0, burst-1, ...) start at once and join the live members
// (phase "join"), then, once every member agrees, as many of the members
// that were live before close at once (phase "leave"), as an autoscaler
// adds and removes instances. added is called with each member started. It
// returns why it stopped early, "" when both changes converged.
func burstFleet(base Config, burst int, live *atomic.Pointer[[]*Node], phase *atomic.Pointer[string], added func(*Node)) string {
	join, leave, idle := "join", "leave", "idle"
	cur := *live.Load()
	if burst >= len(cur) {
		return fmt.Sprintf("burst %d: want fewer than the %d members", burst, len(cur))
	}
	phase.Store(&join)
	fresh := make([]*Node, burst)
	errs := make([]error, burst)
	var wg sync.WaitGroup
	for j := range burst {
		wg.Go(func() {
			cfg := base
			cfg.Name = fmt.Sprintf("burst-%d", j)
			cfg.Join = []string{cur[j%len(cur)].GossipAddr()}
			fresh[j], errs[j] = New(cfg)
		})
	}
	wg.Wait()
	for j, err := range errs {
		if err != nil {
			return fmt.Sprintf("start burst-%d: %v", j, err)
		}
		added(fresh[j])
	}
	next := append(append([]*Node(nil), cur...), fresh...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	err := waitConverged(ctx, next...)
	cancel()
	if err != nil {
		return fmt.Sprintf("after %d joined at once: %v; %s", burst, err, ringGaps(next))
	}
	live.Store(&next)
	phase.Store(&leave)
	gone, rest := next[:burst], append([]*Node(nil), next[burst:]...)
	live.Store(&rest)
	closeErrs := make([]error, burst)
	for j, n := range gone {
		wg.Go(func() { closeErrs[j] = n.Close() })
	}
	wg.Wait()
	if err := errors.Join(closeErrs...); err != nil {
		return fmt.Sprintf("closing %d at once: %v", burst, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
	err = waitConverged(ctx, rest...)
	cancel()
	if err != nil {
		return fmt.Sprintf("after %d left at once: %v; %s", burst, err, ringGaps(rest))
	}
	phase.Store(&idle)
	return ""
}

// ringGaps says, for each of nodes whose ring differs from the set of nodes,
// which member it lacks or has in excess and how its gossip sees that member
// (absent, or its admission state and reason): why a roll stopped.
func ringGaps(nodes []*Node) string {
	want := map[string]bool{}
	for _, n := range nodes {
		want[n.Name()] = true
	}
	var out []string
	for _, n := range nodes {
		seen := map[string]Member{}
		for _, m := range n.Members() {
			seen[m.Name] = m
		}
		in := map[string]bool{}
		for _, m := range n.rs.Load().Snap.Members() {
			in[m.Name] = true
			if !want[m.Name] {
				why := "absent from its gossip"
				if g, ok := seen[m.Name]; ok {
					why = fmt.Sprintf("gossip: %s %s", g.State, g.Reason)
				}
				out = append(out, fmt.Sprintf("%s's ring has %s, closed (%s)", n.Name(), m.Name, why))
			}
		}
		for name := range want {
			if in[name] {
				continue
			}
			m, ok := seen[name]
			why := "absent from its gossip"
			if ok {
				why = fmt.Sprintf("%s %s", m.State, m.Reason)
			}
			out = append(out, fmt.Sprintf("%s's ring lacks %s (%s)", n.Name(), name, why))
		}
		if len(out) > 5 {
			break
		}
	}
	return strings.Join(out, "; ")
}

// fleetSizes returns the sizes in RINGLIMIT_FLEET ("20,50"), or def.
func fleetSizes(t *testing.T, def []int) []int {
	v := os.Getenv("RINGLIMIT_FLEET")
	if v == "" {
		return def
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			t.Fatalf("RINGLIMIT_FLEET=%q: %q is not a member count >= 2", v, f)
		}
		out = append(out, n)
	}
	return out
}

// TestFleetRollingRestart rolls every member of a fleet under load (see the
// harness above): every member closes, restarts under its name and is in
// every ring again within 30 s (else the roll stops there, and the figures
// so far are printed; that fails the test unless gossip declared live
// members dead meanwhile), and no check fails. It prints the figures of
// each run. With RINGLIMIT_FLEET_STRICT=1 (make fleet) it also fails on any
// key over its limit and any fallback admission; by default it logs them:
// when the whole suite runs under -race on a shared 2-core machine, a
// restarted member's handoff gates can expire (HandoffTimeout) before its
// states arrive, and a few keys go over by a hit or two in the join phase
// (8 keys, at most +2, in one such run), which a test failing at random
// would turn into noise hiding every other failure. Run it alone with
// RINGLIMIT_FLEET_STRICT=1 to see a regression: a handoff that lost states
// showed as 5 keys over, up to +87, at 20 members, with no gate expired.
// 10 members and 8 callers by default; RINGLIMIT_FLEET,
// RINGLIMIT_FLEET_SEEDS (default 1) and RINGLIMIT_FLEET_CALLERS choose the
// sizes, the seeds per size and the callers (make fleet).
// RINGLIMIT_FLEET_BURST=k replaces the roll by k members joining at once,
// then k leaving at once (see burstFleet), with the same checks;
// RINGLIMIT_FLEET_GROW=1 by the fleet forming under load (see growFleet).
// The members wait DefaultConfig's MembershipDebounce (100 ms) for more
// changes before they rebuild, as a fleet does, not TestConfig's 5 ms, with
// which 50 members in one process rebuilt about once per member joining or
// leaving (1,400-1,600 rebuilds in all for 10 joining, then 10 leaving, at
// once, against 230-290) and their rings lagged the leaves by seconds;
// RINGLIMIT_FLEET_DEBOUNCE (a duration) sets another.
func TestFleetRollingRestart(t *testing.T) {
	seeds, callers := envCount(t, "RINGLIMIT_FLEET_SEEDS", 1), envCount(t, "RINGLIMIT_FLEET_CALLERS", 8)
	strict := os.Getenv("RINGLIMIT_FLEET_STRICT") == "1"
	spin := os.Getenv("RINGLIMIT_FLEET_SPIN") == "1"
	burst := 0
	if os.Getenv("RINGLIMIT_FLEET_BURST") != "" {
		burst = envCount(t, "RINGLIMIT_FLEET_BURST", 0)
	}
	grow := os.Getenv("RINGLIMIT_FLEET_GROW") == "1"
	for _, size := range fleetSizes(t, []int{10}) {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("members=%d/seed=%d", size, seed+1), func(t *testing.T) {
				res := runFleet(t, size, callers, seed+1, spin, burst, grow)
				t.Log(res)
				fmt.Println("fleet:", res)
				switch deaths := res.logs[falseDeath]; {
				case res.stuck != "" && (strict || deaths == 0):
					t.Errorf("the roll stopped %s", res.stuck)
				case res.stuck != "":
					// Only a machine too loaded to answer gossip probes (the
					// whole suite under -race on 2 cores) gets here.
					t.Logf("the roll stopped %s, after %d false deaths (RINGLIMIT_FLEET_STRICT=1 fails on it)", res.stuck, deaths)
				}
				if res.errs > 0 {
					t.Errorf("%d checks failed, want none", res.errs)
				}
				if res.over == 0 && res.fallbacks == 0 {
					return
				}
				msg := fmt.Sprintf("%d keys over their limit of %d (the most by %d), %d fallback admissions, %d false deaths, %d live members dropped",
					res.over, fleetLimit, res.overMax, res.fallbacks, res.logs[falseDeath], res.logs[probeDrop])
				if strict {
					t.Error(msg + "; want no key over and no fallback admission")
				} else {
					t.Log(msg + " (RINGLIMIT_FLEET_STRICT=1 fails on them)")
				}
			})
		}
	}
}

// falseDeath is the harness's log key of memberlist declaring a member dead:
// no member crashes in the harness, so each is a false death.
const falseDeath = "memberlist: a member marked as failed"

// probeDrop is the harness's log key of a member dropped from the rings
// because gossip said it was gone and its peer probe timed out: a live
// member too slow to answer (a member the roll closed answers at once that
// it is leaving, or refuses the connection).
const probeDrop = "node: a live member dropped: its probe timed out"

// envCount returns the count in environment variable name, or def.
func envCount(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a count >= 1", name, v)
	}
	return n
}
