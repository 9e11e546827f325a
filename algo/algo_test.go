package algo

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The fixed timeline of the step tests, x/time/rate style: t0 is aligned to a
// second (and a minute), t1..t9 follow one second apart.
var (
	t0 = time.Date(2024, 5, 17, 10, 0, 0, 0, time.UTC).UnixNano()
	t1 = t0 + 1*sec
	t2 = t0 + 2*sec
	t3 = t0 + 3*sec
	t4 = t0 + 4*sec
	t5 = t0 + 5*sec
	t9 = t0 + 9*sec
)

const (
	sec = int64(time.Second)
	ms  = int64(time.Millisecond)
)

// step is one check of a step table and the Decision it must return.
type step struct {
	t         int64 // now, Unix ns
	hits      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

// taker is anything with the Take shape of the value types.
type taker interface {
	Take(now, hits int64, l Limit) Decision
}

// stateTaker adapts *State to taker, failing the test on an error.
type stateTaker struct {
	t *testing.T
	s *State
}

func (st stateTaker) Take(now, hits int64, l Limit) Decision {
	st.t.Helper()
	d, err := st.s.Take(now, hits, l)
	if err != nil {
		st.t.Fatalf("Take(%d, %d, %+v): got error %v, want nil", now, hits, l, err)
	}
	return d
}

// run applies steps in order to x under l and checks every Decision field.
func run(t *testing.T, x taker, l Limit, steps []step) {
	t.Helper()
	for i, s := range steps {
		d := x.Take(s.t, s.hits, l)
		want := Decision{Allowed: s.allowed, Limit: d.Limit, Remaining: s.remaining, RetryAfter: s.retry, ResetAfter: s.reset}
		if d != want {
			t.Errorf("step %d: Take(t0%+v, %d): got %+v, want %+v", i, time.Duration(s.t-t0), s.hits, d, want)
		}
	}
}

// runBoth runs steps on a fresh value type and on a fresh State.
func runBoth(t *testing.T, fresh func() taker, l Limit, steps []step) {
	t.Helper()
	t.Run("value", func(t *testing.T) { run(t, fresh(), l, steps) })
	t.Run("State", func(t *testing.T) { run(t, stateTaker{t, new(State)}, l, steps) })
}

func d(n int64) time.Duration { return time.Duration(n) }

func TestFixedWindow(t *testing.T) {
	l := Limit{Kind: FixedWindow, Limit: 3, Period: time.Second}
	runBoth(t, func() taker { return new(FixedWindowState) }, l, []step{
		{t0, 0, true, 3, 0, 0},                               // peek on a fresh key
		{t0, 1, true, 2, 0, d(sec)},                          // burst within the window
		{t0 + 100*ms, 0, true, 2, 0, d(900 * ms)},            // peek consumes nothing
		{t0 + 100*ms, 0, true, 2, 0, d(900 * ms)},            //
		{t0 + 500*ms, 2, true, 0, 0, d(500 * ms)},            // changing hits
		{t0 + 500*ms, 1, false, 0, d(500 * ms), d(500 * ms)}, // denied: wait for the next window
		{t0 + 500*ms, 4, false, 0, RetryNever, d(500 * ms)},  // hits > Limit never pass
		{t1 - 1, 1, false, 0, 1, 1},                          // last ns of the window
		{t1, 3, true, 0, 0, d(sec)},                          // a hit exactly Period ago no longer counts
		{t1 + 999*ms, 0, true, 0, 0, d(ms)},                  //
		{t2 + 999*ms, 1, true, 2, 0, d(ms)},                  // steady rate: one window skipped
		{t3, 2, true, 1, 0, d(sec)},                          //
		{t3 + 1, 2, false, 1, d(sec - 1), d(sec - 1)},        // denied check changes nothing
		{t3 + 2, 1, true, 0, 0, d(sec - 2)},                  //
	})
}

func TestFixedWindowNegativeTime(t *testing.T) {
	// Windows are floor(now/Period): -1 ns is in [-1 s, 0), not in [0, 1 s).
	l := Limit{Kind: FixedWindow, Limit: 1, Period: time.Second}
	runBoth(t, func() taker { return new(FixedWindowState) }, l, []step{
		{-sec - 1, 1, true, 0, 0, 1},
		{-sec, 1, true, 0, 0, d(sec)},
		{-1, 1, false, 0, 1, 1},
		{0, 1, true, 0, 0, d(sec)},
		{sec - 1, 1, false, 0, 1, 1},
	})
}

func TestFixedWindowClockBackwards(t *testing.T) {
	l := Limit{Kind: FixedWindow, Limit: 2, Period: time.Second}
	runBoth(t, func() taker { return new(FixedWindowState) }, l, []step{
		{t5, 2, true, 0, 0, d(sec)},
		// Back to an earlier window: decided in the stored window of t5 (no
		// credit); the key frees up at t6, as it would have, and the wait
		// counts from the earlier now.
		{t2 + 500*ms, 1, false, 0, d(3500 * ms), d(3500 * ms)},
		{t2 + 500*ms, 0, true, 0, 0, d(3500 * ms)},
		{t3, 2, false, 0, d(3 * sec), d(3 * sec)},
		{t5 + 999*ms, 1, false, 0, d(ms), d(ms)}, // the denied checks changed nothing
		{t5 + sec, 1, true, 1, 0, d(sec)},
		// Back with room in the stored window: admitted there, counted there.
		{t3, 1, true, 0, 0, d(4 * sec)},
		{t5 + sec + 500*ms, 1, false, 0, d(500 * ms), d(500 * ms)},
		{t5 + 2*sec, 2, true, 0, 0, d(sec)},
	})
}

// TestFixedWindowOscillation is the counterexample of a clock alternating
// across a window edge (limit 1 per minute, :59 and :61): at most one hit per
// aligned window, 2 of 10.
func TestFixedWindowOscillation(t *testing.T) {
	l := Limit{Kind: FixedWindow, Limit: 1, Period: time.Minute}
	at59, at61 := t0+59*sec, t0+61*sec
	steps := []step{
		{at59, 1, true, 0, 0, d(sec)},
		{at61, 1, true, 0, 0, d(59 * sec)},
	}
	for range 4 {
		steps = append(steps,
			step{at59, 1, false, 0, d(61 * sec), d(61 * sec)}, // decided in [:60, :120)
			step{at61, 1, false, 0, d(59 * sec), d(59 * sec)})
	}
	runBoth(t, func() taker { return new(FixedWindowState) }, l, steps)
}

func TestSlidingWindowLog(t *testing.T) {
	l := Limit{Kind: SlidingWindowLog, Limit: 3, Period: time.Second}
	runBoth(t, func() taker { return new(SlidingWindowLogState) }, l, []step{
		{t0, 0, true, 3, 0, 0},
		{t0, 1, true, 2, 0, d(sec)},
		{t0 + 100*ms, 2, true, 0, 0, d(sec)},
		{t0 + 100*ms, 0, true, 0, 0, d(sec)},
		{t0 + 200*ms, 1, false, 0, d(800 * ms), d(900 * ms)}, // t0's hit must expire
		{t0 + 200*ms, 2, false, 0, d(900 * ms), d(900 * ms)}, // both t0+100ms hits must expire too
		{t0 + 200*ms, 4, false, 0, RetryNever, d(900 * ms)},  // hits > Limit
		{t1 - 1, 1, false, 0, 1, d(100*ms + 1)},              // the t0 hit counts until t1
		{t1, 1, true, 0, 0, d(sec)},                          // exactly Period ago: no longer counts
		{t1 + 100*ms, 1, true, 1, 0, d(sec)},                 // the t0+100ms pair expired
		{t1 + 150*ms, 2, false, 1, d(850 * ms), d(950 * ms)}, // denied check changes nothing
		{t1 + 150*ms, 1, true, 0, 0, d(sec)},                 //
		{t9, 3, true, 0, 0, d(sec)},                          // steady: all expired
	})
}

func TestSlidingWindowLogClockBackwards(t *testing.T) {
	l := Limit{Kind: SlidingWindowLog, Limit: 2, Period: time.Second}
	runBoth(t, func() taker { return new(SlidingWindowLogState) }, l, []step{
		{t5, 1, true, 1, 0, d(sec)},
		// 3 s back: decided at t5, the newest entry. Admitted, the hit is
		// recorded at t5 (it expires at t6, 4 s from now).
		{t2, 1, true, 0, 0, d(4 * sec)},
		{t2, 1, false, 0, d(4 * sec), d(4 * sec)},
		{t5 + 999*ms, 1, false, 0, d(ms), d(ms)},
		{t5 + sec, 2, true, 0, 0, d(sec)},
		{t4, 2, false, 0, d(3 * sec), d(3 * sec)},
	})
}

// TestSlidingWindowLogReturn is the counterexample :01+ :13+ :00- :14: the
// hit of :13 counts until :23 whatever the clock did in between.
func TestSlidingWindowLogReturn(t *testing.T) {
	l := Limit{Kind: SlidingWindowLog, Limit: 1, Period: 10 * time.Second}
	runBoth(t, func() taker { return new(SlidingWindowLogState) }, l, []step{
		{t0 + 1*sec, 1, true, 0, 0, d(10 * sec)},
		{t0 + 13*sec, 1, true, 0, 0, d(10 * sec)},
		{t0, 1, false, 0, d(23 * sec), d(23 * sec)},
		{t0 + 14*sec, 1, false, 0, d(9 * sec), d(9 * sec)},
		{t0 + 23*sec, 1, true, 0, 0, d(10 * sec)},
	})
}

func TestSlidingWindowLogLimitChanges(t *testing.T) {
	var s SlidingWindowLogState
	big := Limit{Kind: SlidingWindowLog, Limit: 100, Period: time.Second}
	small := big
	small.Limit = 10
	for i := range int64(100) {
		if d := s.Take(t0+i*ms, 1, big); !d.Allowed {
			t.Fatalf("hit %d: got denied, want allowed", i)
		}
	}
	if got := len(s.buf); got != 100 {
		t.Errorf("buffer capacity: got %d, want %d", got, 100)
	}
	// Shrinking keeps all 100 hits counting: nothing is allowed until all but
	// 9 of them have expired (the 91st oldest, at t0+90ms, is the last to go).
	got := s.Take(t0+200*ms, 1, small)
	want := Decision{Limit: 10, RetryAfter: d(890 * ms), ResetAfter: d(899 * ms)}
	if got != want {
		t.Errorf("after shrink: got %+v, want %+v", got, want)
	}
	if got := len(s.buf); got != 100 || s.n != 100 {
		t.Errorf("after a denied check: got capacity %d, %d entries, want 100 and 100 (unchanged)", got, s.n)
	}
	// Growing back within Period finds them all: nothing was credited.
	if got := s.Take(t0+300*ms, 1, big); got.Allowed || got.RetryAfter != d(700*ms) {
		t.Errorf("grown back at t0+300ms: got %+v, want denied for 700ms", got)
	}
	if d := s.Take(t1+90*ms, 1, small); !d.Allowed || d.Remaining != 0 {
		t.Errorf("at t1+90ms: got %+v, want allowed with 0 remaining", d)
	}
	if got := len(s.buf); got > 10 {
		t.Errorf("buffer capacity after an admitted check: got %d, want <= %d", got, 10)
	}
	// Growing again: the capacity follows.
	for i := range int64(50) {
		if d := s.Take(t2+100*ms+i, 1, big); !d.Allowed {
			t.Fatalf("hit %d after growth: got denied, want allowed", i)
		}
	}
	if got, want := s.n, int32(50); got != want {
		t.Errorf("entries: got %d, want %d", got, want)
	}
	// All expire: the next admitted check shrinks the buffer back to a small
	// minimum.
	s.Take(t9, 1, big)
	if got := len(s.buf); got > minLogCap {
		t.Errorf("buffer capacity when empty: got %d, want <= %d", got, minLogCap)
	}
}

func TestSlidingWindowCounter(t *testing.T) {
	l := Limit{Kind: SlidingWindowCounter, Limit: 10, Period: time.Second}
	// fade(c) is when, in the next window, floor(c*(P-e)/P) reaches 0:
	// e = P - ceil(P/c) + 1. ResetAfter = rest of this window + fade(cur).
	runBoth(t, func() taker { return new(SlidingWindowCounterState) }, l, []step{
		{t0, 0, true, 10, 0, 0},
		{t0, 4, true, 6, 0, d(sec + 750*ms + 1)},                          // fade(4) = 750ms+1
		{t0 + 200*ms, 6, true, 0, 0, d(800*ms + 900*ms + 1)},              // fade(10) = 900ms+1
		{t0 + 500*ms, 1, false, 0, d(500*ms + 1), d(500*ms + 900*ms + 1)}, // next window, once 10*(P-e)/P < 10
		{t0 + 500*ms, 11, false, 0, RetryNever, d(500*ms + 900*ms + 1)},
		{t1, 1, false, 0, 1, d(900*ms + 1)},                           // a full Period later: E = 10*P/P = 10
		{t1 + 1, 1, true, 0, 0, d(sec)},                               // E = 9 + 0: allowed; fade(1) = 1ns
		{t1 + 500*ms, 0, true, 4, 0, d(500*ms + 1)},                   // E = floor(10*0.5) + 1 = 6
		{t1 + 500*ms, 5, false, 4, 1, d(500*ms + 1)},                  // needs floor(10*(P-e)/P) <= 4: e > 500ms
		{t1 + 500*ms, 5, false, 4, 1, d(500*ms + 1)},                  // denied check changes nothing
		{t1 + 600*ms, 5, true, 0, 0, d(400*ms + sec - 166666667 + 1)}, // fade(6) = P - ceil(P/6) + 1
		{t3 + 300*ms, 10, true, 0, 0, d(700*ms + 900*ms + 1)},         // two windows later: fresh
	})
}

func TestSlidingWindowCounterClockBackwards(t *testing.T) {
	l := Limit{Kind: SlidingWindowCounter, Limit: 2, Period: time.Second}
	runBoth(t, func() taker { return new(SlidingWindowCounterState) }, l, []step{
		{t5, 2, true, 0, 0, d(sec + 500*ms + 1)},
		// Back to t2: decided as at t5, the start of the stored window (no
		// credit); the waits are those of t5 plus the 3 s step.
		{t2, 1, false, 0, d(3*sec + sec + 1), d(3*sec + sec + 500*ms + 1)},
		{t5 + sec + 1, 1, true, 0, 0, d(sec)}, // floor(2*(P-1)/P) + 0 = 1
		// Back into the window of t5: decided at t6 with prev 2, cur 1.
		{t5 + 500*ms, 0, true, 0, 0, d(500*ms + sec + 1)},
		{t5 + 500*ms, 1, false, 0, d(500*ms + 500*ms + 1), d(500*ms + sec + 1)}, // prev fades to 0 at t6+500ms+1
	})
}

// TestSlidingWindowCounterOscillation is the counterexample of a clock
// alternating across a window edge (limit 1 per minute, :59 and :61): 2 of 10.
func TestSlidingWindowCounterOscillation(t *testing.T) {
	l := Limit{Kind: SlidingWindowCounter, Limit: 1, Period: time.Minute}
	at59, at61 := t0+59*sec, t0+61*sec
	steps := []step{
		{at59, 1, true, 0, 0, d(sec + 1)},
		{at61, 1, true, 0, 0, d(59*sec + 1)}, // floor(1*59/60) + 0 = 0
	}
	for range 4 {
		steps = append(steps,
			step{at59, 1, false, 0, d(61*sec + 1), d(61*sec + 1)}, // as at :60: E = 1 + 1
			step{at61, 1, false, 0, d(59*sec + 1), d(59*sec + 1)}) // E = 0 + 1
	}
	runBoth(t, func() taker { return new(SlidingWindowCounterState) }, l, steps)
}

func TestGCRA(t *testing.T) {
	// redis-cell's own test table (src/cell/mod.rs, it_rate_limits):
	// max_burst 4, 1 per second, so capacity 5.
	l := Limit{Kind: GCRA, Limit: 1, Period: time.Second, Burst: 4}
	s := func(n int64) time.Duration { return d(n * sec) }
	runBoth(t, func() taker { return new(GCRAState) }, l, []step{
		{t0, 6, false, 5, RetryNever, 0}, // never larger than the maximum
		{t0, 1, true, 4, 0, s(1)},
		{t0, 1, true, 3, 0, s(2)},
		{t0, 1, true, 2, 0, s(3)},
		{t0, 1, true, 1, 0, s(4)},
		{t0, 1, true, 0, 0, s(5)},
		{t0, 1, false, 0, s(1), s(5)},
		{t0 + 3000*ms, 1, true, 2, 0, d(3000 * ms)},
		{t0 + 3100*ms, 1, true, 1, 0, d(3900 * ms)},
		{t0 + 4000*ms, 1, true, 1, 0, d(4000 * ms)},
		{t0 + 8000*ms, 1, true, 4, 0, d(1000 * ms)},
		{t0 + 9500*ms, 1, true, 4, 0, d(1000 * ms)},
		{t0 + 9500*ms, 0, true, 4, 0, s(1)}, // peek
		{t0 + 9500*ms, 2, true, 2, 0, s(3)},
		{t0 + 9500*ms, 5, false, 2, s(3), s(3)},
	})
}

func TestGCRAWindowEdgesAndSteadyRate(t *testing.T) {
	// Burst 0: capacity 1, one hit per second, exactly.
	l := Limit{Kind: GCRA, Limit: 1, Period: time.Second, Burst: 0}
	runBoth(t, func() taker { return new(GCRAState) }, l, []step{
		{t0, 1, true, 0, 0, d(sec)},
		{t1 - 1, 1, false, 0, 1, 1},
		{t1, 1, true, 0, 0, d(sec)}, // exactly Period after the last hit
		{t2, 1, true, 0, 0, d(sec)},
		{t3, 1, true, 0, 0, d(sec)},
		{t3 + 10*ms, 2, false, 0, RetryNever, d(990 * ms)},
		{t4 + 10*ms, 0, true, 1, 0, 0},
	})
}

func TestGCRAClockBackwards(t *testing.T) {
	l := Limit{Kind: GCRA, Limit: 1, Period: time.Second, Burst: 2} // capacity 3
	var g GCRAState
	run(t, &g, l, []step{
		{t5, 2, true, 1, 0, d(2 * sec)},
		// 1 s back: the TAT is absolute, so the debt grows by the step
		// (nothing credited) and nothing changes when the clock returns.
		{t4, 0, true, 0, 0, d(3 * sec)},
		{t5, 0, true, 1, 0, d(2 * sec)},
	})
	before := g
	run(t, &g, l, []step{
		// 5 s back: TAT t7 is 7 s away, more than tau: denied with the honest
		// wait (the step plus the normal one) and Remaining 0; nothing stored.
		{t0, 1, false, 0, d(5 * sec), d(7 * sec)},
		{t1, 1, false, 0, d(4 * sec), d(6 * sec)},
		{t0, 0, true, 0, 0, d(7 * sec)},
	})
	if g != before {
		t.Errorf("state after a step back: got %+v, want unchanged %+v", g, before)
	}
	run(t, &g, l, []step{
		{t4, 1, false, 0, d(sec), d(3 * sec)},
		{t5, 1, true, 0, 0, d(3 * sec)},
	})
}

// TestGCRAReturn is the counterexample :01+ :03+ :08+ :00- :07 (2 per 10 s,
// burst 1: T 5 s, tau 10 s): redis-cell's rule denies :07, at most 3 in 8 s.
func TestGCRAReturn(t *testing.T) {
	l := Limit{Kind: GCRA, Limit: 2, Period: 10 * time.Second, Burst: 1}
	s := func(n int64) time.Duration { return d(n * sec) }
	runBoth(t, func() taker { return new(GCRAState) }, l, []step{
		{t0 + 1*sec, 1, true, 1, 0, s(5)}, // TAT :06
		{t0 + 3*sec, 1, true, 0, 0, s(8)}, // TAT :11
		{t0 + 8*sec, 1, true, 0, 0, s(8)}, // TAT :16
		{t0, 1, false, 0, s(11), s(16)},   // :00 < :21 - tau
		{t0 + 7*sec, 1, false, 0, s(4), s(9)},
		{t0 + 11*sec, 1, true, 0, 0, s(10)}, // TAT :21
	})
}

// TestGCRALimitShrinks checks that a smaller capacity leaves the TAT as it is
// (as redis-cell does): the key waits out the larger debt, Remaining 0.
func TestGCRALimitShrinks(t *testing.T) {
	big := Limit{Kind: GCRA, Limit: 1, Period: time.Second, Burst: 9} // tau 10 s
	small := big
	small.Burst = 1 // tau 2 s
	var g GCRAState
	run(t, &g, big, []step{{t0, 10, true, 0, 0, d(10 * sec)}})
	before := g
	run(t, &g, small, []step{
		{t1, 1, false, 0, d(8 * sec), d(9 * sec)},
		{t1, 0, true, 0, 0, d(9 * sec)},
	})
	if g != before {
		t.Errorf("denied under a smaller limit: got %+v, want unchanged %+v", g, before)
	}
	run(t, &g, small, []step{{t9, 1, true, 0, 0, d(2 * sec)}})
}

func TestTokenBucket(t *testing.T) {
	// Capacity 3, refill 1 token per second.
	l := Limit{Kind: TokenBucket, Limit: 1, Period: time.Second, Burst: 3}
	runBoth(t, func() taker { return new(TokenBucketState) }, l, []step{
		{t0, 0, true, 3, 0, 0}, // starts full
		{t0, 1, true, 2, 0, d(sec)},
		{t0, 2, true, 0, 0, d(3 * sec)},
		{t0, 1, false, 0, d(sec), d(3 * sec)},
		{t0, 4, false, 0, RetryNever, d(3 * sec)},
		{t0 + 500*ms, 1, false, 0, d(500 * ms), d(2500 * ms)},
		{t1 - 1, 1, false, 0, 1, d(2*sec + 1)},
		{t1, 1, true, 0, 0, d(3 * sec)}, // exactly one Period later: one token
		{t3 + 500*ms, 0, true, 2, 0, d(500 * ms)},
		{t3 + 500*ms, 3, false, 2, d(500 * ms), d(500 * ms)},
		{t9, 3, true, 0, 0, d(3 * sec)},
		{t9 + 2*sec, 2, true, 0, 0, d(3 * sec)}, // steady rate
	})
}

func TestTokenBucketExactRefill(t *testing.T) {
	// 3 tokens per second: one token every 333,333,333.33 ns. Fractions of
	// a token carry over exactly: no rounding accumulates.
	l := Limit{Kind: TokenBucket, Limit: 3, Period: time.Second, Burst: 3}
	runBoth(t, func() taker { return new(TokenBucketState) }, l, []step{
		{t0, 3, true, 0, 0, d(sec)},
		{t0 + 333333333, 1, false, 0, 1, d(666666667)}, // 0.999999999 tokens
		{t0 + 333333334, 1, true, 0, 0, d(sec)},        // 1.000000002 tokens: 2/3 ns carried
		{t1 + 333333333, 3, false, 2, 1, 1},            // 2.999999999 tokens
		{t1 + 333333334, 3, true, 0, 0, d(sec)},        // exactly 3
		{t2 + 333333334, 0, true, 3, 0, 0},             // full: the excess is not kept
		{t2 + 333333334, 1, true, 2, 0, d(333333334)},
	})
}

func TestTokenBucketClockBackwards(t *testing.T) {
	l := Limit{Kind: TokenBucket, Limit: 1, Period: time.Second, Burst: 3}
	runBoth(t, func() taker { return new(TokenBucketState) }, l, []step{
		{t5, 1, true, 2, 0, d(sec)},
		// 1 s back: decided at t5, the last refill; the bucket is full 1 s
		// after t5, 2 s from now...
		{t4, 0, true, 2, 0, d(2 * sec)},
		// ...and nothing changed when the clock returns.
		{t5, 0, true, 2, 0, d(sec)},
		// 9 s back: the tokens are taken at t5 (no refill taken back or given).
		{t0 - 4*sec, 1, true, 1, 0, d(11 * sec)},
		{t0 - 3*sec, 2, false, 1, d(9 * sec), d(10 * sec)},
		{t5 + sec, 2, true, 0, 0, d(3 * sec)},
	})
}

// TestTokenBucketReturn is the counterexample :05+ :16+ :00- :10 (1 per 10 s,
// burst 1): the bucket was emptied at :16, so :10 is denied until :26.
func TestTokenBucketReturn(t *testing.T) {
	l := Limit{Kind: TokenBucket, Limit: 1, Period: 10 * time.Second, Burst: 1}
	s := func(n int64) time.Duration { return d(n * sec) }
	runBoth(t, func() taker { return new(TokenBucketState) }, l, []step{
		{t0 + 5*sec, 1, true, 0, 0, s(10)},
		{t0 + 16*sec, 1, true, 0, 0, s(10)},
		{t0, 1, false, 0, s(26), s(26)},
		{t0 + 10*sec, 1, false, 0, s(16), s(16)},
		{t0 + 26*sec, 1, true, 0, 0, s(10)},
	})
}

// TestTokenBucketNoLockOut: a bucket full again at its latest time (:47) is
// not drained by an earlier now (:12): the check is decided at :47.
func TestTokenBucketNoLockOut(t *testing.T) {
	l := Limit{Kind: TokenBucket, Limit: 1, Period: time.Second, Burst: 3}
	s := func(n int64) time.Duration { return d(n * sec) }
	runBoth(t, func() taker { return new(TokenBucketState) }, l, []step{
		{t0 + 3*sec, 1, true, 2, 0, s(1)},
		{t0 + 43*sec, 1, true, 2, 0, s(1)},
		{t0 + 47*sec, 1, true, 2, 0, s(1)},
		{t0 + 12*sec, 1, true, 1, 0, s(37)}, // taken at :47: full at :49
		{t0 + 47*sec, 0, true, 1, 0, s(2)},
	})
}

// TestTokenBucketBurstShrinks checks that a smaller Burst credits nothing and
// stores no cap: the key waits until the old debt allows the hits.
func TestTokenBucketBurstShrinks(t *testing.T) {
	big := Limit{Kind: TokenBucket, Limit: 1, Period: time.Second, Burst: 10}
	small := big
	small.Burst = 3
	var tb TokenBucketState
	run(t, &tb, big, []step{{t0, 10, true, 0, 0, d(10 * sec)}})
	before := tb
	// At t1: 9 tokens missing, 1 more needed than a 3-token bucket allows
	// after 7 more seconds.
	run(t, &tb, small, []step{
		{t1, 1, false, 0, d(7 * sec), d(9 * sec)},
		{t1, 0, true, 0, 0, d(9 * sec)},
	})
	if tb != before {
		t.Errorf("denied under a smaller Burst: got %+v, want unchanged %+v", tb, before)
	}
	run(t, &tb, small, []step{
		{t0 + 8*sec, 1, true, 0, 0, d(3 * sec)},
		{t0 + 10*sec, 0, true, 2, 0, d(sec)},
	})
}

// TestDeniedChangesNothing checks, for every Kind, that a denied check leaves
// the State exactly as it was (clock moving forward).
func TestDeniedChangesNothing(t *testing.T) {
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			l := Limit{Kind: k, Limit: 5, Period: time.Second, Burst: 4}
			var s State
			if _, err := s.Take(t0, 5, l); err != nil {
				t.Fatal(err)
			}
			before, _ := s.MarshalBinary()
			for _, hits := range []int64{5, 6, 1000} {
				d, err := s.Take(t0+ms, hits, l)
				if err != nil || d.Allowed {
					t.Fatalf("Take(%d): got %+v, %v, want denied", hits, d, err)
				}
				after, _ := s.MarshalBinary()
				if string(after) != string(before) {
					t.Errorf("Take(%d) denied: got state %x, want %x", hits, after, before)
				}
			}
		})
	}
}

