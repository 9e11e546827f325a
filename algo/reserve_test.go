package algo

import (
	"errors"
	"math/rand"
	"sort"
	"testing"
	"time"
)

// rstep is one Reserve of a step table and what it must book.
type rstep struct {
	t         int64 // now, Unix ns
	hits      int64
	maxWait   time.Duration
	ok        bool
	delay     time.Duration
	remaining int64
	retry     time.Duration
}

// runReserve applies steps in order to s under l and checks each booking.
func runReserve(t *testing.T, s *State, l Limit, steps []rstep) []Reservation {
	t.Helper()
	var out []Reservation
	for i, st := range steps {
		d, r, err := s.Reserve(st.t, st.hits, l, st.maxWait)
		if err != nil {
			t.Fatalf("step %d: Reserve: got error %v, want nil", i, err)
		}
		if r.OK != st.ok || r.Delay != st.delay || d.Allowed != st.ok || d.Remaining != st.remaining || d.RetryAfter != st.retry {
			t.Errorf("step %d: Reserve(t0%+v, %d, %v): got ok %v delay %v remaining %d retry %v, want ok %v delay %v remaining %d retry %v",
				i, time.Duration(st.t-t0), st.hits, st.maxWait, r.OK, r.Delay, d.Remaining, d.RetryAfter, st.ok, st.delay, st.remaining, st.retry)
		}
		if r.OK && r.At != st.t+int64(r.Delay) {
			t.Errorf("step %d: At: got %d, want %d", i, r.At, st.t+int64(r.Delay))
		}
		out = append(out, r)
	}
	return out
}

func TestReserveGCRA(t *testing.T) {
	l := Limit{Kind: GCRA, Limit: 10, Period: time.Second, Burst: 1} // T 100 ms, τ 200 ms
	ms := time.Millisecond
	runReserve(t, new(State), l, []rstep{
		{t0, 1, 0, true, 0, 1, 0},
		{t0, 1, 0, true, 0, 0, 0},
		{t0, 1, 0, false, 0, 0, 100 * ms},          // maxWait 0 is Take
		{t0, 1, time.Second, true, 100 * ms, 0, 0}, // tat 300 ms
		{t0, 2, 250 * ms, false, 0, 0, 100 * ms},   // 300 ms > 2 whole intervals
		{t0, 2, 300 * ms, true, 300 * ms, 0, 0},    // tat 500 ms
		{t0 + 50*int64(ms), 1, time.Second, true, 350 * ms, 0, 0},
		{t0, 3, time.Hour, false, 0, 0, RetryNever}, // above the capacity: no wait helps
	})
}

func TestReserveTokenBucket(t *testing.T) {
	l := Limit{Kind: TokenBucket, Limit: 10, Period: time.Second, Burst: 2} // a token per 100 ms
	ms := time.Millisecond
	runReserve(t, new(State), l, []rstep{
		{t0, 2, 0, true, 0, 0, 0},
		{t0, 1, 0, false, 0, 0, 100 * ms},
		{t0, 1, time.Second, true, 100 * ms, 0, 0}, // -1 token
		{t0, 1, time.Second, true, 200 * ms, 0, 0}, // -2 tokens
		{t0, 2, 300 * ms, false, 0, 0, 100 * ms},   // -4 is past the 3 refilled in 300 ms
		{t0 + 200*int64(ms), 1, 150 * ms, true, 100 * ms, 0, 0},
		{t0, 3, time.Hour, false, 0, 0, RetryNever},
	})
}

func TestReserveCancelGCRA(t *testing.T) {
	l := Limit{Kind: GCRA, Limit: 10, Period: time.Second, Burst: 1}
	ms := int64(time.Millisecond)
	var s State
	rs := runReserve(t, &s, l, []rstep{
		{t0, 2, 0, true, 0, 0, 0},
		{t0, 1, time.Second, true, 100 * time.Millisecond, 0, 0}, // R1, tat 300 ms
		{t0, 1, time.Second, true, 200 * time.Millisecond, 0, 0}, // R2, tat 400 ms
	})
	cancel := func(at int64, r Reservation, want time.Duration) {
		t.Helper()
		got, err := s.Cancel(at, r, l)
		if err != nil || got != want {
			t.Errorf("Cancel(t0%+v, %+v): got %v, %v, want %v, nil", time.Duration(at-t0), r, got, err, want)
		}
	}
	cancel(t0+10*ms, rs[0], 0)                    // the time after R1 is R2's: nothing to give back
	cancel(t0+10*ms, rs[2], 100*time.Millisecond) // R2 was the last booked: its slot comes back
	cancel(t0+10*ms, rs[1], 100*time.Millisecond) // now R1 is the last
	cancel(t0+20*ms, rs[0], 0)                    // acted when booked
	// The next caller gets R1's slot, exactly: tat 200 ms again.
	runReserve(t, &s, l, []rstep{{t0 + 10*ms, 1, time.Second, true, 90 * time.Millisecond, 0, 0}})
	// A reservation that has acted gives nothing back.
	r := runReserve(t, &s, l, []rstep{{t0 + 10*ms, 1, time.Second, true, 190 * time.Millisecond, 0, 0}})[0]
	cancel(r.At, r, 0)
}

