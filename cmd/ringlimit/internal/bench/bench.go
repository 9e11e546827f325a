// Package bench drives load against a ringlimit cluster and checks that the
// cluster never admits more than its limits allow.
//
// Run starts callers that draw keys (uniform, Zipf or hot keys, seeded) and send checks
// to the targets, either in a closed loop (Concurrency callers, each sending its
// next check when the previous one is answered) or in an open loop (checks
// scheduled at Rate per second, sent by up to Concurrency callers; latency is
// measured from the scheduled send time, so a stalled cluster shows up as
// latency instead of silently lowering the offered load — no coordinated
// omission). Latencies go to an HDR histogram per target (callers batch them),
// merged for the totals, and checks are counted per target and route, so that
// a run with callers on every node shows each node's figures apart: the
// owner's own callers, decided locally in microseconds, would otherwise hide
// how slow the forwarded checks of the other nodes' callers are. Admitted hits
// are counted per key and each key's count is compared with MaxAdmitted over
// the run's span.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/internal/cputime"
	"github.com/ringlimit/ringlimit/node"
)

// ErrOverBound is returned by Report.Err when some key was admitted more hits
// than MaxAdmitted allows: the cluster broke its limit.
var ErrOverBound = errors.New("bench: admitted more than the limit allows")

// ErrChecksFailed is returned by Report.Err when some checks were not decided.
var ErrChecksFailed = errors.New("bench: checks failed")

// Defaults of Options.
const (
	DefaultKeys        = 1000
	DefaultZipfS       = 1.1
	DefaultDuration    = 10 * time.Second
	DefaultConcurrency = 64
	DefaultSeed        = 1
	// MaxKeys bounds Options.Keys: the per-key counters take 8 bytes and a bit
	// per key.
	MaxKeys = 10_000_000
	// maxLatency is the highest latency the histogram tracks; slower checks are
	// recorded as this value (and Report.Latency.Max shows it).
	maxLatency = int64(10 * time.Minute)
)

// DefaultPrefix returns the key prefix of a run started at now: "bench:<unix
// ns>:", so a run never meets the state an earlier run left in a cluster.
func DefaultPrefix(now time.Time) string {
	return "bench:" + strconv.FormatInt(now.UnixNano(), 10) + ":"
}

// Options configures Run. Zero values take the documented defaults.
type Options struct {
	// Targets are the entry points; caller i sends to Targets[i % len].
	// At least one is required.
	Targets []target.Target
	// Limit is applied to every key; it must be valid for MaxAdmitted.
	Limit algo.Limit
	// Hits per check; 0 means 1.
	Hits int64
	// Keys is the number of distinct keys, 1..MaxKeys; 0 means DefaultKeys.
	Keys int
	// Dist is the key distribution; 0 means Uniform.
	Dist Dist
	// ZipfS is the Zipf exponent (> 1); 0 means DefaultZipfS.
	ZipfS float64
	// HotKeys is, under Hot, how many keys are hot (the first ones), 1..Keys;
	// 0 means DefaultHotKeys.
	HotKeys int
	// HotShare is, under Hot, the share of checks sent to the hot keys, in
	// (0, 1]; 0 means DefaultHotShare. The rest go uniformly to all Keys keys.
	HotShare float64
	// Seed seeds every caller's generator (caller i uses PCG(Seed, i)); 0 means
	// DefaultSeed. The same seed draws the same keys.
	Seed uint64
	// Duration is how long checks are sent; 0 means DefaultDuration. Checks in
	// flight at the end are awaited, not cancelled.
	Duration time.Duration
	// Concurrency is the number of callers: in a closed loop the number of
	// checks in flight, in an open loop the most in flight. 0 means
	// DefaultConcurrency.
	Concurrency int
	// Rate is the open-loop target in checks per second; 0 means a closed loop.
	Rate float64
	// Prefix is prepended to the key index; empty means DefaultPrefix(time.Now()).
	Prefix string
	// Progress, if not nil, is called from one goroutine about every 100 ms with
	// the time since the start and the checks decided so far. It must not block.
	Progress func(elapsed time.Duration, checks int64)
	// DownAfter is how many consecutive failed checks to one target mark it down:
	// callers then send to the other targets instead and probe the down one with a
	// single check every ProbeInterval (doubling after each failed probe, up to 16
	// times), so a dead target is not hammered with instant failures. 0 means
	// DefaultDownAfter.
	DownAfter int
	// ProbeInterval is the first wait before a down target is probed; 0 means
	// DefaultProbeInterval.
	ProbeInterval time.Duration
	// OnTargetEvent, if not nil, is called when a target is marked down or answers
	// again, from the caller goroutine that saw it. It must not block.
	OnTargetEvent func(TargetEvent)
	// Prefill, when set, sends one check (of Hits) for every key before the
	// timed phase, split over the callers (caller i sends keys i, i+Concurrency,
	// ...), so that the timed phase meets every key already stored: it then
	// measures a cluster that holds Keys keys, not one inserting them. Prefill
	// checks are neither timed nor counted in Checks or Throughput (see
	// Report.Prefill); what they admit counts toward each key's bound, which is
	// then computed over Report.Span. Default false.
	Prefill bool
	// PrefillProgress, if not nil, is called from one goroutine about every
	// 100 ms during the prefill, and once at its end, with the number of keys
	// done so far (sent or left unsent; Keys at the end). It must not block.
	PrefillProgress func(done int64)
}