// TestPeekNeverLimited checks that hits == 0 is allowed and consumes nothing,
// even when the key is exhausted.
func TestPeekNeverLimited(t *testing.T) {
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			l := Limit{Kind: k, Limit: 2, Period: time.Second, Burst: 1}
			var s State
			for range 5 {
				s.Take(t0, 1, l)
			}
			for i := range 5 {
				d, err := s.Take(t0+int64(i), 0, l)
				if err != nil || !d.Allowed || d.Remaining != 0 {
					t.Fatalf("peek %d: got %+v, %v, want allowed with 0 remaining", i, d, err)
				}
			}
		})
	}
}

func TestCLThrottle(t *testing.T) {
	// The README example: CL.THROTTLE user123 15 30 60.
	l, hits, err := CLThrottle(15, 30, 60, 1)
	if err != nil {
		t.Fatal(err)
	}
	var s State
	for i := 1; i <= 17; i++ {
		d, err := s.Take(t0, hits, l)
		if err != nil {
			t.Fatal(err)
		}
		want := [5]int64{0, 16, int64(16 - i), -1, int64(2 * i)}
		if i == 17 {
			want = [5]int64{1, 16, 0, 2, 32}
		}
		if got := d.CLThrottleReply(); got != want {
			t.Errorf("call %d: got %v, want %v", i, got, want)
		}
	}
	// Default quantity 1 vs an explicit 0 (peek), 60 s later.
	d, _ := s.Take(t0+60*sec, 0, l)
	if got, want := d.CLThrottleReply(), [5]int64{0, 16, 16, -1, 0}; got != want {
		t.Errorf("peek after 60 s: got %v, want %v", got, want)
	}
}