func TestReserveCancelTokenBucket(t *testing.T) {
	l := Limit{Kind: TokenBucket, Limit: 10, Period: time.Second, Burst: 2}
	ms := int64(time.Millisecond)
	var s State
	rs := runReserve(t, &s, l, []rstep{
		{t0, 2, 0, true, 0, 0, 0},
		{t0, 1, time.Second, true, 100 * time.Millisecond, 0, 0},
		{t0, 2, time.Second, true, 300 * time.Millisecond, 0, 0},
	})
	cancel := func(at int64, r Reservation, want time.Duration) {
		t.Helper()
		got, err := s.Cancel(at, r, l)
		if err != nil || got != want {
			t.Errorf("Cancel(t0%+v, %+v): got %v, %v, want %v, nil", time.Duration(at-t0), r, got, err, want)
		}
	}
	// R1 (1 token) was followed by R2's 2: nothing of R1 comes back.
	cancel(t0+10*ms, rs[1], 0)
	cancel(t0+10*ms, rs[2], 200*time.Millisecond)
	runReserve(t, &s, l, []rstep{{t0 + 10*ms, 1, time.Second, true, 190 * time.Millisecond, 0, 0}})
}

func TestReserveUnsupported(t *testing.T) {
	for _, k := range Kinds() {
		l := Limit{Kind: k, Limit: 10, Period: time.Second, Burst: 1}
		var s State
		_, _, err := s.Reserve(t0, 1, l, time.Second)
		_, cerr := s.Cancel(t0, Reservation{OK: true, Hits: 1, Delay: 1, At: t1}, l)
		if k.SupportsReserve() {
			if err != nil || cerr != nil {
				t.Errorf("%v: got %v, %v, want nil", k, err, cerr)
			}
			continue
		}
		if !errors.Is(err, ErrReserveUnsupported) || !errors.Is(cerr, ErrReserveUnsupported) {
			t.Errorf("%v: got %v, %v, want ErrReserveUnsupported", k, err, cerr)
		}
	}
	_, err := Limit{Kind: GCRA, Limit: 10, Period: time.Second}.Reserving(-1)
	if !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("negative max_wait: got %v, want ErrInvalidLimit", err)
	}
}

// TestReserveBound: whatever the sequence of reservations, takes and
// cancels, the hits that act in any interval [a, a+w] are at most what the
// limit allows: GCRA's Burst+1 + w/T, TokenBucket's Burst + w·Limit/Period
// (cancelled reservations do not act).
func TestReserveBound(t *testing.T) {
	for _, l := range []Limit{
		{Kind: GCRA, Limit: 10, Period: time.Second, Burst: 3},
		{Kind: GCRA, Limit: 7, Period: time.Second, Burst: 0},
		{Kind: TokenBucket, Limit: 10, Period: time.Second, Burst: 4},
		{Kind: TokenBucket, Limit: 3, Period: time.Second, Burst: 1},
		{Kind: TokenBucket, Limit: 7, Period: time.Second, Burst: 2},
	} {
		for seed := int64(1); seed <= 40; seed++ {
			reserveBound(t, l, seed)
		}
	}
}

func reserveBound(t *testing.T, l Limit, seed int64) {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	var s State
	type act struct {
		at   int64
		hits int64
		live bool
	}
	var acts []*act
	var open []int // reservations that may still be cancelled
	var res []Reservation
	now := t0
	for i := 0; i < 400; i++ {
		now += rng.Int63n(int64(150 * time.Millisecond))
		if len(open) > 0 && rng.Intn(4) == 0 {
			j := rng.Intn(len(open))
			k := open[j]
			open = append(open[:j], open[j+1:]...)
			if _, err := s.Cancel(now, res[k], l); err != nil {
				t.Fatal(err)
			}
			if now < res[k].At && res[k].Delay > 0 {
				acts[k].live = false // x/time/rate: a cancelled, not yet acted booking does not act
			}
			continue
		}
		hits := 1 + rng.Int63n(2)
		wait := time.Duration(rng.Int63n(int64(2 * time.Second)))
		_, r, err := s.Reserve(now, hits, l, wait)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK {
			continue
		}
		acts = append(acts, &act{r.At, hits, true})
		res = append(res, r)
		open = append(open, len(res)-1)
	}
	var live []*act
	for _, a := range acts {
		if a.live {
			live = append(live, a)
		}
	}
	sort.Slice(live, func(i, j int) bool { return live[i].at < live[j].at })
	for i := range live {
		var sum int64
		for j := i; j < len(live); j++ {
			sum += live[j].hits
			w := live[j].at - live[i].at
			var bound int64
			if l.Kind == GCRA {
				bound = l.Burst + 1 + w/(int64(l.Period)/l.Limit)
			} else {
				// Acts may be rounded up by under 2 ns: the window is at most 2 ns longer.
				bound = l.Burst + (w+2)*l.Limit/int64(l.Period)
			}
			if sum > bound {
				t.Fatalf("%v seed %d: %d hits act within %v, want at most %d", l, seed, sum, time.Duration(w), bound)
			}
		}
	}
}

// FuzzReserveBound runs TestReserveBound's property on fuzzed limits and
// sequences.
func FuzzReserveBound(f *testing.F) {
	f.Add(int64(1), true, int64(10), int64(3))
	f.Add(int64(2), false, int64(7), int64(2))
	f.Fuzz(func(t *testing.T, seed int64, gcra bool, limit, burst int64) {
		if limit < 1 || limit > 1000 || burst < 0 || burst > 20 {
			return
		}
		l := Limit{Kind: TokenBucket, Limit: limit, Period: time.Second, Burst: max(burst, 1)}
		if gcra {
			l = Limit{Kind: GCRA, Limit: limit, Period: time.Second, Burst: burst}
		}
		reserveBound(t, l, seed)
	})
}