func (o *Options) defaults() error {
	if len(o.Targets) == 0 {
		return errors.New("bench: no targets")
	}
	if o.Hits == 0 {
		o.Hits = 1
	}
	if o.Hits < 0 || o.Hits > algo.MaxHits {
		return fmt.Errorf("bench: %w: hits %d outside 1..%d", algo.ErrInvalidLimit, o.Hits, algo.MaxHits)
	}
	if o.Keys == 0 {
		o.Keys = DefaultKeys
	}
	if o.Keys < 0 || o.Keys > MaxKeys {
		return fmt.Errorf("bench: keys %d outside 1..%d", o.Keys, MaxKeys)
	}
	if o.Dist == 0 {
		o.Dist = Uniform
	}
	if o.ZipfS == 0 {
		o.ZipfS = DefaultZipfS
	}
	if o.HotKeys == 0 {
		o.HotKeys = DefaultHotKeys
	}
	if o.HotShare == 0 {
		o.HotShare = DefaultHotShare
	}
	if o.Seed == 0 {
		o.Seed = DefaultSeed
	}
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.Duration < 0 {
		return fmt.Errorf("bench: duration %v must be > 0", o.Duration)
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Concurrency < 0 {
		return fmt.Errorf("bench: concurrency %d must be > 0", o.Concurrency)
	}
	if o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) {
		return fmt.Errorf("bench: rate %v must be >= 0 checks/s", o.Rate)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix(time.Now())
	}
	if o.DownAfter == 0 {
		o.DownAfter = DefaultDownAfter
	}
	if o.DownAfter < 0 {
		return fmt.Errorf("bench: down-after %d must be > 0", o.DownAfter)
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.ProbeInterval < 0 {
		return fmt.Errorf("bench: probe interval %v must be > 0", o.ProbeInterval)
	}
	if _, err := MaxAdmitted(o.Limit, 0); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if _, err := NewKeyGen(o.keySpec(), rand.New(rand.NewPCG(0, 0))); err != nil {
		return err
	}
	return nil
}

// keySpec is the key distribution o describes.
func (o *Options) keySpec() KeySpec {
	return KeySpec{Dist: o.Dist, Keys: o.Keys, ZipfS: o.ZipfS, HotKeys: o.HotKeys, HotShare: o.HotShare}
}

// Report is the outcome of a run.
type Report struct {
	// Options are the options run, defaults applied (Progress and Targets kept).
	Options Options
	// Checks and Decided are the number of checks decided (allowed or denied):
	// throughput counts these only. Errors counts checks sent but not decided
	// (connection refused, timeouts, error answers); they are not checks.
	Checks, Decided, Errors int64
	// Targets reports, per target in Options.Targets order, what it decided
	// (count, rate, latency, routes), its errors, and when it went down or came
	// back. Their Decided, Routes and Latency add up to the totals.
	Targets []TargetReport
	// Unsent counts open-loop checks not sent because every target was down.
	Unsent int64
	// AdmittedChecks and DeniedChecks split Decided; Admitted is in hits.
	AdmittedChecks, DeniedChecks, Admitted int64
	// Routes counts decided checks by the path that decided them.
	Routes map[node.Route]int64
	// ErrorSamples holds up to 3 distinct error messages.
	ErrorSamples []string
	// Latency holds the latency of decided checks in ns: from send (closed loop)
	// or from the scheduled send time (open loop) to the answer. It is the
	// merge of the targets' histograms.
	Latency *hdrhistogram.Histogram
	// Elapsed is the wall time of the timed phase, from its first check sent to
	// its last answer: Throughput is Checks/Elapsed.
	Elapsed time.Duration
	// Span is the wall time from the first check sent (the prefill's, with
	// Options.Prefill) to the last answer: the span MaxAdmitted is computed over,
	// since the prefill's admissions count toward each key's bound. Without
	// Prefill it equals Elapsed.
	Span time.Duration
	// Prefill reports the prefill phase; zero without Options.Prefill.
	Prefill PrefillReport
	// CPU is the CPU time (user + system, all threads) this process used during
	// the timed phase, when CPUKnown (unix: getrusage). Against the in-process
	// target it is the cluster's and the load generator's together: what a
	// check costs whether or not the callers keep the CPUs busy (a closed loop
	// whose checks wait on the network may leave them idle, and its checks/s
	// then follows latency, not cost). Against --addr targets it is the load
	// generator's alone.
	CPU      time.Duration
	CPUKnown bool
	// Scheduled and Missed are open-loop counts: checks scheduled within
	// Duration, and those never sent because the callers were all busy until the
	// end (the offered rate was not reached).
	Scheduled, Missed int64
	// KeysUsed is the number of keys that saw at least one check.
	KeysUsed int
	// Bound is the sum of MaxAdmitted(Limit, Span) over the keys used.
	Bound int64
	// KeysOverBound counts keys admitted more than KeyBound, the per-key
	// MaxAdmitted. WorstKey and WorstAdmitted name the key with the most admitted
	// hits: every key shares KeyBound, so when any key is over, it is the one
	// furthest over.
	KeysOverBound int
	WorstKey      string
	WorstAdmitted int64
	KeyBound      int64
}

// PrefillReport is the outcome of Options.Prefill: one check per key sent
// before the timed phase.
type PrefillReport struct {
	// Decided and Errors count the prefill's checks decided (allowed or denied)
	// and failed; Admitted is the hits they admitted (included in
	// Report.Admitted). Unsent counts keys not sent: every target was down with
	// no probe due, or ctx ended first. Decided+Errors+Unsent = Options.Keys.
	Decided, Errors, Admitted, Unsent int64
	// Elapsed is the prefill's wall time.
	Elapsed time.Duration
}

// Throughput is the rate of decided checks in checks per second; errors are
// not counted.
func (r *Report) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Checks) / r.Elapsed.Seconds()
}

