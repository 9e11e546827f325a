package algo

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// The backward-clock property tests drive every algorithm with sequences whose
// clock steps back at random, and check the package rule: state changes only
// when a check admits; time never runs backwards inside a state (a check is
// decided at its effective time, max(now, the latest time the state has
// seen), with durations measured from now); GCRA decides at now against its
// never-capped TAT.

// randOpsBack draws a sequence like randOps, then moves some checks back: by
// up to a Period or five, across a window edge, to the time of an earlier
// check, and now and then shifts the rest of the sequence back for good.
func randOpsBack(r *rand.Rand, l Limit, n int) []op {
	ops := randOps(r, l, n)
	p := int64(l.Period)
	var shift int64
	for i := range ops {
		if r.IntN(40) == 0 {
			shift += r.Int64N(3*p + 1)
		}
		ops[i].t -= shift
		switch r.IntN(8) {
		case 0:
			ops[i].t -= r.Int64N(p + 1)
		case 1:
			ops[i].t -= r.Int64N(5*p + 1)
		case 2:
			if i > 0 {
				ops[i].t = ops[r.IntN(i)].t
			}
		case 3:
			ops[i].t -= p - 1 + r.Int64N(3)
		}
	}
	return ops
}

// forEachBackward runs f over seeded random (Limit, ops) pairs with backward
// steps, for the given Kinds.
func forEachBackward(t *testing.T, kinds []Kind, seeds uint64, n int, f func(t *testing.T, l Limit, ops []op)) {
	for _, k := range kinds {
		t.Run(k.String(), func(t *testing.T) {
			for seed := range seeds {
				r := rand.New(rand.NewPCG(seed, 99+uint64(k)))
				l := randLimit(r, k)
				f(t, l, randOpsBack(r, l, n))
			}
		})
	}
}

// latest returns the latest time s has seen (the time it decides an earlier
// now at) and whether it carries one: TokenBucket's last refill, FixedWindow's
// and SlidingWindowCounter's window start (when they count hits),
// SlidingWindowLog's newest entry. GCRA carries none.
func latest(s *State) (int64, bool) {
	switch s.kind {
	case TokenBucket:
		return int64(uint64(s.b)) + MinTime, true
	case FixedWindow:
		return s.a, s.b != 0
	case SlidingWindowCounter:
		return s.a, s.b|s.c != 0
	case SlidingWindowLog:
		if s.log != nil && s.log.n > 0 {
			return s.log.at(s.log.n - 1), true
		}
	case BucketedSlidingWindow:
		if s.bw != nil && s.bw.counts[slot(s.bw.head)] > 0 {
			return s.bw.head * s.bw.width, true
		}
	}
	return 0, false
}

// effective returns max(now, latest(s)).
func effective(s *State, now int64) int64 {
	if lt, ok := latest(s); ok && lt > now {
		return lt
	}
	return now
}

