package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ringlimit/ringlimit/node"
)

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
	fmt.Fprintf(tw, "routes\towner %d, forwarded %d, lease %d, cached denial %d, backup %d, fallback %d\n", r.Routes[node.RouteOwner], r.Routes[node.RouteForwarded], r.Routes[node.RouteLease], r.Routes[node.RouteCachedDenial], r.Routes[node.RouteBackup], r.Routes[node.RouteFallback])
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
	received := false
	for _, t := range r.Targets {
		received = received || t.Received >= 0
	}
	recv := ""
	if received {
		recv = "fwd msgs in/s\t"
	}
	fmt.Fprintf(tw, "\nper target\tdecided\tchecks/s\tp50\tp99\t%s\t%s\t%s\t%s\t%s\t%s\terrors\t%s\n",
		node.RouteOwner, node.RouteForwarded, node.RouteLease, node.RouteCachedDenial, node.RouteBackup, node.RouteFallback, recv)
	for _, t := range r.Targets {
		recv := ""
		if received {
			recv = "-\t"
			if t.Received >= 0 {
				recv = fmt.Sprintf("%.0f\t", t.Received)
			}
		}
		p50, p99 := "-", "-"
		if h := t.Latency; h != nil && h.TotalCount() > 0 {
			p50, p99 = rnd(time.Duration(h.ValueAtQuantile(50))).String(), rnd(time.Duration(h.ValueAtQuantile(99))).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", t.Name, t.Decided, t.Throughput, p50, p99,
			t.Routes[node.RouteOwner], t.Routes[node.RouteForwarded], t.Routes[node.RouteLease], t.Routes[node.RouteCachedDenial], t.Routes[node.RouteBackup], t.Routes[node.RouteFallback], t.Errors, recv)
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