func TestCLThrottleReplyRounding(t *testing.T) {
	for _, c := range []struct {
		d    Decision
		want [5]int64
	}{
		{Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: d(sec)}, [5]int64{0, 5, 4, -1, 1}},
		{Decision{Allowed: true, Limit: 5, Remaining: 3, ResetAfter: d(3900 * ms)}, [5]int64{0, 5, 3, -1, 4}},
		{Decision{Allowed: true, Limit: 5, Remaining: 3, ResetAfter: d(2*sec + ms)}, [5]int64{0, 5, 3, -1, 3}},
		{Decision{Allowed: true, Limit: 5, Remaining: 3, ResetAfter: d(2*sec + ms - 1)}, [5]int64{0, 5, 3, -1, 2}}, // sub-ms: not rounded
		{Decision{Limit: 5, RetryAfter: d(500 * ms), ResetAfter: d(5 * sec)}, [5]int64{1, 5, 0, 1, 5}},
		{Decision{Limit: 5, RetryAfter: d(999 * 1000), ResetAfter: d(5 * sec)}, [5]int64{1, 5, 0, 0, 5}}, // redis-cell replies 0
		{Decision{Limit: 5, Remaining: 5, RetryAfter: RetryNever}, [5]int64{1, 5, 5, -1, 0}},
	} {
		if got := c.d.CLThrottleReply(); got != c.want {
			t.Errorf("%+v: got %v, want %v", c.d, got, c.want)
		}
	}
}

