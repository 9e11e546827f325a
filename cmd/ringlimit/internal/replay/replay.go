// Package replay sends the requests of an access log through a ringlimit cluster,
// limited per client IP, and compares every decision with a single-node
// reference limiter fed the same sequence.
//
// Run partitions the keys (Prefix + client IP) over Workers goroutines by a hash
// of the key, so all requests of one key go through one worker, in log order.
// Each worker sends its requests one at a time, each stamped with the log's
// timestamp (node.Check.CreatedAt), spreading them round-robin over the
// Targets, and applies the same check to its own Reference (one per worker, so no
// lock). A decision that differs from the reference in any field, or a check the
// cluster fails to decide, is a mismatch. Because per-key order and timestamps are
// the same on both sides, a correct cluster gives zero mismatches whatever the
// interleaving of keys.
package replay

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/accesslog"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/node"
)

// ErrMismatch is returned by Report.Err when at least one decision differed from
// the reference or could not be obtained.
var ErrMismatch = errors.New("replay: decisions differ from the reference")

// Reference is the single-node limiter decisions are compared with. Each worker
// owns one, so implementations need not be safe for concurrent use.
type Reference interface {
	// Take applies hits at now (Unix ns) to key under l and returns the decision.
	Take(key string, now, hits int64, l algo.Limit) (algo.Decision, error)
}

// DefaultWorkers is the default number of workers: 8 per CPU, at least 16. Each
// worker has one check in flight, so this bounds the concurrency of a replay.
func DefaultWorkers() int { return max(16, 8*runtime.GOMAXPROCS(0)) }

// DefaultPrefix returns the key prefix of a run started at now: "replay:<unix
// ns>:", so replaying twice into a running cluster never meets the state left by
// an earlier run.
func DefaultPrefix(now time.Time) string {
	return "replay:" + strconv.FormatInt(now.UnixNano(), 10) + ":"
}

// DefaultDetails is the default number of mismatches reported in detail.
const DefaultDetails = 5

// Options configures Run.
type Options struct {
	// Limit is applied to every key. It is validated by the reference on the
	// first check; an invalid Limit makes Run return the reference's error.
	Limit algo.Limit
	// Hits is the hits each request takes; 0 means 1.
	Hits int64
	// Prefix is prepended to the client IP to form the key; empty means
	// DefaultPrefix(time.Now()).
	Prefix string
	// Workers is the number of goroutines sending checks; 0 means
	// DefaultWorkers().
	Workers int
	// Targets are the entry points, used round-robin; at least one is required.
	Targets []target.Target
	// NewReference builds the reference of one worker; required.
	NewReference func() Reference
	// Details is the number of mismatches kept in detail (the first ones in log
	// order); 0 means DefaultDetails, negative means none.
	Details int
}

// Mismatch is one request whose cluster decision differed from the reference.
type Mismatch struct {
	// Line is the request's line in the log; Key and Time (Unix ns) what was sent.
	Line int
	Key  string
	Time int64
	// Target is the entry point the check was sent to.
	Target string
	// Got is the cluster's result (meaningful when Err is nil), Want the
	// reference's decision.
	Got  node.Decision
	Want algo.Decision
	// Err is the error the cluster returned, or a description of a non-OK Code.
	Err error
}

// String describes the mismatch on one line.
func (m Mismatch) String() string {
	ts := time.Unix(0, m.Time).UTC().Format(time.RFC3339)
	if m.Err != nil {
		return fmt.Sprintf("line %d key %s at %s via %s: error %v; reference %s", m.Line, m.Key, ts, m.Target, m.Err, FormatDecision(m.Want))
	}
	return fmt.Sprintf("line %d key %s at %s via %s: got %s (route %s), reference %s", m.Line, m.Key, ts, m.Target, FormatDecision(m.Got.Decision), m.Got.Route.String(), FormatDecision(m.Want))
}

// FormatDecision renders d compactly, durations rounded to the millisecond.
func FormatDecision(d algo.Decision) string {
	return fmt.Sprintf("{allowed=%t limit=%d remaining=%d retry_after=%v reset_after=%v}",
		d.Allowed, d.Limit, d.Remaining, fmtDur(d.RetryAfter), fmtDur(d.ResetAfter))
}