func marshal(t *testing.T, s *State) string {
	t.Helper()
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBackwardNeverMorePermissive checks property (1): a check whose now is
// earlier than a check already taken never admits when the same check at the
// latest now so far would be denied, and a check that is denied or peeks
// leaves the state as it was (whatever its now).
func TestBackwardNeverMorePermissive(t *testing.T) {
	forEachBackward(t, Kinds(), 200, 200, func(t *testing.T, l Limit, ops []op) {
		var s State
		maxNow := MinTime
		backs := 0
		for i, o := range ops {
			before := marshal(t, &s)
			if o.t < maxNow {
				backs++
				c := s.Clone()
				if at := mustTake(t, &c, maxNow, o.hits, l); !at.Allowed {
					c2 := s.Clone()
					if d := mustTake(t, &c2, o.t, o.hits, l); d.Allowed {
						t.Fatalf("%+v step %d: Take(%d, %d) admitted, but denied at the later %d (%+v)", l, i, o.t, o.hits, maxNow, at)
					}
				}
			}
			fresh := s.Kind() != l.Kind // the first Take gives s its Kind
			d := mustTake(t, &s, o.t, o.hits, l)
			if (!d.Allowed || o.hits == 0) && !fresh && marshal(t, &s) != before {
				t.Fatalf("%+v step %d: Take(%d, %d) = %+v changed the state", l, i, o.t, o.hits, d)
			}
			maxNow = max(maxNow, o.t)
		}
		if backs == 0 {
			t.Fatalf("%+v: no backward step drawn", l)
		}
	})
}

// TestMonotoneEquivalence checks property (2), time never runs backwards
// inside a state: for TokenBucket, FixedWindow, SlidingWindowCounter and
// SlidingWindowLog, feeding a sequence to a state gives the same decisions and
// leaves the same states as feeding a twin max(now, latest) instead of each
// now, where latest is the latest time the state has seen before the check,
// except that RetryAfter and ResetAfter, when positive, are longer by
// max(now, latest) - now (they are measured from now to the same instants).
// The twin never sees a now earlier than its latest, so it decides as on a
// clock that never goes back.
func TestMonotoneEquivalence(t *testing.T) {
	kinds := []Kind{TokenBucket, FixedWindow, SlidingWindowCounter, SlidingWindowLog}
	forEachBackward(t, kinds, 200, 200, func(t *testing.T, l Limit, ops []op) {
		var s, twin State
		for i, o := range ops {
			eff := effective(&s, o.t)
			if effective(&twin, eff) != eff {
				t.Fatalf("%+v step %d: the twin saw a time later than %d", l, i, eff)
			}
			got := mustTake(t, &s, o.t, o.hits, l)
			want := mustTake(t, &twin, eff, o.hits, l)
			want.delay(uint64(eff - o.t))
			if got != want {
				t.Fatalf("%+v step %d: Take(%d, %d) = %+v, want %+v (as at %d)", l, i, o.t, o.hits, got, want, eff)
			}
			if marshal(t, &s) != marshal(t, &twin) {
				t.Fatalf("%+v step %d: state differs from the twin's", l, i)
			}
		}
	})
}

// refTAT is redis-cell's GCRA written out with an absolute TAT that is never
// capped: limited iff now < new_tat - tau, new_tat = max(tat, now) + T*hits.
type refTAT struct {
	l   Limit
	tat int64
	set bool
}

func (r *refTAT) take(now, hits int64) Decision {
	t := int64(r.l.Period) / r.l.Limit
	capacity := r.l.Burst + 1
	tau := t * capacity
	tat := now
	if r.set && r.tat > now {
		tat = r.tat
	}
	newTat := tat + t*hits
	d := Decision{Limit: capacity}
	switch {
	case hits == 0:
		d.Allowed = true
	case hits > capacity:
		d.RetryAfter = RetryNever
	case now < newTat-tau:
		d.RetryAfter = time.Duration(newTat - tau - now)
	default:
		d.Allowed = true
		r.tat, r.set, tat = newTat, true, newTat
	}
	d.Remaining = max(0, (tau-(tat-now))/t)
	d.ResetAfter = time.Duration(tat - now)
	return d
}

// TestGCRABackwardAgainstReference checks property (2) for GCRA, which
// carries no latest time: every decision, on clocks that step back, is
// redis-cell's at that now with the TAT never capped (refTAT).
func TestGCRABackwardAgainstReference(t *testing.T) {
	forEachBackward(t, []Kind{GCRA}, 300, 200, func(t *testing.T, l Limit, ops []op) {
		ref := &refTAT{l: l}
		var s State
		for i, o := range ops {
			want := ref.take(o.t, o.hits)
			if got := mustTake(t, &s, o.t, o.hits, l); got != want {
				t.Fatalf("%+v step %d: Take(%d, %d) = %+v, want %+v", l, i, o.t, o.hits, got, want)
			}
		}
	})
}

// admit is one admitted check: its now, its effective time and its hits.
type admit struct{ now, eff, hits int64 }

// TestBackwardAdmitsWithinBounds checks property (3): on clocks that step
// back, the algorithms admit no more than on a clock that never does,
// measured on the effective clock (max(now, the latest time the state has
// seen), which never decreases from one admitted check to the next, or for
// the window algorithms, whose latest time is their window start, never
// moves to an earlier window):
// FixedWindow and SlidingWindowCounter at most Limit per aligned window,
// SlidingWindowLog at most Limit in any (t-Period, t], TokenBucket at most
// Burst plus the refill between any two admitted checks. GCRA, which decides
// at now, admits between admitted checks i and j (in sequence order) at most
// (now_j - now_i + tau) / T hits. The effective clock cannot be the largest now
// of every check so far: a denied check or a peek changes nothing, so the state
// cannot know its now.
func TestBackwardAdmitsWithinBounds(t *testing.T) {
	forEachBackward(t, Kinds(), 200, 300, func(t *testing.T, l Limit, ops []op) {
		var s State
		var adm []admit
		for _, o := range ops {
			eff := effective(&s, o.t)
			if d := mustTake(t, &s, o.t, o.hits, l); d.Allowed && o.hits > 0 {
				if n := len(adm); n > 0 && l.Kind != GCRA {
					// The latest time a window state carries is its window
					// start: within a window, the effective time may go back.
					prev, cur := adm[n-1].eff, eff
					if l.Kind == FixedWindow || l.Kind == SlidingWindowCounter {
						prev, cur = floorDiv(prev, int64(l.Period)), floorDiv(cur, int64(l.Period))
					}
					if l.Kind == BucketedSlidingWindow {
						w := bucketWidth(int64(l.Period))
						prev, cur = floorDiv(prev, w), floorDiv(cur, w)
					}
					if cur < prev {
						t.Fatalf("%+v: effective time went back from %d to %d", l, adm[n-1].eff, eff)
					}
				}
				adm = append(adm, admit{o.t, eff, o.hits})
			}
		}
		checkAdmitBounds(t, l, adm)
	})
}

func checkAdmitBounds(t *testing.T, l Limit, adm []admit) {
	t.Helper()
	p := int64(l.Period)
	for j := range adm {
		var sliding, aligned, sum int64
		for i := j; i >= 0; i-- {
			a := adm[i]
			sum += a.hits
			if a.eff > adm[j].eff-p {
				sliding += a.hits
			}
			if floorDiv(a.eff, p) == floorDiv(adm[j].eff, p) {
				aligned += a.hits
			}
			switch l.Kind {
			case GCRA:
				tt := p / l.Limit
				if sum*tt > adm[j].now-a.now+tt*(l.Burst+1) {
					t.Fatalf("%+v: %d hits admitted from now %d to now %d", l, sum, a.now, adm[j].now)
				}
			case TokenBucket:
				lhs := new(big.Int).Mul(big.NewInt(sum), big.NewInt(p))
				rhs := new(big.Int).Mul(big.NewInt(adm[j].eff-a.eff), big.NewInt(l.Limit))
				rhs.Add(rhs, new(big.Int).Mul(big.NewInt(l.Burst), big.NewInt(p)))
				if lhs.Cmp(rhs) > 0 {
					t.Fatalf("%+v: %d hits admitted in [%d, %d] (effective)", l, sum, a.eff, adm[j].eff)
				}
			}
		}
		switch l.Kind {
		case SlidingWindowLog, BucketedSlidingWindow:
			if sliding > l.Limit {
				t.Fatalf("%+v: %d hits admitted in (%d, %d] (effective)", l, sliding, adm[j].eff-p, adm[j].eff)
			}
		case FixedWindow, SlidingWindowCounter:
			if aligned > l.Limit {
				t.Fatalf("%+v: %d hits admitted in window %d (effective)", l, aligned, floorDiv(adm[j].eff, p))
			}
		}
	}
}

// TestIdleIsFreshBackward checks Idle on clocks that step back: a state Idle
// at now decides every check at a time >= max(now, its latest time) exactly as
// a fresh state (times of the following checks are raised to that bound).
func TestIdleIsFreshBackward(t *testing.T) {
	forEachBackward(t, Kinds(), 60, 150, func(t *testing.T, l Limit, ops []op) {
		var s State
		for i, o := range ops {
			if s.Idle(o.t, l) {
				bound := effective(&s, o.t)
				c, fresh := s.Clone(), State{}
				for j, o2 := range ops[i:min(len(ops), i+40)] {
					now := max(o2.t, bound)
					d1, d2 := mustTake(t, &c, now, o2.hits, l), mustTake(t, &fresh, now, o2.hits, l)
					if d1 != d2 {
						t.Fatalf("%+v idle at step %d (%d), step +%d: got %+v, fresh %+v", l, i, o.t, j, d1, d2)
					}
				}
			}
			mustTake(t, &s, o.t, o.hits, l)
		}
	})
}

// TestMergeBackward checks that Merge keeps the more restrictive state on
// clocks that step back, too.
func TestMergeBackward(t *testing.T) {
	forEachBackward(t, Kinds(), 60, 80, func(t *testing.T, l Limit, ops []op) {
		var a, b State
		for i, o := range ops {
			if i%2 == 0 {
				mustTake(t, &a, o.t, o.hits, l)
			}
			mustTake(t, &b, o.t, o.hits, l)
			x := a.Clone()
			dx, dy := x.peek(o.t, l), b.peek(o.t, l)
			x.Merge(&b, o.t, l)
			want := dx
			if dy.Remaining < dx.Remaining || (dy.Remaining == dx.Remaining && dy.ResetAfter > dx.ResetAfter) {
				want = dy
			}
			if dm := x.peek(o.t, l); dm != want {
				t.Fatalf("%+v step %d: merged peek got %+v, want %+v", l, i, dm, want)
			}
		}
	})
}

// TestExtremeStepBack steps the clock from MaxTime back to MinTime with the
// longest Period: durations saturate at math.MaxInt64 instead of wrapping.
func TestExtremeStepBack(t *testing.T) {
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			l := Limit{Kind: k, Limit: 1, Period: MaxDuration, Burst: 1}
			if k == GCRA {
				l.Burst = 0
			}
			var s State
			if d := mustTake(t, &s, MaxTime, 1, l); !d.Allowed {
				t.Fatalf("first hit: got %+v, want allowed", d)
			}
			before := marshal(t, &s)
			d := mustTake(t, &s, MinTime, 1, l)
			checkDecision(t, l, 1, d)
			if d.Allowed || d.RetryAfter != math.MaxInt64 || d.ResetAfter != math.MaxInt64 {
				t.Errorf("at MinTime: got %+v, want denied with saturated durations", d)
			}
			if marshal(t, &s) != before {
				t.Errorf("denied at MinTime: state changed")
			}
		})
	}
}

