package node

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// waitCluster starts three nodes for the wait tests.
func waitCluster(t *testing.T) *testCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := startCluster(ctx, 3, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestWaitSpacing is the fleet's "call a third-party API at N per second"
// case: 64 callers on three nodes Wait on one key of 100 per second (GCRA,
// burst 4) for a few seconds. Every admission is counted on the owner's
// clock (Decision.At): at most the limit's capacity plus rate × time in all
// and in every 100 ms, the gaps between consecutive admissions the emission
// interval, and no error. RINGLIMIT_WAIT_SECONDS sets the length (default
// 3 s; the 10 s run: RINGLIMIT_WAIT_SECONDS=10).
func TestWaitSpacing(t *testing.T) {
	t.Parallel()
	secs := 3 * time.Second
	if v := os.Getenv("RINGLIMIT_WAIT_SECONDS"); v != "" {
		d, err := time.ParseDuration(v + "s")
		if err != nil {
			t.Fatal(err)
		}
		secs = d
	}
	c := waitCluster(t)
	const rate, burst, callers = 100, 4, 64
	l := algo.Limit{Kind: algo.GCRA, Limit: rate, Period: time.Second, Burst: burst}
	T := time.Second / rate
	deadline := time.Now().Add(secs)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	var (
		mu               sync.Mutex
		acts, wakes      []int64 // owner-clock act times, local wake times (Unix ns)
		denied, failures int
		firstErr         error
	)
	var wg sync.WaitGroup
	for i := range callers {
		n := c.Nodes()[i%3]
		wg.Go(func() {
			for ctx.Err() == nil {
				// The wait is bounded by ctx: the owner never books a slot
				// after the deadline.
				d, err := n.Check(ctx, Check{Key: "api", Limit: l, Hits: 1, MaxWait: MaxWait})
				mu.Lock()
				switch {
				case err != nil && ctx.Err() != nil:
				case err != nil:
					failures++
					firstErr = err
				case !d.Allowed:
					denied++ // no slot before the deadline: nothing consumed
					mu.Unlock()
					return
				default:
					acts = append(acts, d.At())
					wakes = append(wakes, time.Now().UnixNano())
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failures > 0 {
		t.Fatalf("%d errors, the first %v; want 0", failures, firstErr)
	}
	slices.Sort(acts)
	slices.Sort(wakes)
	n := int64(len(acts))
	want := int64(secs / T)
	t.Logf("%d admitted in %v (rate × time %d, capacity %d), %d denied at the deadline", n, secs, want, burst+1, denied)
	if n > want+burst+1 || n < want-burst-1-int64(100*time.Millisecond/T) {
		t.Errorf("admitted: got %d, want %d ± %d (and 100 ms for the start)", n, want, burst+1)
	}
	// Every interval of the owner's clock: the GCRA bound.
	window := int64(100 * time.Millisecond)
	for i := range acts {
		j, _ := slices.BinarySearch(acts, acts[i]+window+1)
		if got, max := int64(j-i), int64(rate/10+burst+1); got > max {
			t.Fatalf("%d admissions in the 100 ms from %d, want at most %d", got, acts[i], max)
		}
	}
	p99 := func(ts []int64) time.Duration {
		gaps := make([]int64, 0, len(ts))
		for i := 1; i < len(ts); i++ {
			gaps = append(gaps, ts[i]-ts[i-1])
		}
		slices.Sort(gaps)
		return time.Duration(gaps[len(gaps)*99/100])
	}
	ownerP99, wakeP99 := p99(acts[burst+1:]), p99(wakes[burst+1:])
	t.Logf("gap between admissions after the burst, p99: %v on the owner's clock, %v as the callers woke (emission interval %v)", ownerP99, wakeP99, T)
	if ownerP99 != T {
		t.Errorf("p99 gap on the owner's clock: got %v, want %v (every slot booked, none early)", ownerP99, T)
	}
}

// TestReserveCancelReturnsSlot: a booking cancelled from a node that does
// not own the key gives its slot back on the owner, exactly: the next
// booking acts when the cancelled one would have, not one interval later.
func TestReserveCancelReturnsSlot(t *testing.T) {
	t.Parallel()
	c := waitCluster(t)
	key := "cancel"
	var from *Node
	for _, n := range c.Nodes() {
		if o, _ := n.Owner(key); !o.Self {
			from = n
			break
		}
	}
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second, Burst: 0} // one per 100 ms
	reserve := func() *Reservation {
		t.Helper()
		r, err := from.Reserve(ctx, Check{Key: key, Limit: l, Hits: 1, MaxWait: 10 * time.Second})
		if err != nil || !r.OK() {
			t.Fatalf("Reserve: got %v, %+v, want OK", err, r)
		}
		return r
	}
	reserve() // the capacity
	r1 := reserve()
	r2 := reserve()
	if got, want := r2.Decision().At()-r1.Decision().At(), int64(100*time.Millisecond); got != want {
		t.Fatalf("r2 after r1: got %v, want %v", time.Duration(got), time.Duration(want))
	}
	if r2.Delay() <= 0 || r2.Decision().Route != RouteForwarded {
		t.Fatalf("r2: got delay %v route %v, want a delay, forwarded", r2.Delay(), r2.Decision().Route)
	}
	if err := r2.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	r3 := reserve()
	if got, want := r3.Decision().At(), r2.Decision().At(); got != want {
		t.Errorf("after the cancel: got the slot at %d, want r2's at %d (%v earlier than without the cancel)", got, want, 100*time.Millisecond)
	}
	// r1 is followed by r3: cancelling it gives nothing back.
	if err := r1.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	r4 := reserve()
	if got, want := r4.Decision().At(), r3.Decision().At()+int64(100*time.Millisecond); got != want {
		t.Errorf("after cancelling r1 (followed by r3): got %d, want %d", got, want)
	}
}

// TestWaitDeadline: a wait that cannot be booked before the deadline
// returns at once, consumes nothing and is a timeout; a wait cut short by
// its context gives its slot back; a window algorithm refuses to wait.
func TestWaitDeadline(t *testing.T) {
	t.Parallel()
	c := waitCluster(t)
	n := c.Nodes()[1]
	l := algo.Limit{Kind: algo.TokenBucket, Limit: 1, Period: time.Second, Burst: 1}
	ctx := context.Background()
	if err := n.Wait(ctx, "deadline", l); err != nil {
		t.Fatal(err)
	}
	before, err := n.AllowN(ctx, "deadline", l, 0)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = n.Wait(short, "deadline", l) // the next token is a second away
	if !errors.Is(err, ErrWaitTooLong) || Classify(err) != ClassTimeout {
		t.Fatalf("Wait past the deadline: got %v, want ErrWaitTooLong, a timeout", err)
	}
	if short.Err() != nil {
		t.Errorf("Wait past the deadline returned at the deadline, want at once")
	}
	after, err := n.AllowN(ctx, "deadline", l, 0)
	if err != nil {
		t.Fatal(err)
	}
	if after.ResetAfter > before.ResetAfter {
		t.Errorf("ResetAfter after a refused wait: got %v, want at most %v (nothing consumed)", after.ResetAfter, before.ResetAfter)
	}

	// Cut short during the sleep: the booked token comes back.
	cut, stop := context.WithCancel(ctx)
	r, err := n.Reserve(ctx, Check{Key: "deadline", Limit: l, Hits: 1, MaxWait: 5 * time.Second})
	if err != nil || !r.OK() || r.Delay() <= 0 {
		t.Fatalf("Reserve: got %v, %+v, want OK with a delay", err, r)
	}
	if err := r.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := n.Wait(cut, "deadline", l); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a cancelled context: got %v, want context.Canceled", err)
	}
	again, err := n.AllowN(ctx, "deadline", l, 0)
	if err != nil {
		t.Fatal(err)
	}
	if again.ResetAfter > before.ResetAfter {
		t.Errorf("ResetAfter after a cancelled reservation: got %v, want at most %v", again.ResetAfter, before.ResetAfter)
	}

	win := algo.Limit{Kind: algo.SlidingWindowLog, Limit: 10, Period: time.Second}
	if err := n.Wait(ctx, "window", win); !errors.Is(err, algo.ErrReserveUnsupported) || Classify(err) != ClassInvalid {
		t.Errorf("Wait on a sliding_window_log: got %v, want ErrReserveUnsupported (invalid)", err)
	}
	if err := n.WaitN(ctx, "deadline", l, 2); Classify(err) != ClassInvalid {
		t.Errorf("WaitN above the burst: got %v, want an invalid-input error", err)
	}
}