func TestCLThrottleInvalid(t *testing.T) {
	for _, c := range []struct {
		burst, count, period, qty int64
		field                     string
	}{
		{-1, 30, 60, 1, "max_burst"},
		{15, 0, 60, 1, "count"},
		{15, -3, 60, 1, "count"},
		{15, 30, 0, 1, "period"},
		{15, 30, 1 << 62, 1, "period"},
		{15, 30, 60, -1, "quantity"},
		{15, 30, 60, MaxHits + 1, "quantity"},
		{15, 2_000_000_000, 1, 1, "Limit"}, // T below 1 ns
		{1 << 40, 1, 1 << 30, 1, "Burst"},  // tau overflows
	} {
		_, _, err := CLThrottle(c.burst, c.count, c.period, c.qty)
		if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("CLThrottle(%d, %d, %d, %d): got %v, want ErrInvalidLimit naming %s", c.burst, c.count, c.period, c.qty, err, c.field)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := func(k Kind) Limit { return Limit{Kind: k, Limit: 10, Period: time.Second, Burst: 5} }
	with := func(k Kind, f func(*Limit)) Limit { l := ok(k); f(&l); return l }
	for _, k := range Kinds() {
		if err := ok(k).Validate(); err != nil {
			t.Errorf("%v: got %v, want nil", k, err)
		}
	}
	for _, c := range []struct {
		name  string
		l     Limit
		field string
		value string
	}{
		{"zero kind", with(GCRA, func(l *Limit) { l.Kind = 0 }), "algorithm", "0"},
		{"unknown kind", with(GCRA, func(l *Limit) { l.Kind = 9 }), "algorithm", "9"},
		{"zero limit", with(FixedWindow, func(l *Limit) { l.Limit = 0 }), "limit", "0"},
		{"negative limit", with(SlidingWindowCounter, func(l *Limit) { l.Limit = -5 }), "limit", "-5"},
		{"zero period", with(TokenBucket, func(l *Limit) { l.Period = 0 }), "period", "0"},
		{"negative period", with(GCRA, func(l *Limit) { l.Period = -time.Second }), "period", "-1000000000 ns"},
		{"huge period", with(FixedWindow, func(l *Limit) { l.Period = MaxDuration + 1 }), "period", "4611686018427387904 ns"},
		{"negative burst", with(FixedWindow, func(l *Limit) { l.Burst = -1 }), "burst", "-1"},
		{"token bucket burst 0", with(TokenBucket, func(l *Limit) { l.Burst = 0 }), "burst", "0"},
		{"log limit", with(SlidingWindowLog, func(l *Limit) { l.Limit = MaxLogLimit + 1 }), "limit", "65537"},
		{"gcra interval < 1ns", with(GCRA, func(l *Limit) { l.Limit = 2_000_000_000 }), "limit", "2000000000"},
		{"gcra tau overflow", with(GCRA, func(l *Limit) { l.Limit = 1; l.Burst = 1 << 40 }), "burst", "1099511627776"},
		{"gcra burst+1 overflow", with(GCRA, func(l *Limit) { l.Burst = 1<<63 - 1 }), "burst", "9223372036854775807"},
		{"token bucket burst*period", with(TokenBucket, func(l *Limit) { l.Burst = 1 << 33 }), "burst", "8589934592"},
	} {
		err := c.l.Validate()
		if !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%s: got %v, want ErrInvalidLimit", c.name, err)
			continue
		}
		var ie *InputError
		if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidInput) || ie.Field != c.field || !strings.HasPrefix(ie.Value, c.value) {
			t.Errorf("%s: got %#v, want an *InputError with field %s and value %s", c.name, err, c.field, c.value)
		}
		// State.Take returns the same error and leaves the state untouched.
		var s State
		s.Take(t0, 1, ok(SlidingWindowLog))
		before, _ := s.MarshalBinary()
		if _, err := s.Take(t0, 1, c.l); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%s: State.Take: got %v, want ErrInvalidLimit", c.name, err)
		}
		if after, _ := s.MarshalBinary(); string(after) != string(before) {
			t.Errorf("%s: State.Take with an error changed the state", c.name)
		}
	}
	// Window algorithms accept huge Limits and Burst 0.
	for _, l := range []Limit{
		{Kind: FixedWindow, Limit: 1<<63 - 1, Period: 1},
		{Kind: SlidingWindowCounter, Limit: 1<<63 - 1, Period: MaxDuration},
		{Kind: GCRA, Limit: 1, Period: MaxDuration, Burst: 0},
		{Kind: TokenBucket, Limit: 1<<63 - 1, Period: 1, Burst: int64(MaxDuration)},
	} {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: got %v, want nil", l, err)
		}
	}
}

