package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/node"
)

// recorder passes checks to a Checker and records their keys in order.
type recorder struct {
	next interface {
		Check(context.Context, node.Check) (node.Decision, error)
	}
	mu   sync.Mutex
	keys []string
}

func (r *recorder) Check(ctx context.Context, c node.Check) (node.Decision, error) {
	r.mu.Lock()
	r.keys = append(r.keys, c.Key)
	r.mu.Unlock()
	return r.next.Check(ctx, c)
}

// TestRunPrefill: with Prefill every key gets exactly one check before the
// timed phase starts; those checks are not timed or counted as checks, but what
// they admit counts toward the keys' bound over Span.
func TestRunPrefill(t *testing.T) {
	t.Parallel()
	const keys = 37 // not a multiple of Concurrency
	rec := &recorder{next: &fixedWindow{state: map[string][2]int64{}}}
	var last int64
	r, err := Run(context.Background(), Options{
		Targets: []target.Target{{Name: "a", Checker: rec}, {Name: "b", Checker: rec}},
		// One hit per key per day: the prefill admits each key once, the timed
		// phase denies everything (unless a day boundary falls inside the run).
		Limit:           algo.Limit{Kind: algo.FixedWindow, Limit: 1, Period: 24 * time.Hour},
		Keys:            keys,
		Duration:        50 * time.Millisecond,
		Concurrency:     4,
		Prefill:         true,
		PrefillProgress: func(done int64) { last = done },
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Err() != nil {
		t.Fatalf("got %v, want a run within bounds", r.Err())
	}
	if want := (PrefillReport{Decided: keys, Admitted: keys}); r.Prefill.Decided != want.Decided || r.Prefill.Admitted != want.Admitted || r.Prefill.Errors != 0 || r.Prefill.Unsent != 0 {
		t.Errorf("got prefill %+v, want %d decided and admitted, no errors", r.Prefill, keys)
	}
	if last != keys {
		t.Errorf("got last prefill progress %d, want %d", last, keys)
	}
	rec.mu.Lock()
	first := append([]string(nil), rec.keys[:keys]...)
	timed := len(rec.keys) - keys
	rec.mu.Unlock()
	seen := map[string]int{}
	for _, k := range first {
		seen[k]++
	}
	if len(seen) != keys {
		t.Errorf("got %d distinct keys among the first %d checks, want every key once: %v", len(seen), keys, seen)
	}
	if r.KeysUsed != keys || r.Admitted != keys || r.AdmittedChecks != 0 {
		t.Errorf("got %d keys used, %d admitted hits, %d admitted timed checks; want %d, %d, 0", r.KeysUsed, r.Admitted, r.AdmittedChecks, keys, keys)
	}
	if r.Checks == 0 || int64(timed) != r.Checks || r.Latency.TotalCount() != r.Checks {
		t.Errorf("got %d checks, %d timed checks sent, %d latencies; want them equal and > 0 (prefill not counted)", r.Checks, timed, r.Latency.TotalCount())
	}
	if r.Span < r.Elapsed+r.Prefill.Elapsed {
		t.Errorf("got span %v < elapsed %v + prefill %v", r.Span, r.Elapsed, r.Prefill.Elapsed)
	}
	var buf bytes.Buffer
	if err := r.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "prefill            37 keys") {
		t.Errorf("report lacks the prefill line:\n%s", buf.String())
	}

	// Without Prefill the bound's span is the timed phase.
	r, err = Run(context.Background(), Options{
		Targets:  []target.Target{{Name: "a", Checker: &fixedWindow{state: map[string][2]int64{}}}},
		Limit:    algo.Limit{Kind: algo.FixedWindow, Limit: 1, Period: 24 * time.Hour},
		Keys:     keys,
		Duration: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Span != r.Elapsed || r.Prefill != (PrefillReport{}) {
		t.Errorf("got span %v, elapsed %v, prefill %+v; want span = elapsed and no prefill", r.Span, r.Elapsed, r.Prefill)
	}
}

// admitsTwice admits the first two checks of each key and denies the rest: a
// cluster that breaks a limit of one hit per hour.
type admitsTwice struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *admitsTwice) Check(_ context.Context, c node.Check) (node.Decision, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n[c.Key]++
	return node.Decision{Decision: algo.Decision{Allowed: a.n[c.Key] <= 2, Limit: c.Limit.Limit}, Route: node.RouteOwner}, nil
}

// TestRunPrefillCountsInBound: a key admitted once by the prefill and once in
// the timed phase is over a bound of one: the prefill's admission must count,
// or the excess goes unseen.
func TestRunPrefillCountsInBound(t *testing.T) {
	t.Parallel()
	r, err := Run(context.Background(), Options{
		Targets:     []target.Target{{Name: "a", Checker: &admitsTwice{n: map[string]int{}}}},
		Limit:       algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour},
		Keys:        3,
		Duration:    100 * time.Millisecond,
		Concurrency: 2,
		Prefill:     true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.Err(), ErrOverBound) || r.KeysOverBound != 3 || r.Prefill.Admitted != 3 || r.AdmittedChecks != 3 {
		t.Fatalf("got %v with %d keys over, prefill admitted %d, timed admitted %d; want ErrOverBound on 3 keys, 3 and 3",
			r.Err(), r.KeysOverBound, r.Prefill.Admitted, r.AdmittedChecks)
	}
}

// failsFirst fails the first check of every key ending in 7.
type failsFirst struct {
	fixedWindow
	mu   sync.Mutex
	seen map[string]bool
}

func (f *failsFirst) Check(ctx context.Context, c node.Check) (node.Decision, error) {
	f.mu.Lock()
	first := !f.seen[c.Key]
	f.seen[c.Key] = true
	f.mu.Unlock()
	if first && strings.HasSuffix(c.Key, "7") {
		return node.Decision{}, errors.New("injected")
	}
	return f.fixedWindow.Check(ctx, c)
}

// TestRunPrefillErrors: prefill checks that fail are reported and fail the run
// even when the timed phase has no error.
func TestRunPrefillErrors(t *testing.T) {
	t.Parallel()
	r, err := Run(context.Background(), Options{
		Targets:     []target.Target{{Name: "a", Checker: &failsFirst{fixedWindow: fixedWindow{state: map[string][2]int64{}}, seen: map[string]bool{}}}},
		Limit:       algo.Limit{Kind: algo.FixedWindow, Limit: 1000, Period: time.Hour},
		Keys:        20,
		Duration:    20 * time.Millisecond,
		Concurrency: 1,
		Prefill:     true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Prefill.Errors != 2 || r.Prefill.Decided != 18 || r.Errors != 0 {
		t.Fatalf("got prefill %+v and %d timed errors, want 2 prefill errors (keys 7 and 17), 18 decided, 0 timed errors", r.Prefill, r.Errors)
	}
	if !errors.Is(r.Err(), ErrChecksFailed) {
		t.Errorf("got %v, want ErrChecksFailed", r.Err())
	}
}

// TestRunPrefillCancelled: cancelling during the prefill ends the run promptly
// with the partial report; every key is accounted for.
func TestRunPrefillCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const keys = 10_000
	f := &fixedWindow{state: map[string][2]int64{}, delay: time.Millisecond} // 5 s of prefill
	r, err := Run(ctx, Options{
		Targets:         []target.Target{{Name: "a", Checker: f}},
		Limit:           algo.Limit{Kind: algo.FixedWindow, Limit: 1000, Period: time.Hour},
		Keys:            keys,
		Duration:        time.Hour,
		Concurrency:     2,
		Prefill:         true,
		PrefillProgress: func(int64) { cancel() },
	})
	if !errors.Is(err, context.Canceled) || r == nil {
		t.Fatalf("got %v (report %v), want context.Canceled with a report", err, r != nil)
	}
	p := r.Prefill
	if p.Unsent == 0 || p.Decided+p.Errors+p.Unsent != keys {
		t.Errorf("got prefill %+v, want some keys unsent and decided+errors+unsent = %d", p, keys)
	}
	if r.Checks != 0 {
		t.Errorf("got %d timed checks after the cancel, want 0", r.Checks)
	}
}