// Err returns an error wrapping ErrOverBound if any key was admitted more than
// its bound, else one wrapping ErrChecksFailed if any check was not decided,
// else nil.
func (r *Report) Err() error {
	if r.KeysOverBound > 0 {
		return fmt.Errorf("%w: %d keys over their bound of %d hits; key %s admitted %d", ErrOverBound, r.KeysOverBound, r.KeyBound, r.WorstKey, r.WorstAdmitted)
	}
	if r.Errors > 0 {
		return fmt.Errorf("%w: %d errors beside %d decided checks", ErrChecksFailed, r.Errors, r.Checks)
	}
	if r.Prefill.Errors > 0 {
		return fmt.Errorf("%w: %d prefill checks failed", ErrChecksFailed, r.Prefill.Errors)
	}
	return nil
}

// Write prints the report as aligned text.
func (r *Report) Write(w io.Writer) error {
	o := r.Options
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	mode := fmt.Sprintf("closed loop, %d callers", o.Concurrency)
	if o.Rate > 0 {
		mode = fmt.Sprintf("open loop, %.0f checks/s target, up to %d in flight", o.Rate, o.Concurrency)
	}
	dist := o.Dist.String()
	switch o.Dist {
	case Zipf:
		dist += fmt.Sprintf(" s=%v", o.ZipfS)
	case Hot:
		dist += fmt.Sprintf(" (%.4g%% of checks to the first %d keys, the rest uniform over all)", o.HotShare*100, o.HotKeys)
	}
	fmt.Fprintf(tw, "mode\t%s, %d targets\n", mode, len(o.Targets))
	fmt.Fprintf(tw, "limit\t%s %d per %v, burst %d, %d hits per check\n", o.Limit.Kind, o.Limit.Limit, o.Limit.Period, o.Limit.Burst, o.Hits)
	fmt.Fprintf(tw, "keys\t%d %s (seed %d), %d used, prefix %s\n", o.Keys, dist, o.Seed, r.KeysUsed, o.Prefix)
	if o.Prefill {
		p := r.Prefill
		fmt.Fprintf(tw, "prefill\t%d keys in %v (untimed): %d decided, %d admitted hits, %d errors, %d unsent\n",
			o.Keys, p.Elapsed.Round(time.Millisecond), p.Decided, p.Admitted, p.Errors, p.Unsent)
	}
	fmt.Fprintf(tw, "elapsed\t%v\n", r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(tw, "checks\t%d decided (%.0f/s)\n", r.Checks, r.Throughput())
	if r.CPUKnown && r.Checks > 0 {
		fmt.Fprintf(tw, "cpu\t%.2f s, %.2f µs per decided check (user+sys of this process over the timed phase: the load generator, and the cluster only when it runs in this process)\n",
			r.CPU.Seconds(), float64(r.CPU.Nanoseconds())/1e3/float64(r.Checks))
	}
	if o.Rate > 0 {
		fmt.Fprintf(tw, "scheduled\t%d, missed %d, unsent (no live target) %d\n", r.Scheduled, r.Missed, r.Unsent)
	}
	fmt.Fprintf(tw, "errors\t%d (not counted as checks)\n", r.Errors)
	for _, s := range r.ErrorSamples {
		fmt.Fprintf(tw, "  error\t%s\n", s)
	}
	for _, t := range r.Targets {
		state := "up"
		if t.Down {
			state = "DOWN"
		}
		fmt.Fprintf(tw, "target %s\tdecided %d, errors %d, %s at the end\n", t.Name, t.Decided, t.Errors, state)
		for _, ev := range t.Events {
			fmt.Fprintf(tw, "  \t%s\n", ev)
		}
	}
	fmt.Fprintf(tw, "routes\towner %d, forwarded %d, cached denial %d, backup %d, fallback %d\n", r.Routes[node.RouteOwner], r.Routes[node.RouteForwarded], r.Routes[node.RouteCachedDenial], r.Routes[node.RouteBackup], r.Routes[node.RouteFallback])
	if h := r.Latency; h.TotalCount() > 0 {
		p := func(q float64) time.Duration { return time.Duration(h.ValueAtQuantile(q)) }
		fmt.Fprintf(tw, "latency\tp50 %v  p90 %v  p99 %v  p99.9 %v  max %v\n",
			rnd(p(50)), rnd(p(90)), rnd(p(99)), rnd(p(99.9)), rnd(time.Duration(h.Max())))
	}
	fmt.Fprintf(tw, "admitted\t%d hits (%d checks), denied %d checks\n", r.Admitted, r.AdmittedChecks, r.DeniedChecks)
	verdict := "ok"
	if r.KeysOverBound > 0 {
		verdict = fmt.Sprintf("EXCEEDED on %d keys", r.KeysOverBound)
	}
	fmt.Fprintf(tw, "bound\t%d hits over %d keys (%d per key over %v): %s\n", r.Bound, r.KeysUsed, r.KeyBound, r.Span.Round(time.Millisecond), verdict)
	if r.WorstKey != "" {
		fmt.Fprintf(tw, "most admitted key\t%s: %d of %d\n", r.WorstKey, r.WorstAdmitted, r.KeyBound)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return r.writeTargets(w)
}

// writeTargets prints one row per target: what it decided, at what rate and
// latency, and by which route.
func (r *Report) writeTargets(w io.Writer) error {
	if len(r.Targets) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\nper target\tdecided\tchecks/s\tp50\tp99\t%s\t%s\t%s\t%s\t%s\terrors\t\n",
		node.RouteOwner, node.RouteForwarded, node.RouteCachedDenial, node.RouteBackup, node.RouteFallback)
	for _, t := range r.Targets {
		p50, p99 := "-", "-"
		if h := t.Latency; h != nil && h.TotalCount() > 0 {
			p50, p99 = rnd(time.Duration(h.ValueAtQuantile(50))).String(), rnd(time.Duration(h.ValueAtQuantile(99))).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", t.Name, t.Decided, t.Throughput, p50, p99,
			t.Routes[node.RouteOwner], t.Routes[node.RouteForwarded], t.Routes[node.RouteCachedDenial], t.Routes[node.RouteBackup], t.Routes[node.RouteFallback], t.Errors)
	}
	return tw.Flush()
}

func rnd(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond / 10)
}