func TestValidateHitsAndNow(t *testing.T) {
	for _, h := range []int64{0, 1, MaxHits} {
		if err := ValidateHits(h); err != nil {
			t.Errorf("ValidateHits(%d): got %v, want nil", h, err)
		}
	}
	for _, h := range []int64{-1, MaxHits + 1, -1 << 63} {
		err := ValidateHits(h)
		if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), "field hits") {
			t.Errorf("ValidateHits(%d): got %v, want ErrInvalidLimit naming hits", h, err)
		}
	}
	l := Limit{Kind: GCRA, Limit: 1, Period: time.Second}
	for _, now := range []int64{MinTime - 1, MaxTime + 1, -1 << 63, 1<<63 - 1} {
		var s State
		_, err := s.Take(now, 1, l)
		if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), "field now") {
			t.Errorf("Take(now %d): got %v, want ErrInvalidLimit naming now", now, err)
		}
		if s.Kind() != 0 {
			t.Errorf("Take(now %d) with an error: got Kind %v, want 0", now, s.Kind())
		}
	}
	for _, now := range []int64{MinTime, MaxTime} {
		for _, k := range Kinds() {
			var s State
			lk := Limit{Kind: k, Limit: 3, Period: MaxDuration, Burst: 1}
			if d, err := s.Take(now, 1, lk); err != nil || !d.Allowed {
				t.Errorf("%v at %d: got %+v, %v, want allowed", k, now, d, err)
			}
		}
	}
}