func fmtDur(d time.Duration) string {
	if d == algo.RetryNever {
		return "never"
	}
	return d.String()
}

// Report is the outcome of a replay.
type Report struct {
	// Limit is the limit applied; Prefix the key prefix used.
	Limit  algo.Limit
	Prefix string
	// Requests is the number of checks sent; Keys the number of distinct keys.
	Requests, Keys int
	// Admitted and Denied count the cluster's decisions (errors are neither).
	Admitted, Denied int
	// RefAdmitted is the number the reference admitted.
	RefAdmitted int
	// Mismatches counts decisions that differed from the reference plus Errors.
	Mismatches int
	// Errors counts checks the cluster failed to decide (an error or a non-OK
	// Code); each is also a mismatch.
	Errors int
	// Routes counts decided checks by the path that decided them.
	Routes map[node.Route]int
	// ByOwner counts decided checks by the name of the node that decided them
	// (node.Decision.Owner); "" counts results that did not name it.
	ByOwner map[string]int
	// ByTarget counts checks by the entry point they were sent to.
	ByTarget map[string]int
	// First holds the first mismatches in log order (see Options.Details).
	First []Mismatch
	// Elapsed is the wall time from the first check sent to the last answer.
	Elapsed time.Duration
}

// Throughput is the rate of checks in checks per second (0 when nothing ran).
func (r *Report) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// Err returns nil when every decision matched the reference, else an error
// wrapping ErrMismatch with the counts.
func (r *Report) Err() error {
	if r.Mismatches == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d of %d requests (%d errors)", ErrMismatch, r.Mismatches, r.Requests, r.Errors)
}

// Write prints the report as aligned text.
func (r *Report) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "algorithm\t%s (limit %d per %v, burst %d)\n", r.Limit.Kind, r.Limit.Limit, r.Limit.Period, r.Limit.Burst)
	fmt.Fprintf(tw, "key prefix\t%s\n", r.Prefix)
	fmt.Fprintf(tw, "requests\t%d (%d keys)\n", r.Requests, r.Keys)
	fmt.Fprintf(tw, "admitted\t%d (reference %d)\n", r.Admitted, r.RefAdmitted)
	fmt.Fprintf(tw, "denied\t%d\n", r.Denied)
	fmt.Fprintf(tw, "mismatches\t%d (of which errors %d)\n", r.Mismatches, r.Errors)
	decided := r.Admitted + r.Denied
	for _, rt := range []node.Route{node.RouteOwner, node.RouteForwarded, node.RouteLease, node.RouteCachedDenial, node.RouteBackup, node.RouteFallback, node.RouteUnknown} {
		if n := r.Routes[rt]; n > 0 || rt == node.RouteOwner || rt == node.RouteForwarded {
			fmt.Fprintf(tw, "route %s\t%d (%s)\n", rt.String(), n, pct(n, decided))
		}
	}
	for _, n := range sortedKeys(r.ByOwner) {
		name := n
		if name == "" {
			name = "(not named)"
		}
		fmt.Fprintf(tw, "decided by %s\t%d (%s)\n", name, r.ByOwner[n], pct(r.ByOwner[n], decided))
	}
	for _, n := range sortedKeys(r.ByTarget) {
		fmt.Fprintf(tw, "sent via %s\t%d (%s)\n", n, r.ByTarget[n], pct(r.ByTarget[n], r.Requests))
	}
	fmt.Fprintf(tw, "elapsed\t%v\n", r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(tw, "throughput\t%.0f req/s\n", r.Throughput())
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range r.First {
		if _, err := fmt.Fprintf(w, "MISMATCH %s\n", m); err != nil {
			return err
		}
	}
	if more := r.Mismatches - len(r.First); more > 0 && len(r.First) > 0 {
		_, err := fmt.Fprintf(w, "... and %d more mismatches\n", more)
		return err
	}
	return nil
}

