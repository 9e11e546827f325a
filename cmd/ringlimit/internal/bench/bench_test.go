package bench

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/internal/cputime"
	"github.com/ringlimit/ringlimit/node"
)

func TestMaxAdmitted(t *testing.T) {
	t.Parallel()
	const m, s = time.Minute, time.Second
	tests := []struct {
		l    algo.Limit
		span time.Duration
		want int64
	}{
		// Windows: L·(ceil(span/P)+1).
		{algo.Limit{Kind: algo.FixedWindow, Limit: 10, Period: m}, 0, 10},
		{algo.Limit{Kind: algo.FixedWindow, Limit: 10, Period: m}, 1, 20},
		{algo.Limit{Kind: algo.FixedWindow, Limit: 10, Period: m}, m, 20},
		{algo.Limit{Kind: algo.FixedWindow, Limit: 10, Period: m}, m + 1, 30},
		{algo.Limit{Kind: algo.SlidingWindowCounter, Limit: 10, Period: m}, 90 * s, 30},
		// Log: L·(floor(span/P)+1).
		{algo.Limit{Kind: algo.SlidingWindowLog, Limit: 10, Period: m}, 0, 10},
		{algo.Limit{Kind: algo.SlidingWindowLog, Limit: 10, Period: m}, m - 1, 10},
		{algo.Limit{Kind: algo.SlidingWindowLog, Limit: 10, Period: m}, m, 20},
		// GCRA: floor(span/(P/L)) + B + 1. redis-cell's "15 30 60": 16 at once.
		{algo.Limit{Kind: algo.GCRA, Limit: 30, Period: m, Burst: 15}, 0, 16},
		{algo.Limit{Kind: algo.GCRA, Limit: 30, Period: m, Burst: 15}, 2*s - 1, 16},
		{algo.Limit{Kind: algo.GCRA, Limit: 30, Period: m, Burst: 15}, 10 * s, 21},
		{algo.Limit{Kind: algo.GCRA, Limit: 10, Period: m, Burst: 0}, m, 11},
		// TokenBucket: B + floor(span/(P/L)).
		{algo.Limit{Kind: algo.TokenBucket, Limit: 10, Period: m, Burst: 5}, 0, 5},
		{algo.Limit{Kind: algo.TokenBucket, Limit: 10, Period: m, Burst: 5}, m, 15},
		// P/L not an integer: the floor makes the bound larger, never smaller.
		{algo.Limit{Kind: algo.TokenBucket, Limit: 7, Period: 100, Burst: 1}, 1000, 1 + 1000/14},
		// Saturates instead of overflowing.
		{algo.Limit{Kind: algo.FixedWindow, Limit: math.MaxInt64 / 2, Period: 1}, 1000, math.MaxInt64},
	}
	for _, tt := range tests {
		got, err := MaxAdmitted(tt.l, tt.span)
		if err != nil {
			t.Errorf("MaxAdmitted(%+v, %v): %v", tt.l, tt.span, err)
			continue
		}
		if got != tt.want {
			t.Errorf("MaxAdmitted(%v %d/%v burst %d, %v): got %d, want %d", tt.l.Kind, tt.l.Limit, tt.l.Period, tt.l.Burst, tt.span, got, tt.want)
		}
	}
}

func TestMaxAdmittedRejectsInvalid(t *testing.T) {
	t.Parallel()
	for _, l := range []algo.Limit{
		{Kind: 0, Limit: 1, Period: 1},
		{Kind: algo.GCRA, Limit: 0, Period: 1},
		{Kind: algo.GCRA, Limit: 1, Period: 0},
		{Kind: algo.GCRA, Limit: 1, Period: 1, Burst: -1},
		{Kind: algo.GCRA, Limit: 10, Period: 9}, // emission interval below 1 ns
	} {
		if _, err := MaxAdmitted(l, time.Second); !errors.Is(err, algo.ErrInvalidLimit) {
			t.Errorf("MaxAdmitted(%+v): got %v, want ErrInvalidLimit", l, err)
		}
	}
	if _, err := MaxAdmitted(algo.Limit{Kind: algo.GCRA, Limit: 1, Period: 1}, -1); err == nil {
		t.Errorf("negative span: got nil error")
	}
}

func TestKeyGenUniform(t *testing.T) {
	t.Parallel()
	const keys, n = 50, 100_000
	g, err := NewKeyGen(KeySpec{Dist: Uniform, Keys: keys}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, keys)
	for range n {
		k := g.Next()
		if k < 0 || k >= keys {
			t.Fatalf("got key %d, want [0, %d)", k, keys)
		}
		counts[k]++
	}
	for k, c := range counts {
		if c < n/keys*8/10 || c > n/keys*12/10 {
			t.Errorf("key %d: got %d draws, want about %d", k, c, n/keys)
		}
	}
}