// admLogSize is how many admitted checks an admLog holds before it adds them
// to the shared counts: 4,096 int32 key indexes (16 KiB) per sender.
const admLogSize = 4096

// admissions counts the checks admitted per key, for the bound check. Senders
// do not add to the counts one check at a time: at a million keys (8 MB of
// counts) that was an atomic add and a cache miss per admitted check, the
// largest cost a 1M-key run had over a 10k-key one in a perf profile of the
// load generator itself. Each sender appends the key to its own admLog
// instead, which adds admLogSize of them at once under mu (plain adds whose
// misses the CPU overlaps).
type admissions struct {
	mu     sync.Mutex
	counts []int64 // admitted checks per key (each took Options.Hits hits)
}

// admLog is one sender's admitted checks not yet in the shared counts; only
// that sender uses it.
type admLog struct {
	to   *admissions
	keys []int32
}

func newAdmLog(to *admissions) *admLog {
	return &admLog{to: to, keys: make([]int32, 0, admLogSize)}
}

// add records one admitted check of key k (0 <= k < MaxKeys).
func (l *admLog) add(k int) {
	l.keys = append(l.keys, int32(k))
	if len(l.keys) == admLogSize {
		l.flush()
	}
}

// flush adds the recorded checks to the shared counts and empties the log.
func (l *admLog) flush() {
	l.to.mu.Lock()
	for _, k := range l.keys {
		l.to.counts[k]++
	}
	l.to.mu.Unlock()
	l.keys = l.keys[:0]
}