func sortedKeys(m map[string]int) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func pct(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

// Run replays entries and returns the report. The returned error is non-nil
// only when the replay could not run to the end: invalid options, a reference
// error (an invalid Limit), or ctx cancelled. Mismatches are in the report (see
// Report.Err), not in the error.
func Run(ctx context.Context, entries []accesslog.Entry, o Options) (*Report, error) {
	if len(o.Targets) == 0 {
		return nil, errors.New("replay: no targets")
	}
	if o.NewReference == nil {
		return nil, errors.New("replay: no reference")
	}
	if o.Hits == 0 {
		o.Hits = 1
	}
	if o.Hits < 0 || o.Hits > algo.MaxHits {
		return nil, fmt.Errorf("replay: %w: hits %d outside 1..%d", algo.ErrInvalidLimit, o.Hits, algo.MaxHits)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix(time.Now())
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers()
	}
	if o.Details == 0 {
		o.Details = DefaultDetails
	}
	o.Details = max(o.Details, 0)

	// Partition: worker -> indexes into entries, in log order.
	parts := make([][]int, o.Workers)
	keys := map[string]bool{}
	for i, e := range entries {
		keys[e.ClientIP] = true
		h := fnv.New64a()
		h.Write([]byte(e.ClientIP))
		w := int(h.Sum64() % uint64(o.Workers))
		parts[w] = append(parts[w], i)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	results := make([]workerResult, o.Workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range o.Workers {
		wg.Go(func() {
			results[w] = runWorker(ctx, cancel, w, entries, parts[w], o)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}

	r := &Report{
		Limit: o.Limit, Prefix: o.Prefix, Keys: len(keys), Elapsed: elapsed,
		Routes: map[node.Route]int{}, ByTarget: map[string]int{}, ByOwner: map[string]int{},
	}
	for _, wr := range results {
		r.Requests += wr.requests
		r.Admitted += wr.admitted
		r.Denied += wr.denied
		r.RefAdmitted += wr.refAdmitted
		r.Mismatches += wr.mismatches
		r.Errors += wr.errors
		for rt, n := range wr.routes {
			r.Routes[node.Route(rt)] += n
		}
		for o, n := range wr.byOwner {
			r.ByOwner[o] += n
		}
		for t, n := range wr.byTarget {
			r.ByTarget[o.Targets[t].Name] += n
		}
		r.First = append(r.First, wr.first...)
	}
	slices.SortFunc(r.First, func(a, b Mismatch) int { return a.Line - b.Line })
	r.First = r.First[:min(len(r.First), o.Details)]
	return r, nil
}

type workerResult struct {
	requests, admitted, denied, refAdmitted, mismatches, errors int
	routes                                                      [4]int
	byTarget                                                    []int
	byOwner                                                     map[string]int
	first                                                       []Mismatch
}

func runWorker(ctx context.Context, cancel context.CancelCauseFunc, w int, entries []accesslog.Entry, idx []int, o Options) workerResult {
	res := workerResult{byTarget: make([]int, len(o.Targets)), byOwner: map[string]int{}}
	ref := o.NewReference()
	for j, i := range idx {
		if ctx.Err() != nil {
			return res
		}
		e := entries[i]
		c := node.Check{Key: o.Prefix + e.ClientIP, Limit: o.Limit, Hits: o.Hits, CreatedAt: e.Time}
		want, err := ref.Take(c.Key, c.CreatedAt, c.Hits, c.Limit)
		if err != nil {
			cancel(fmt.Errorf("replay: reference: line %d: %w", e.Line, err))
			return res
		}
		if want.Allowed {
			res.refAdmitted++
		}
		t := (w + j) % len(o.Targets)
		got, err := o.Targets[t].Checker.Check(ctx, c)
		if err != nil && ctx.Err() != nil {
			return res // cancelled: not the cluster's fault
		}
		res.requests++
		res.byTarget[t]++
		if err != nil {
			res.errors++
		} else {
			if got.Decision.Allowed {
				res.admitted++
			} else {
				res.denied++
			}
			res.byOwner[got.Owner]++
			if int(got.Route) < len(res.routes) {
				res.routes[got.Route]++
			}
			if got.Decision == want {
				continue
			}
		}
		res.mismatches++
		if len(res.first) < o.Details {
			res.first = append(res.first, Mismatch{Line: e.Line, Key: c.Key, Time: e.Time, Target: o.Targets[t].Name, Got: got, Want: want, Err: err})
		}
	}
	return res
}