// TestStateMatchesValueTypes checks that State, with its caches, decides as
// the value types on clocks that step back while the Limit changes between
// checks (Period, Limit and Burst drawn from a few values).
func TestStateMatchesValueTypes(t *testing.T) {
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			for seed := range uint64(100) {
				r := rand.New(rand.NewPCG(seed, 500+uint64(k)))
				limits := []Limit{randLimit(r, k), randLimit(r, k), randLimit(r, k)}
				var s State
				var g GCRAState
				var tb TokenBucketState
				var fw FixedWindowState
				var wc SlidingWindowCounterState
				var wl SlidingWindowLogState
				var bw BucketedWindowState
				for i, o := range randOpsBack(r, limits[0], 200) {
					l := limits[r.IntN(len(limits))]
					var want Decision
					switch k {
					case GCRA:
						want = g.Take(o.t, o.hits, l)
					case TokenBucket:
						want = tb.Take(o.t, o.hits, l)
					case FixedWindow:
						want = fw.Take(o.t, o.hits, l)
					case SlidingWindowCounter:
						want = wc.Take(o.t, o.hits, l)
					case SlidingWindowLog:
						want = wl.Take(o.t, o.hits, l)
					case BucketedSlidingWindow:
						want = bw.Take(o.t, o.hits, l)
					}
					got := mustTake(t, &s, o.t, o.hits, l)
					checkDecision(t, l, o.hits, got)
					if got != want {
						t.Fatalf("seed %d step %d Take(%d, %d, %+v): State %+v, value type %+v", seed, i, o.t, o.hits, l, got, want)
					}
				}
			}
		})
	}
}