func TestKeyGenZipf(t *testing.T) {
	t.Parallel()
	const keys, n, s = 1000, 200_000, 1.1
	g, err := NewKeyGen(KeySpec{Dist: Zipf, Keys: keys, ZipfS: s}, rand.New(rand.NewPCG(3, 4)))
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, keys)
	for range n {
		k := g.Next()
		if k < 0 || k >= keys {
			t.Fatalf("got key %d, want [0, %d)", k, keys)
		}
		counts[k]++
	}
	// P(0)/P(1) = 2^s and P(0)/P(3) = 4^s.
	for _, tt := range []struct {
		k    int
		want float64
	}{{1, math.Pow(2, s)}, {3, math.Pow(4, s)}} {
		got := float64(counts[0]) / float64(counts[tt.k])
		if math.Abs(got-tt.want)/tt.want > 0.1 {
			t.Errorf("count(0)/count(%d): got %.2f, want %.2f", tt.k, got, tt.want)
		}
	}
	if counts[0] < n/10 {
		t.Errorf("hottest key: got %d of %d draws, want a heavy head", counts[0], n)
	}
}

// TestKeyGenHot: with 3 hot keys of 1000 and a share of 0.9, the hot keys get
// 0.9 + 0.1*3/1000 of the draws, evenly, and every cold key is drawn (about
// 20 times each). Over 200,000 draws the hot share's standard deviation is
// 0.0007: the 0.005 tolerance is 7 of them, and a generator that ignored the
// share (0.003 or 1.0 hot) or the cold keys could not pass.
func TestKeyGenHot(t *testing.T) {
	t.Parallel()
	const keys, hot, n, share = 1000, 3, 200_000, 0.9
	g, err := NewKeyGen(KeySpec{Dist: Hot, Keys: keys, HotKeys: hot, HotShare: share}, rand.New(rand.NewPCG(5, 6)))
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, keys)
	for range n {
		k := g.Next()
		if k < 0 || k >= keys {
			t.Fatalf("got key %d, want [0, %d)", k, keys)
		}
		counts[k]++
	}
	hotDraws, coldDrawn := 0, 0
	for k, c := range counts {
		if k < hot {
			hotDraws += c
		} else if c > 0 {
			coldDrawn++
		}
	}
	want := share + (1-share)*hot/keys
	if got := float64(hotDraws) / n; math.Abs(got-want) > 0.005 {
		t.Errorf("hot share: got %.4f, want %.4f ± 0.005", got, want)
	}
	for k := range hot {
		if got := float64(counts[k]) / float64(hotDraws); math.Abs(got-1.0/hot) > 0.02 {
			t.Errorf("hot key %d: got %.3f of the hot draws, want %.3f ± 0.02", k, got, 1.0/hot)
		}
	}
	if coldDrawn != keys-hot {
		t.Errorf("got %d cold keys drawn, want all %d", coldDrawn, keys-hot)
	}

	// A share of 1 draws only hot keys.
	g, err = NewKeyGen(KeySpec{Dist: Hot, Keys: keys, HotKeys: 2, HotShare: 1}, rand.New(rand.NewPCG(7, 8)))
	if err != nil {
		t.Fatal(err)
	}
	var seen [2]int
	for range 10_000 {
		k := g.Next()
		if k >= 2 {
			t.Fatalf("share 1: got cold key %d, want only keys 0 and 1", k)
		}
		seen[k]++
	}
	if seen[0] == 0 || seen[1] == 0 {
		t.Errorf("share 1: got draws %v, want both hot keys", seen)
	}
}

func TestKeyGenSeeded(t *testing.T) {
	t.Parallel()
	for _, d := range []Dist{Uniform, Zipf, Hot} {
		spec := KeySpec{Dist: d, Keys: 100, ZipfS: 1.2, HotKeys: 2, HotShare: 0.5}
		a, _ := NewKeyGen(spec, rand.New(rand.NewPCG(9, 9)))
		b, _ := NewKeyGen(spec, rand.New(rand.NewPCG(9, 9)))
		for i := range 1000 {
			if x, y := a.Next(), b.Next(); x != y {
				t.Fatalf("%v draw %d: got %d and %d from the same seed", d, i, x, y)
			}
		}
	}
}