func TestStateKindChange(t *testing.T) {
	var s State
	if s.Kind() != 0 {
		t.Errorf("zero State: got Kind %v, want 0", s.Kind())
	}
	fw := Limit{Kind: FixedWindow, Limit: 1, Period: time.Second}
	s.Take(t0, 1, fw)
	if d, _ := s.Take(t0, 1, fw); d.Allowed {
		t.Fatalf("second hit: got allowed, want denied")
	}
	// A different Kind starts fresh.
	gc := Limit{Kind: GCRA, Limit: 1, Period: time.Second}
	if d, _ := s.Take(t0, 1, gc); !d.Allowed || s.Kind() != GCRA {
		t.Errorf("after kind change: got %+v kind %v, want allowed gcra", d, s.Kind())
	}
}

func TestBucketedSlidingWindow(t *testing.T) {
	// 16 buckets of 100 ms: a hit in bucket k counts until (k+17)*100ms.
	l := Limit{Kind: BucketedSlidingWindow, Limit: 3, Period: 1600 * time.Millisecond}
	runBoth(t, func() taker { return new(BucketedWindowState) }, l, []step{
		{t0, 0, true, 3, 0, 0},
		{t0, 1, true, 2, 0, d(1700 * ms)},
		{t0 + 150*ms, 2, true, 0, 0, d(1650 * ms)},
		{t0 + 150*ms, 1, false, 0, d(1550 * ms), d(1650 * ms)}, // t0's bucket must expire
		{t0 + 150*ms, 2, false, 0, d(1650 * ms), d(1650 * ms)}, // and the next one too
		{t0 + 150*ms, 4, false, 0, RetryNever, d(1650 * ms)},   // hits > Limit
		{t0 + 150*ms, 0, true, 0, 0, d(1650 * ms)},             // denied checks changed nothing
		// The exact log frees t0's hit at t0+1.6s; the bucket counts it until the
		// end of its 16th successor, t0+1.7s (the documented bucket error).
		{t0 + 1600*ms, 1, false, 0, d(100 * ms), d(200 * ms)},
		{t0 + 1700*ms - 1, 1, false, 0, 1, d(100*ms + 1)},
		{t0 + 1700*ms, 1, true, 0, 0, d(1700 * ms)},
		{t9, 3, true, 0, 0, d(1700 * ms)}, // all expired
	})
}