// routeSlots sizes the per-route counters, indexed by node.Route: room for
// every route (RouteCachedDenial is the highest) and a few more; a Decision
// with a route beyond them is counted in no route.
const routeSlots = 8

// targetCounts is what one caller counted of the checks it sent to one target.
type targetCounts struct {
	decided, errs int64
	routes        [routeSlots]int64
}

// latBufSize is how many latencies a caller holds before it records them into
// the targets' histograms: 1,024 samples (16 KiB) per caller.
const latBufSize = 1024

// latSample is one decided check's latency in ns and the target that decided it.
type latSample struct {
	target int
	ns     int64
}

// targetHists holds one latency histogram per target, made at its first
// sample. Callers add their samples in batches of latBufSize, taking a
// target's lock once per run of samples for it (a caller keeps to one target
// while it is up), not once per check; memory grows with the targets (about
// 240 KiB each), not with the callers.
type targetHists struct {
	mu []sync.Mutex
	h  []*hdrhistogram.Histogram
}

func newTargetHists(n int) *targetHists {
	return &targetHists{mu: make([]sync.Mutex, n), h: make([]*hdrhistogram.Histogram, n)}
}

// add records the samples, runs of one target under its lock.
func (th *targetHists) add(samples []latSample) {
	for i := 0; i < len(samples); {
		ti := samples[i].target
		th.mu[ti].Lock()
		h := th.h[ti]
		if h == nil {
			h = hdrhistogram.New(1, maxLatency, 3)
			th.h[ti] = h
		}
		for ; i < len(samples) && samples[i].target == ti; i++ {
			h.RecordValue(samples[i].ns)
		}
		th.mu[ti].Unlock()
	}
}