func TestKeyGenRejectsInvalid(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 1))
	for name, spec := range map[string]KeySpec{
		"zipf s=1":       {Dist: Zipf, Keys: 10, ZipfS: 1.0},
		"0 keys":         {Dist: Uniform, Keys: 0},
		"no dist":        {Keys: 10},
		"0 hot keys":     {Dist: Hot, Keys: 10, HotKeys: 0, HotShare: 0.5},
		"hot keys > all": {Dist: Hot, Keys: 10, HotKeys: 11, HotShare: 0.5},
		"hot share 0":    {Dist: Hot, Keys: 10, HotKeys: 1, HotShare: 0},
		"hot share 1.5":  {Dist: Hot, Keys: 10, HotKeys: 1, HotShare: 1.5},
		"hot share NaN":  {Dist: Hot, Keys: 10, HotKeys: 1, HotShare: math.NaN()},
	} {
		if _, err := NewKeyGen(spec, rng); err == nil {
			t.Errorf("%s: got nil error", name)
		}
	}
	if _, err := ParseDist("pareto"); err == nil {
		t.Errorf("ParseDist(pareto): got nil error")
	}
	for _, d := range []Dist{Uniform, Zipf, Hot} {
		if got, err := ParseDist(d.String()); err != nil || got != d {
			t.Errorf("ParseDist(%q): got %v, %v", d, got, err)
		}
	}
}

// fixedWindow is a fake cluster: an exact fixed-window limiter on a real clock,
// or, with cheat, one that admits everything.
type fixedWindow struct {
	mu    sync.Mutex
	state map[string][2]int64
	cheat bool
	delay time.Duration // service time per check, to overload the open loop
}