func TestBucketedSlidingWindowClockBackwards(t *testing.T) {
	l := Limit{Kind: BucketedSlidingWindow, Limit: 2, Period: 1600 * time.Millisecond}
	runBoth(t, func() taker { return new(BucketedWindowState) }, l, []step{
		{t5, 1, true, 1, 0, d(1700 * ms)},
		// 3 s back: decided in t5's bucket, where the hit is counted; the
		// durations run from now, so they include the step.
		{t2, 1, true, 0, 0, d(4700 * ms)},
		{t2, 1, false, 0, d(4700 * ms), d(4700 * ms)},
		{t5 + 100*ms, 1, false, 0, d(1600 * ms), d(1600 * ms)}, // nothing was credited
		{t5 + 1700*ms, 2, true, 0, 0, d(1700 * ms)},
	})
}

// Limits above 2^32 per Period are exact: the counts are 64-bit.
func TestBucketedSlidingWindowLargeLimit(t *testing.T) {
	l := Limit{Kind: BucketedSlidingWindow, Limit: 5 << 32, Period: time.Hour}
	var s State
	for i := range int64(10) {
		d, err := s.Take(t0+i*sec, MaxHits, l)
		if err != nil || !d.Allowed || d.Remaining != l.Limit-(i+1)*MaxHits {
			t.Fatalf("check %d: got %+v, %v; want allowed with %d remaining", i, d, err, l.Limit-(i+1)*MaxHits)
		}
	}
	if d, _ := s.Take(t0+10*sec, 1, l); d.Allowed {
		t.Fatalf("hit above 5*2^32: got %+v, want denied", d)
	}
}

