package breaker

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitPast polls until d has passed since start (CoolDown is on the wall
// clock; polling against a deadline, not a fixed sleep, keeps -race runs
// honest).
func waitPast(t *testing.T, start time.Time, d time.Duration) {
	t.Helper()
	deadline := start.Add(d + 5*time.Second)
	for time.Since(start) <= d {
		if time.Now().After(deadline) {
			t.Fatal("clock did not move")
		}
		time.Sleep(time.Millisecond)
	}
}

// FailureThreshold failures open; during CoolDown every call is refused;
// then exactly one probe at a time goes, and SuccessThreshold successful
// probes close it. OnStateChange sees every transition, Stats counts them.
func TestBreakerCycle(t *testing.T) {
	t.Parallel()
	var seen []string
	var mu sync.Mutex
	b := New(Config{FailureThreshold: 2, SuccessThreshold: 2, CoolDown: 30 * time.Millisecond,
		OnStateChange: func(from, to State, _ time.Time) {
			mu.Lock()
			seen = append(seen, from.String()+">"+to.String())
			mu.Unlock()
		}})
	if ok, probe := b.Allow(); !ok || probe {
		t.Fatalf("closed: Allow = %v, %v; want true, false", ok, probe)
	}
	b.Done(false, false)
	if b.State() != Closed {
		t.Fatal("one failure of two opened the breaker")
	}
	opened := time.Now()
	b.Done(false, false)
	if b.State() != Open {
		t.Fatalf("state %v after 2 failures, want open", b.State())
	}
	if ok, _ := b.Allow(); ok || !b.Refusing() {
		t.Fatal("open breaker let a call through during its cool-down")
	}
	waitPast(t, opened, 30*time.Millisecond)
	if b.Refusing() {
		t.Fatal("Refusing after the cool-down")
	}
	ok, probe := b.Allow()
	if !ok || !probe || b.State() != HalfOpen {
		t.Fatalf("after cool-down: Allow = %v, %v, state %v; want the probe, half-open", ok, probe, b.State())
	}
	if ok, _ := b.Allow(); ok {
		t.Fatal("a second probe went while the first was in flight")
	}
	b.Done(true, true)
	if b.State() != HalfOpen {
		t.Fatal("one successful probe of two closed the breaker")
	}
	if ok, probe := b.Allow(); !ok || !probe {
		t.Fatal("no next probe after a successful one")
	}
	b.Done(true, true)
	if b.State() != Closed {
		t.Fatalf("state %v after 2 successful probes, want closed", b.State())
	}
	mu.Lock()
	got := seen
	mu.Unlock()
	want := []string{"closed>open", "open>half_open", "half_open>closed"}
	if len(got) != len(want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("transitions %v, want %v", got, want)
		}
	}
	if st := b.Stats(); st.Switches[Closed][Open] != 1 || st.Switches[Open][HalfOpen] != 1 || st.Switches[HalfOpen][Closed] != 1 {
		t.Errorf("switches %v", st.Switches)
	}
}

// A failed probe opens again; a released probe frees the next caller at
// once; a probe that never reports is given to another caller after CoolDown.
func TestBreakerProbeOutcomes(t *testing.T) {
	t.Parallel()
	const cool = 20 * time.Millisecond
	b := New(Config{CoolDown: cool})
	start := time.Now()
	b.Done(false, false)
	waitPast(t, start, cool)
	if ok, probe := b.Allow(); !ok || !probe {
		t.Fatal("no probe after cool-down")
	}
	reopened := time.Now()
	b.Done(false, true)
	if b.State() != Open {
		t.Fatalf("failed probe left state %v, want open", b.State())
	}
	waitPast(t, reopened, cool)
	if ok, _ := b.Allow(); !ok {
		t.Fatal("no probe after the second cool-down")
	}
	b.Release()
	if ok, probe := b.Allow(); !ok || !probe {
		t.Fatal("released probe did not free the next caller")
	}
	lost := time.Now()
	if ok, _ := b.Allow(); ok {
		t.Fatal("second probe while one is in flight")
	}
	waitPast(t, lost, cool)
	if ok, probe := b.Allow(); !ok || !probe {
		t.Fatal("a probe that never reported held the breaker half-open past its cool-down")
	}
	b.Reset()
	if b.State() != Closed {
		t.Fatal("Reset did not close")
	}
}

// Set: one failure opens a name's breaker, other names are untouched, one
// caller is the probe after the cool-down, and Reset closes it; concurrent
// callers get exactly one probe.
func TestSet(t *testing.T) {
	t.Parallel()
	const cool = 20 * time.Millisecond
	s := NewSet(cool)
	if s.Skip("a") || s.Refusing("a") {
		t.Fatal("empty set skips")
	}
	start := time.Now()
	s.Fail("a")
	if !s.Skip("a") || !s.Refusing("a") || s.Skip("b") {
		t.Fatal("after a's failure: want a skipped, b not")
	}
	waitPast(t, start, cool)
	var through atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if !s.Skip("a") {
				through.Add(1)
			}
		})
	}
	wg.Wait()
	if got := through.Load(); got != 1 {
		t.Fatalf("%d callers went through after the cool-down, want exactly 1 probe", got)
	}
	s.Fail("a") // the probe failed
	if !s.Skip("a") {
		t.Fatal("failed probe did not reopen")
	}
	s.Reset("a")
	if s.Skip("a") || s.open.Load() != 0 {
		t.Fatal("Reset left a open")
	}
}