// caller is the state of one sending goroutine; only it writes to it.
type caller struct {
	adm                               *admLog
	hists                             *targetHists
	lat                               []latSample // not yet in hists
	decided, errs, admChecks, denChks int64
	unsent                            int64
	errSample                         []string
	perTarget                         []targetCounts
}

// record adds one decided check's latency, flushing the batch when full.
func (c *caller) record(ti int, ns int64) {
	c.lat = append(c.lat, latSample{target: ti, ns: ns})
	if len(c.lat) == latBufSize {
		c.flushLat()
	}
}

// flushLat records the held latencies into the targets' histograms.
func (c *caller) flushLat() {
	c.hists.add(c.lat)
	c.lat = c.lat[:0]
}

// Run sends load as o describes and returns the report. The error is non-nil for
// invalid options, or when ctx is cancelled (then the partial report is returned
// too). A cluster that breaks its limit is reported by Report.Err.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	// used has one bit per key, set when the key is first sent a check;
	// admitted counts the checks admitted per key. A check reads its key's bit
	// (1M keys: 128 KiB, which stays in cache) and records an admission in
	// its sender's admLog, so that the load generator adds no cache miss of
	// its own per check at a million keys (a word per key, 8 MB, did).
	used := make([]atomic.Uint64, (o.Keys+63)/64)
	admitted := &admissions{counts: make([]int64, o.Keys)}
	var answered atomic.Int64
	callers := make([]*caller, o.Concurrency)
	keyName := func(k int) string { return o.Prefix + strconv.Itoa(k) }

	spanStart := time.Now()
	hs := newHealthSet(o, spanStart)
	// send picks a live target, sends one check of key k and classifies the
	// answer (err is set for a failed check; the code's message for a refusal).
	send := func(pref, k int, adm *admLog) (res node.Decision, ti int, err error, out outcome) {
		ti, probe := hs.pick(pref)
		if ti < 0 {
			return res, ti, nil, notSent
		}
		if w, bit := &used[k>>6], uint64(1)<<(k&63); w.Load()&bit == 0 {
			w.Or(bit)
		}
		res, err = hs.ts[ti].chk.Check(ctx, node.Check{Key: keyName(k), Limit: o.Limit, Hits: o.Hits})
		if err != nil && ctx.Err() != nil {
			if probe {
				hs.result(ti, true, err)
			}
			return res, ti, err, cancelled
		}
		hs.result(ti, probe, err)
		if err != nil {
			return res, ti, err, failed
		}
		if res.Decision.Allowed {
			adm.add(k)
		}
		return res, ti, nil, decided
	}
	hists := newTargetHists(len(o.Targets))
	var pre PrefillReport
	if o.Prefill {
		pre = prefill(ctx, o, send, admitted)
	}

	cpu0, cpuOK := cputime.Process()
	start := time.Now()
	// One check: send, record. lat is measured from 'from'. It returns false
	// when every target is down and no probe is due: nothing was sent.
	do := func(c *caller, pref int, gen KeyGen, from time.Time) bool {
		res, ti, err, out := send(pref, gen.Next(), c.adm)
		lat := int64(time.Since(from))
		switch out {
		case notSent:
			return false
		case cancelled:
			return true
		case failed:
			c.errs++
			c.perTarget[ti].errs++
			if len(c.errSample) < 3 {
				c.errSample = append(c.errSample, hs.ts[ti].name+": "+err.Error())
			}
			return true
		}
		answered.Add(1)
		c.decided++
		pt := &c.perTarget[ti]
		pt.decided++
		c.record(ti, min(max(lat, 1), maxLatency))
		if int(res.Route) < routeSlots {
			pt.routes[res.Route]++
		}
		if res.Decision.Allowed {
			c.admChecks++
		} else {
			c.denChks++
		}
		return true
	}
	// idle waits for the next probe when every target is down, so callers do
	// not spin; it returns false when the run is over.
	idle := func(deadline time.Time) bool {
		wait := min(hs.nextDue(), time.Until(deadline))
		if wait <= 0 {
			return false
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}

	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	var scheduled, missed int64
	var wg sync.WaitGroup
	deadline := start.Add(o.Duration)
	if o.Progress != nil {
		progressDone.Go(func() {
			every100ms(stopProgress, func() { o.Progress(time.Since(start), answered.Load()) })
		})
	}
	var sched chan time.Duration
	if o.Rate > 0 {
		sched = make(chan time.Duration, o.Concurrency)
		interval := float64(time.Second) / o.Rate
		total := int64(math.Ceil(float64(o.Duration) / interval))
		scheduled = total
		wg.Go(func() {
			defer close(sched)
			timer := time.NewTimer(0)
			defer timer.Stop()
			<-timer.C
			for i := int64(0); i < total; i++ {
				due := time.Duration(float64(i) * interval)
				if wait := due - time.Since(start); wait > 0 {
					timer.Reset(wait)
					select {
					case <-timer.C:
					case <-ctx.Done():
						missed = total - i
						return
					}
				}
				if !time.Now().Before(deadline) {
					missed = total - i
					return
				}
				select {
				case sched <- due:
				case <-ctx.Done():
					missed = total - i
					return
				}
			}
		})
	}
	for i := range o.Concurrency {
		c := &caller{adm: newAdmLog(admitted), hists: hists, lat: make([]latSample, 0, latBufSize), perTarget: make([]targetCounts, len(o.Targets))}
		callers[i] = c
		gen, _ := NewKeyGen(o.keySpec(), rand.New(rand.NewPCG(o.Seed, uint64(i))))
		pref := i % len(o.Targets)
		wg.Go(func() {
			if sched != nil {
				for due := range sched {
					if ctx.Err() != nil {
						return
					}
					if !do(c, pref, gen, start.Add(due)) {
						c.unsent++
					}
				}
				return
			}
			for ctx.Err() == nil && time.Now().Before(deadline) {
				if !do(c, pref, gen, time.Now()) && !idle(deadline) {
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, cpuOK1 := cputime.Process()
	span := time.Since(spanStart)
	if !o.Prefill {
		span = elapsed
	}
	close(stopProgress)
	progressDone.Wait()

	r := &Report{
		Options: o, Elapsed: elapsed, Span: span, Prefill: pre, Scheduled: scheduled, Missed: missed,
		CPU: cpu1 - cpu0, CPUKnown: cpuOK && cpuOK1,
		Routes:  map[node.Route]int64{},
		Latency: hdrhistogram.New(1, maxLatency, 3),
	}
	r.Targets = make([]TargetReport, len(o.Targets))
	for i, h := range hs.ts {
		h.mu.Lock()
		r.Targets[i] = TargetReport{Name: h.name, Down: h.down.Load(), Events: h.events, Routes: map[node.Route]int64{}}
		h.mu.Unlock()
	}
	for _, c := range callers {
		c.adm.flush()
		c.flushLat()
		for i, pt := range c.perTarget {
			t := &r.Targets[i]
			t.Decided += pt.decided
			t.Errors += pt.errs
			for rt, n := range pt.routes {
				if n > 0 {
					t.Routes[node.Route(rt)] += n
					r.Routes[node.Route(rt)] += n
				}
			}
		}
		r.Unsent += c.unsent
		r.Decided += c.decided
		r.Errors += c.errs
		r.AdmittedChecks += c.admChecks
		r.DeniedChecks += c.denChks
		for _, s := range c.errSample {
			if len(r.ErrorSamples) < 3 && !contains(r.ErrorSamples, s) {
				r.ErrorSamples = append(r.ErrorSamples, s)
			}
		}
	}
	for i := range r.Targets {
		t := &r.Targets[i]
		t.Latency = hists.h[i]
		if t.Latency == nil {
			t.Latency = hdrhistogram.New(1, maxLatency, 3)
		}
		r.Latency.Merge(t.Latency)
		if elapsed > 0 {
			t.Throughput = float64(t.Decided) / elapsed.Seconds()
		}
	}
	r.Checks = r.Decided
	r.KeyBound, _ = MaxAdmitted(o.Limit, span)
	worst := -1
	for k := range admitted.counts {
		if used[k>>6].Load()&(uint64(1)<<(k&63)) == 0 {
			continue
		}
		r.KeysUsed++
		r.Bound = satAdd(r.Bound, r.KeyBound)
		a := satMul(admitted.counts[k], o.Hits)
		r.Admitted += a
		if a > r.KeyBound {
			r.KeysOverBound++
		}
		if worst < 0 || a > r.WorstAdmitted {
			worst, r.WorstAdmitted = k, a
		}
	}
	if worst >= 0 {
		r.WorstKey = keyName(worst)
	}
	return r, ctx.Err()
}

// outcome is what became of one check sent by Run.
type outcome uint8

const (
	// notSent: every target was down and no probe was due.
	notSent outcome = iota
	// cancelled: ctx ended while the check was in flight; it is not counted.
	cancelled
	// failed: the check was not decided (an error or an error answer).
	failed
	// decided: allowed or denied.
	decided
)

// prefill sends one check per key with send, split over o.Concurrency
// goroutines (goroutine i sends keys i, i+Concurrency, ...), and reports what
// they decided. A key is left unsent when every target is down with no probe
// due, or once ctx has ended.
func prefill(ctx context.Context, o Options, send func(pref, k int, adm *admLog) (node.Decision, int, error, outcome), admitted *admissions) PrefillReport {
	start := time.Now()
	var done, dec, errs, adm, unsent atomic.Int64
	stop := make(chan struct{})
	var progress sync.WaitGroup
	if o.PrefillProgress != nil {
		progress.Go(func() { every100ms(stop, func() { o.PrefillProgress(done.Load()) }) })
	}
	var wg sync.WaitGroup
	for i := range o.Concurrency {
		pref := i % len(o.Targets)
		wg.Go(func() {
			log := newAdmLog(admitted)
			defer log.flush()
			for k := i; k < o.Keys; k += o.Concurrency {
				out := notSent
				var res node.Decision
				if ctx.Err() == nil {
					res, _, _, out = send(pref, k, log)
				}
				switch out {
				case notSent, cancelled:
					unsent.Add(1)
				case failed:
					errs.Add(1)
				case decided:
					dec.Add(1)
					if res.Decision.Allowed {
						adm.Add(o.Hits)
					}
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	progress.Wait()
	return PrefillReport{Decided: dec.Load(), Errors: errs.Load(), Admitted: adm.Load(), Unsent: unsent.Load(), Elapsed: time.Since(start)}
}

// every100ms calls f every 100 ms until stop is closed, then once more.
func every100ms(stop <-chan struct{}, f func()) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			f()
			return
		case <-t.C:
			f()
		}
	}
}

// satMul returns a*b for a, b >= 0, or math.MaxInt64 if that overflows.
func satMul(a, b int64) int64 {
	if b != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