func (f *fixedWindow) Check(ctx context.Context, c node.Check) (node.Decision, error) {
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return node.Decision{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now().UnixNano()
	win := now / int64(c.Limit.Period)
	s := f.state[c.Key]
	if s[0] != win {
		s = [2]int64{win, 0}
	}
	ok := f.cheat || s[1]+c.Hits <= c.Limit.Limit
	if ok {
		s[1] += c.Hits
	}
	f.state[c.Key] = s
	return node.Decision{Decision: algo.Decision{Allowed: ok, Limit: c.Limit.Limit}, Route: node.RouteOwner}, nil
}

func TestRunClosedLoopWithinBound(t *testing.T) {
	t.Parallel()
	f := &fixedWindow{state: map[string][2]int64{}}
	var ticks int
	r, err := Run(context.Background(), Options{
		Targets:     []target.Target{{Name: "a", Checker: f}, {Name: "b", Checker: f}},
		Limit:       algo.Limit{Kind: algo.FixedWindow, Limit: 5, Period: 50 * time.Millisecond},
		Keys:        20,
		Dist:        Zipf,
		Duration:    300 * time.Millisecond,
		Concurrency: 8,
		Progress:    func(time.Duration, int64) { ticks++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Err() != nil {
		t.Fatalf("got %v, want a run within bounds", r.Err())
	}
	if r.Checks == 0 || r.Checks != r.Decided || r.Decided != r.AdmittedChecks+r.DeniedChecks {
		t.Errorf("got checks=%d decided=%d admitted=%d denied=%d, want consistent counts", r.Checks, r.Decided, r.AdmittedChecks, r.DeniedChecks)
	}
	if r.Admitted > r.Bound || r.Admitted == 0 || r.DeniedChecks == 0 {
		t.Errorf("got admitted=%d bound=%d denied=%d, want 0 < admitted <= bound and denials", r.Admitted, r.Bound, r.DeniedChecks)
	}
	if r.Latency.TotalCount() != r.Decided {
		t.Errorf("got %d latencies, want %d", r.Latency.TotalCount(), r.Decided)
	}
	if ticks == 0 {
		t.Errorf("progress never called")
	}
	if !strings.HasPrefix(r.WorstKey, r.Options.Prefix) || r.WorstAdmitted == 0 || r.WorstAdmitted > r.KeyBound {
		t.Errorf("got most admitted key %q with %d (bound %d), want 0 < admitted <= bound", r.WorstKey, r.WorstAdmitted, r.KeyBound)
	}
	var buf bytes.Buffer
	if err := r.Write(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"closed loop, 8 callers", "p99.9", "bound", ": ok"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestRunDetectsOverAdmission(t *testing.T) {
	t.Parallel()
	f := &fixedWindow{state: map[string][2]int64{}, cheat: true}
	r, err := Run(context.Background(), Options{
		Targets:     []target.Target{{Name: "a", Checker: f}},
		Limit:       algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour},
		Keys:        3,
		Duration:    50 * time.Millisecond,
		Concurrency: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.Err(), ErrOverBound) || r.KeysOverBound != 3 {
		t.Fatalf("got %v with %d keys over, want ErrOverBound on 3 keys", r.Err(), r.KeysOverBound)
	}
	var buf bytes.Buffer
	r.Write(&buf)
	if !strings.Contains(buf.String(), "EXCEEDED on 3 keys") {
		t.Errorf("report does not flag the excess:\n%s", buf.String())
	}
}

func TestRunOpenLoopMeetsRate(t *testing.T) {
	t.Parallel()
	f := &fixedWindow{state: map[string][2]int64{}}
	r, err := Run(context.Background(), Options{
		Targets:  []target.Target{{Name: "a", Checker: f}},
		Limit:    algo.Limit{Kind: algo.FixedWindow, Limit: 100, Period: time.Second},
		Rate:     2000,
		Duration: 250 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Scheduled != 500 {
		t.Errorf("got %d scheduled, want 500", r.Scheduled)
	}
	if r.Checks+r.Errors+r.Missed+r.Unsent != r.Scheduled {
		t.Errorf("got checks %d + errors %d + missed %d + unsent %d, want %d scheduled", r.Checks, r.Errors, r.Missed, r.Unsent, r.Scheduled)
	}
}

// TestRunOpenLoopCountsQueueing overloads one caller (5 ms per check, 1000
// checks/s offered): latency measured from the scheduled time grows with the
// backlog, far beyond the 5 ms service time a closed loop would report.
func TestRunOpenLoopCountsQueueing(t *testing.T) {
	t.Parallel()
	f := &fixedWindow{state: map[string][2]int64{}, delay: 5 * time.Millisecond}
	r, err := Run(context.Background(), Options{
		Targets:     []target.Target{{Name: "a", Checker: f}},
		Limit:       algo.Limit{Kind: algo.FixedWindow, Limit: 100, Period: time.Second},
		Rate:        1000,
		Concurrency: 1,
		Duration:    200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Missed == 0 {
		t.Errorf("got 0 missed, want the overloaded schedule to miss sends")
	}
	if p90 := time.Duration(r.Latency.ValueAtQuantile(90)); p90 < 25*time.Millisecond {
		t.Errorf("got p90 %v, want queueing delay (>= 25ms) counted", p90)
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	t.Parallel()
	f := &fixedWindow{state: map[string][2]int64{}}
	ok := Options{Targets: []target.Target{{Name: "a", Checker: f}}, Limit: algo.Limit{Kind: algo.FixedWindow, Limit: 1, Period: time.Second}, Duration: time.Millisecond}
	for name, mod := range map[string]func(*Options){
		"no targets":  func(o *Options) { o.Targets = nil },
		"bad limit":   func(o *Options) { o.Limit.Period = 0 },
		"keys":        func(o *Options) { o.Keys = -1 },
		"zipf s":      func(o *Options) { o.Dist, o.ZipfS = Zipf, 0.5 },
		"rate":        func(o *Options) { o.Rate = -1 },
		"concurrency": func(o *Options) { o.Concurrency = -2 },
		"hits":        func(o *Options) { o.Hits = -1 },
	} {
		o := ok
		mod(&o)
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%s: got nil error", name)
		}
	}
}

// flaky is a target that fails at once (as a connection refused does) while
// dead is set, and otherwise delegates to a fixedWindow. calls counts every
// check sent to it.
type flaky struct {
	fixedWindow
	dead  atomic.Bool
	calls atomic.Int64
}

func (f *flaky) Check(ctx context.Context, c node.Check) (node.Decision, error) {
	f.calls.Add(1)
	if f.dead.Load() {
		return node.Decision{}, errors.New("connection refused")
	}
	return f.fixedWindow.Check(ctx, c)
}

// TestRunSkipsADeadTarget is issue 13's first point: a killed daemon answers
// every check at once with an error. Those errors are not checks, and callers must
// not spin on it: they move to the live targets and probe the dead one now and then.
func TestRunSkipsADeadTarget(t *testing.T) {
	t.Parallel()
	live := &flaky{fixedWindow: fixedWindow{state: map[string][2]int64{}, delay: 100 * time.Microsecond}}
	dead := &flaky{fixedWindow: fixedWindow{state: map[string][2]int64{}}}
	dead.dead.Store(true)
	var mu sync.Mutex
	var events []TargetEvent
	r, err := Run(context.Background(), Options{
		Targets:       []target.Target{{Name: "live", Checker: live}, {Name: "dead", Checker: dead}},
		Limit:         algo.Limit{Kind: algo.FixedWindow, Limit: 1000, Period: time.Second},
		Duration:      300 * time.Millisecond,
		Concurrency:   8,
		ProbeInterval: 50 * time.Millisecond,
		OnTargetEvent: func(e TargetEvent) { mu.Lock(); events = append(events, e); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	// 8 callers may each have a check in flight when it is marked down (after
	// DownAfter errors); then one probe at a time, at most every 50 ms.
	if got, most := dead.calls.Load(), int64(DefaultDownAfter+8+300/50+1); got > most {
		t.Errorf("got %d checks sent to the dead target, want <= %d (no spinning)", got, most)
	}
	if r.Checks != r.Decided || r.Checks != live.calls.Load() {
		t.Errorf("got checks %d decided %d, want both = %d answered by the live target", r.Checks, r.Decided, live.calls.Load())
	}
	if r.Errors != dead.calls.Load() {
		t.Errorf("got %d errors, want %d (every check sent to the dead target)", r.Errors, dead.calls.Load())
	}
	if len(r.Targets) != 2 || r.Targets[1].Errors != r.Errors || r.Targets[1].Decided != 0 || !r.Targets[1].Down || r.Targets[0].Down {
		t.Fatalf("got targets %+v, want live up and dead down with all the errors", r.Targets)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 1 || !events[0].Down || events[0].Target != "dead" || events[0].Err != "connection refused" {
		t.Errorf("got events %+v, want one down event for dead", events)
	}
	var buf bytes.Buffer
	r.Write(&buf)
	for _, want := range []string{"target dead", "DOWN at the end", "not counted as checks", "consecutive errors"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestRunProbesATargetBack: a target that dies and comes back is used again.
func TestRunProbesATargetBack(t *testing.T) {
	t.Parallel()
	f := &flaky{fixedWindow: fixedWindow{state: map[string][2]int64{}, delay: 100 * time.Microsecond}}
	f.dead.Store(true)
	revived := make(chan struct{})
	r, err := Run(context.Background(), Options{
		Targets:       []target.Target{{Name: "only", Checker: f}},
		Limit:         algo.Limit{Kind: algo.FixedWindow, Limit: 1000, Period: time.Second},
		Duration:      400 * time.Millisecond,
		Concurrency:   4,
		ProbeInterval: 20 * time.Millisecond,
		OnTargetEvent: func(e TargetEvent) {
			if e.Down {
				f.dead.Store(false)
			} else {
				close(revived)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-revived:
	default:
		t.Fatalf("got no 'answering again' event; targets %+v", r.Targets)
	}
	if r.Targets[0].Down || r.Checks == 0 || len(r.Targets[0].Events) != 2 {
		t.Errorf("got %+v with %d checks, want the target up again, deciding, with 2 events", r.Targets[0], r.Checks)
	}
}

// The report's CPU is this process's CPU time during the timed phase only: a
// second of CPU burnt before the run is not in it (it runs alone, not in
// parallel, so no other test's CPU is either), and it cannot exceed the
// elapsed time on every CPU.
func TestRunReportsTimedPhaseCPU(t *testing.T) {
	if _, ok := cputime.Process(); !ok {
		t.Skip("no process CPU time on this platform")
	}
	// Burn 1 s of CPU (not of wall time: other packages' tests may share the
	// CPUs), giving up after 30 s.
	cpu0, _ := cputime.Process()
	for giveUp := time.Now().Add(30 * time.Second); time.Now().Before(giveUp); {
		if now, _ := cputime.Process(); now-cpu0 >= time.Second {
			break
		}
		for x, i := uint64(1), 0; i < 1<<16; x, i = x*6364136223846793005+1, i+1 {
			_ = x
		}
	}
	f := &fixedWindow{state: map[string][2]int64{}}
	r, err := Run(context.Background(), Options{
		Targets:     []target.Target{{Name: "a", Checker: f}},
		Limit:       algo.Limit{Kind: algo.FixedWindow, Limit: 5, Period: 50 * time.Millisecond},
		Keys:        20,
		Duration:    200 * time.Millisecond,
		Concurrency: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	ceiling := r.Elapsed*time.Duration(runtime.NumCPU()) + 50*time.Millisecond // getrusage ticks
	if !r.CPUKnown || r.CPU <= 0 || r.CPU > ceiling {
		t.Fatalf("got CPU %v (known %v) over %v elapsed, want > 0 and <= %v", r.CPU, r.CPUKnown, r.Elapsed, ceiling)
	}
	var buf bytes.Buffer
	if err := r.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "µs per decided check") {
		t.Errorf("report lacks the CPU line:\n%s", buf.String())
	}
}