// A Period change moves every count to the end of the newest bucket under the
// new width: nothing is credited.
func TestBucketedSlidingWindowPeriodChange(t *testing.T) {
	short := Limit{Kind: BucketedSlidingWindow, Limit: 2, Period: 1600 * time.Millisecond}
	long := short
	long.Period = 16 * time.Second // 1 s buckets
	var s BucketedWindowState
	s.Take(t0, 2, short)
	if got := s.Take(t0+500*ms, 1, long); got.Allowed || got.RetryAfter != d(16500*ms) {
		t.Fatalf("after the Period change: got %+v, want denied for 16.5 s (t0 hits moved to the 1 s bucket of t0)", got)
	}
}

// TestKindNameTable: every algorithm's name round-trips through ParseKind, is
// listed by KindNames, and the table ends at the last declared Kind.
func TestKindNameTable(t *testing.T) {
	if got, want := len(Kinds()), int(lastKind); got != want {
		t.Fatalf("Kinds: got %d algorithms, want %d", got, want)
	}
	names := KindNames("|")
	for _, k := range Kinds() {
		if !k.Valid() || strings.HasPrefix(k.String(), "kind(") {
			t.Errorf("%d: got name %q, valid %v; want a name in Kind.String", uint8(k), k, k.Valid())
		}
		if got, err := ParseKind(k.String()); err != nil || got != k {
			t.Errorf("ParseKind(%q): got %v, %v, want %v", k, got, err, k)
		}
		if !strings.Contains("|"+names+"|", "|"+k.String()+"|") {
			t.Errorf("KindNames: got %q, want it to list %q", names, k)
		}
	}
	if (lastKind + 1).Valid() {
		t.Errorf("Kind %d: valid, want invalid past lastKind", uint8(lastKind+1))
	}
	var ie *InputError
	if _, err := ParseKind("leaky"); !errors.As(err, &ie) || ie.Field != "algorithm" || !strings.Contains(ie.Allowed, names[:10]) {
		t.Errorf(`ParseKind("leaky"): got %v, want an InputError listing the names`, err)
	}
}

// TestIdleAfter: for every algorithm, a key that took hits becomes Idle
// exactly IdleAfter later, not a nanosecond sooner; an idle key's IdleAfter
// is 0; an invalid limit is never idle (MaxDuration).
func TestIdleAfter(t *testing.T) {
	t.Parallel()
	for _, k := range Kinds() {
		for _, tc := range []struct {
			l    Limit
			hits int64
		}{
			{Limit{Kind: k, Limit: 10, Period: time.Minute, Burst: 4}, 1},
			{Limit{Kind: k, Limit: 10, Period: time.Minute, Burst: 4}, 3},
			{Limit{Kind: k, Limit: 3, Period: 7 * time.Second, Burst: 2}, 2},
		} {
			var s State
			now := t0 + 1234567
			if _, err := s.Take(now, tc.hits, tc.l); err != nil {
				t.Fatalf("%v: %v", k, err)
			}
			d := s.IdleAfter(now, tc.l)
			if d <= 0 || d > 2*tc.l.Period {
				t.Errorf("%v %+v after %d hits: IdleAfter got %v, want in (0, 2 periods]", k, tc.l, tc.hits, d)
				continue
			}
			if s.Idle(now+int64(d)-1, tc.l) || !s.Idle(now+int64(d), tc.l) {
				t.Errorf("%v %+v after %d hits: IdleAfter %v, but Idle 1 ns sooner %v, at it %v; want false, true", k, tc.l, tc.hits, d,
					s.Idle(now+int64(d)-1, tc.l), s.Idle(now+int64(d), tc.l))
			}
			if got := s.IdleAfter(now+int64(d), tc.l); got != 0 {
				t.Errorf("%v: IdleAfter once idle: got %v, want 0", k, got)
			}
		}
	}
	var s State
	if got := s.IdleAfter(t0, Limit{}); got != MaxDuration {
		t.Errorf("IdleAfter under an invalid limit: got %v, want MaxDuration", got)
	}
}

// TestHold: for every algorithm, no pattern of checks (hits spread out, or
// as many as pass at one instant, at every offset in the window) leaves a
// state that takes longer than Limit.Hold to become Idle after its last
// check, and some pattern comes within 2% of it (a quarter for
// SlidingWindowCounter).
func TestHold(t *testing.T) {
	t.Parallel()
	for _, k := range Kinds() {
		for _, l := range []Limit{
			{Kind: k, Limit: 10, Period: 10 * time.Second, Burst: 5},
			{Kind: k, Limit: 2, Period: 10 * time.Second, Burst: 30},
		} {
			hold := l.Hold()
			worst := time.Duration(0)
			for off := int64(0); off < int64(2*l.Period); off += int64(37 * time.Millisecond) {
				for _, spread := range []bool{false, true} {
					var s State
					last := t0 + off
					for i := range 40 {
						if spread {
							last = t0 + off + int64(i)*int64(150*time.Millisecond)
						}
						if _, err := s.Take(last, 1, l); err != nil {
							t.Fatal(err)
						}
					}
					worst = max(worst, s.IdleAfter(last, l))
				}
			}
			// A counter's previous window weighs until its estimate rounds
			// down to no hit, a little before the next window ends.
			near := hold * 98 / 100
			if k == SlidingWindowCounter {
				near = hold * 3 / 4
			}
			if worst > hold || worst < near {
				t.Errorf("%v %+v: worst IdleAfter %v, Hold %v; want at most Hold and at least %v", k, l, worst, hold, near)
			}
		}
	}
	for _, tc := range []struct {
		l    Limit
		want time.Duration
	}{
		{Limit{Kind: GCRA, Limit: 30, Period: time.Minute, Burst: 15}, 32 * time.Second},
		{Limit{Kind: TokenBucket, Limit: 3, Period: 10 * time.Second, Burst: 10}, 33333333334},
		{Limit{Kind: SlidingWindowCounter, Limit: 3, Period: time.Hour}, 2 * time.Hour},
		{Limit{Kind: BucketedSlidingWindow, Limit: 3, Period: 16 * time.Second}, 17 * time.Second},
		{Limit{}, MaxDuration},
	} {
		if got := tc.l.Hold(); got != tc.want {
			t.Errorf("%+v.Hold(): got %v, want %v", tc.l, got, tc.want)
		}
	}
}
