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
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
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

	received0 := make([]int64, len(o.Targets))
	for i, t := range o.Targets {
		if t.Received != nil {
			received0[i] = t.Received()
		}
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
		t.Received = -1
		if f := o.Targets[i].Received; f != nil && elapsed > 0 {
			t.Received = float64(f()-received0[i]) / elapsed.Seconds()
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
