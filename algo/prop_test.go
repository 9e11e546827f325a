package algo

import (
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The property tests run every algorithm against a brute-force reference over
// seeded random arrival sequences: the reference keeps every admitted hit (or
// exact rationals) and recomputes each decision from scratch.

// op is one check of a random sequence.
type op struct{ t, hits int64 }

// randLimit draws a small Limit of Kind k, sometimes with Periods of a few ns
// where rounding is most exposed.
func randLimit(r *rand.Rand, k Kind) Limit {
	periods := []int64{1, 3, 7, 10, 64, 1000, 999_983, sec, 60 * sec}
	l := Limit{Kind: k, Limit: 1 + r.Int64N(12), Period: time.Duration(periods[r.IntN(len(periods))]), Burst: r.Int64N(8)}
	switch k {
	case TokenBucket:
		l.Burst++
	case GCRA:
		l.Limit = min(l.Limit, int64(l.Period)) // T >= 1 ns
	}
	return l
}

// randOps draws a sequence of n checks with a non-decreasing clock, starting
// anywhere around the epoch (so also at negative times), mixing bursts, gaps
// around the emission interval and the Period, and hits from 0 to above the
// capacity.
func randOps(r *rand.Rand, l Limit, n int) []op {
	p := int64(l.Period)
	t := r.Int64N(200*p+1) - 100*p
	ops := make([]op, n)
	for i := range ops {
		switch r.IntN(6) {
		case 0: // same instant
		case 1:
			t += r.Int64N(p/l.Limit + 1)
		case 2:
			t += r.Int64N(p + 1)
		case 3:
			t += p - 1 + r.Int64N(3) // window edges
		case 4:
			t += r.Int64N(3 * p)
		case 5:
			t += 1
		}
		hits := int64(1)
		switch r.IntN(5) {
		case 0:
			hits = 0
		case 1:
			hits = r.Int64N(l.Limit + l.Burst + 3)
		}
		ops[i] = op{t, hits}
	}
	return ops
}

// floorDiv is floor(a/b) for b > 0, written differently from floorMod.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// refFixedWindow counts, for each check, the admitted hits in floor(t/P).
type refFixedWindow struct {
	l    Limit
	hits []op
}

func (r *refFixedWindow) take(now, hits int64) Decision {
	p := int64(r.l.Period)
	w := floorDiv(now, p)
	end := (w+1)*p - now
	count := int64(0)
	for _, h := range r.hits {
		if floorDiv(h.t, p) == w {
			count += h.hits
		}
	}
	d := Decision{Limit: r.l.Limit}
	switch {
	case hits == 0 || count+hits <= r.l.Limit:
		d.Allowed = true
		if hits > 0 {
			r.hits = append(r.hits, op{now, hits})
			count += hits
		}
	case hits > r.l.Limit:
		d.RetryAfter = RetryNever
	default:
		d.RetryAfter = time.Duration(end)
	}
	d.Remaining = max(0, r.l.Limit-count)
	if count > 0 {
		d.ResetAfter = time.Duration(end)
	}
	return d
}

// refLog keeps one timestamp per admitted hit and counts t > now-Period. With
// stamp set, an admitted hit is recorded at stamp(now) instead of now.
type refLog struct {
	l     Limit
	times []int64
	stamp func(now int64) int64
}

func (r *refLog) count(now int64) int64 {
	n := int64(0)
	for _, t := range r.times {
		if t > now-int64(r.l.Period) {
			n++
		}
	}
	return n
}

func (r *refLog) take(now, hits int64) Decision {
	p := int64(r.l.Period)
	c := r.count(now)
	d := Decision{Limit: r.l.Limit}
	switch {
	case hits == 0 || c+hits <= r.l.Limit:
		d.Allowed = true
		at := now
		if r.stamp != nil {
			at = r.stamp(now)
		}
		for range hits {
			r.times = append(r.times, at)
		}
		c += hits
	case hits > r.l.Limit:
		d.RetryAfter = RetryNever
	default:
		// Try every expiry time in order: the first at which the hits fit.
		var exp []int64
		for _, t := range r.times {
			if t > now-p {
				exp = append(exp, t+p-now)
			}
		}
		slices.Sort(exp)
		for _, w := range exp {
			if r.count(now+w)+hits <= r.l.Limit {
				d.RetryAfter = time.Duration(w)
				break
			}
		}
	}
	d.Remaining = r.l.Limit - c
	for _, t := range r.times {
		if t > now-p {
			d.ResetAfter = max(d.ResetAfter, time.Duration(t+p-now))
		}
	}
	return d
}

// refGCRA is GCRA as a leaky bucket: a level in ns that each hit raises by T
// and that drains 1 ns per ns, with room tau. Remaining is found by trying
// every k.
type refGCRA struct {
	l           Limit
	level, last int64
	started     bool
}

func (r *refGCRA) take(now, hits int64) Decision {
	t := int64(r.l.Period) / r.l.Limit
	capacity := r.l.Burst + 1
	tau := t * capacity
	if r.started {
		r.level = max(0, r.level-(now-r.last))
	}
	r.last, r.started = now, true
	d := Decision{Limit: capacity}
	switch {
	case hits == 0 || (hits <= capacity && r.level+t*hits <= tau):
		d.Allowed = true
		r.level += t * hits
	case hits > capacity:
		d.RetryAfter = RetryNever
	default:
		d.RetryAfter = time.Duration(r.level + t*hits - tau)
	}
	for k := int64(1); k <= capacity && r.level+t*k <= tau; k++ {
		d.Remaining = k
	}
	d.ResetAfter = time.Duration(r.level)
	return d
}

// refTokenBucket keeps the tokens as an exact rational.
type refTokenBucket struct {
	l      Limit
	tokens *big.Rat
	last   int64
}

func ratCeil(x *big.Rat) int64 {
	q, m := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func ratFloor(x *big.Rat) int64 {
	q, m := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if m.Sign() < 0 {
		q.Sub(q, big.NewInt(1))
	}
	return q.Int64()
}

func (r *refTokenBucket) take(now, hits int64) Decision {
	burst := big.NewRat(r.l.Burst, 1)
	rate := big.NewRat(r.l.Limit, int64(r.l.Period)) // tokens per ns
	if r.tokens == nil {
		r.tokens = new(big.Rat).Set(burst)
	} else {
		add := new(big.Rat).Mul(rate, big.NewRat(now-r.last, 1))
		r.tokens.Add(r.tokens, add)
		if r.tokens.Cmp(burst) > 0 {
			r.tokens.Set(burst)
		}
	}
	r.last = now
	h := big.NewRat(hits, 1)
	d := Decision{Limit: r.l.Burst}
	switch {
	case hits == 0 || (hits <= r.l.Burst && r.tokens.Cmp(h) >= 0):
		d.Allowed = true
		r.tokens.Sub(r.tokens, h)
	case hits > r.l.Burst:
		d.RetryAfter = RetryNever
	default:
		need := new(big.Rat).Sub(h, r.tokens)
		d.RetryAfter = time.Duration(ratCeil(need.Quo(need, rate)))
	}
	d.Remaining = ratFloor(r.tokens)
	missing := new(big.Rat).Sub(burst, r.tokens)
	d.ResetAfter = time.Duration(ratCeil(missing.Quo(missing, rate)))
	return d
}

// newRef returns the brute-force reference of l.Kind (not SlidingWindowCounter).
func newRef(l Limit) interface {
	take(now, hits int64) Decision
} {
	switch l.Kind {
	case FixedWindow:
		return &refFixedWindow{l: l}
	case SlidingWindowLog:
		return &refLog{l: l}
	case GCRA:
		return &refGCRA{l: l}
	case TokenBucket:
		return &refTokenBucket{l: l}
	case BucketedSlidingWindow:
		// The exact log over WindowBuckets buckets, each hit stamped at the end of
		// its bucket (see BucketedWindowState).
		w := bucketWidth(int64(l.Period))
		ll := l
		ll.Period = time.Duration(WindowBuckets * w)
		return &refLog{l: ll, stamp: func(now int64) int64 { return (floorDiv(now, w) + 1) * w }}
	}
	panic("no reference for " + l.Kind.String())
}

// TestExactAgainstReference checks every Decision of the five exact algorithms
// (BucketedSlidingWindow exact at bucket granularity), field by field, against
// their references, through State.
func TestExactAgainstReference(t *testing.T) {
	for _, k := range []Kind{FixedWindow, SlidingWindowLog, GCRA, TokenBucket, BucketedSlidingWindow} {
		t.Run(k.String(), func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(300) {
				r := rand.New(rand.NewPCG(seed, uint64(k)))
				l := randLimit(r, k)
				ref := newRef(l)
				var s State
				for i, o := range randOps(r, l, 200) {
					want := ref.take(o.t, o.hits)
					got, err := s.Take(o.t, o.hits, l)
					if err != nil || got != want {
						t.Fatalf("seed %d %+v step %d Take(%d, %d): got %+v, %v, want %+v", seed, l, i, o.t, o.hits, got, err, want)
					}
				}
			}
		})
	}
}

// swcRef recomputes the sliding window counter's estimate from every admitted
// hit, with exact rationals, and the exact count of the sliding window.
type swcRef struct {
	l    Limit
	hits []op
}

// at returns prev, cur, the real-valued estimate and the exact count C of
// hits in (now-Period, now].
func (r *swcRef) at(now int64) (prev, cur int64, est *big.Rat, exact int64) {
	p := int64(r.l.Period)
	start := floorDiv(now, p) * p
	for _, h := range r.hits {
		switch {
		case h.t >= start:
			cur += h.hits
		case h.t >= start-p:
			prev += h.hits
		}
		if h.t > now-p {
			exact += h.hits
		}
	}
	est = big.NewRat(prev*(p-(now-start)), p)
	est.Add(est, big.NewRat(cur, 1))
	return prev, cur, est, exact
}

func (r *swcRef) estimate(now int64) int64 { _, _, e, _ := r.at(now); return ratFloor(e) }

// TestSlidingWindowCounterBound checks the sliding window counter against its
// stated bound: its estimate E is floor of Cloudflare's real-valued formula
// recomputed from every admitted hit, each decision follows from E, |E-C| <=
// prev, every aligned window admits at most Limit and every window of length
// Period at most 2*Limit; RetryAfter and ResetAfter are exact.
func TestSlidingWindowCounterBound(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 42))
		l := randLimit(r, SlidingWindowCounter)
		ref := &swcRef{l: l}
		p := int64(l.Period)
		var s State
		for i, o := range randOps(r, l, 150) {
			prev, _, est, exact := ref.at(o.t)
			e := ratFloor(est)
			if e < 0 || est.Cmp(big.NewRat(e, 1)) < 0 || est.Cmp(big.NewRat(e+1, 1)) >= 0 {
				t.Fatalf("floor broken")
			}
			if diff := e - exact; diff > prev || -diff > prev {
				t.Fatalf("seed %d step %d: got |E-C| = |%d-%d| > prev %d", seed, i, e, exact, prev)
			}
			got, err := s.Take(o.t, o.hits, l)
			if err != nil {
				t.Fatal(err)
			}
			allowed := o.hits == 0 || e+o.hits <= l.Limit
			if allowed && o.hits > 0 {
				ref.hits = append(ref.hits, o)
				e += o.hits
			}
			if got.Allowed != allowed || got.Remaining != max(0, l.Limit-e) {
				t.Fatalf("seed %d %+v step %d Take(%d, %d): got %+v, want allowed %v remaining %d", seed, l, i, o.t, o.hits, got, allowed, max(0, l.Limit-e))
			}
			switch w := int64(got.RetryAfter); {
			case allowed && w != 0, !allowed && o.hits > l.Limit && got.RetryAfter != RetryNever:
				t.Fatalf("seed %d step %d: got RetryAfter %v", seed, i, got.RetryAfter)
			case !allowed && o.hits <= l.Limit:
				if ref.estimate(o.t+w)+o.hits > l.Limit || (w > 1 && ref.estimate(o.t+w-1)+o.hits <= l.Limit) {
					t.Fatalf("seed %d %+v step %d: RetryAfter %v is not the exact wait", seed, l, i, got.RetryAfter)
				}
			}
			if w := int64(got.ResetAfter); ref.estimate(o.t+w) != 0 || (w > 0 && ref.estimate(o.t+w-1) == 0) {
				t.Fatalf("seed %d %+v step %d: ResetAfter %v is not when E reaches 0", seed, l, i, got.ResetAfter)
			}
		}
		// Admissions: at most Limit per aligned window, 2*Limit per Period.
		for _, h := range ref.hits {
			var aligned, sliding int64
			for _, g := range ref.hits {
				if floorDiv(g.t, p) == floorDiv(h.t, p) {
					aligned += g.hits
				}
				if g.t > h.t-p && g.t <= h.t {
					sliding += g.hits
				}
			}
			if aligned > l.Limit || sliding > 2*l.Limit {
				t.Fatalf("seed %d %+v: window ending %d admitted %d aligned, %d sliding", seed, l, h.t, aligned, sliding)
			}
		}
	}
}

// forEachRandom runs f over seeded random (Limit, ops) pairs for every Kind.
func forEachRandom(t *testing.T, seeds uint64, n int, f func(t *testing.T, l Limit, ops []op)) {
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			for seed := range seeds {
				r := rand.New(rand.NewPCG(seed, 7+uint64(k)))
				l := randLimit(r, k)
				f(t, l, randOps(r, l, n))
			}
		})
	}
}

func mustTake(t *testing.T, s *State, now, hits int64, l Limit) Decision {
	t.Helper()
	d, err := s.Take(now, hits, l)
	if err != nil {
		t.Fatalf("Take(%d, %d, %+v): got error %v", now, hits, l, err)
	}
	return d
}

func roundTrip(t *testing.T, s *State) State {
	t.Helper()
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatalf("MarshalBinary: got error %v", err)
	}
	var c State
	if err := c.UnmarshalBinary(b); err != nil {
		t.Fatalf("UnmarshalBinary(%x): got error %v", b, err)
	}
	if b2, _ := c.MarshalBinary(); string(b2) != string(b) {
		t.Fatalf("round trip: got %x, want %x", b2, b)
	}
	return c
}

// TestMarshalRoundTrip checks that Unmarshal(Marshal(s)) decides identically
// to s at every step of random sequences.
func TestMarshalRoundTrip(t *testing.T) {
	forEachRandom(t, 100, 100, func(t *testing.T, l Limit, ops []op) {
		var s State
		roundTrip(t, &s)
		for i, o := range ops {
			c := roundTrip(t, &s)
			d1, d2 := mustTake(t, &s, o.t, o.hits, l), mustTake(t, &c, o.t, o.hits, l)
			if d1 != d2 {
				t.Fatalf("%+v step %d: got %+v after a round trip, want %+v", l, i, d2, d1)
			}
		}
	})
}

// TestIdleIsFresh checks that a state reported Idle decides every later check
// exactly as a fresh state, and that a state that is not Idle is not full.
func TestIdleIsFresh(t *testing.T) {
	forEachRandom(t, 60, 120, func(t *testing.T, l Limit, ops []op) {
		var s State
		idles := 0
		for i, o := range ops {
			if s.Idle(o.t, l) {
				idles++
				c, fresh := s.Clone(), State{}
				for j, o2 := range ops[i:min(len(ops), i+40)] {
					d1, d2 := mustTake(t, &c, o2.t, o2.hits, l), mustTake(t, &fresh, o2.t, o2.hits, l)
					if d1 != d2 {
						t.Fatalf("%+v idle at step %d, step +%d: got %+v, fresh %+v", l, i, j, d1, d2)
					}
				}
			} else if d := s.peek(o.t, l); d.ResetAfter == 0 {
				t.Fatalf("%+v step %d: not Idle but ResetAfter 0", l, i)
			}
			mustTake(t, &s, o.t, o.hits, l)
		}
		if idles == 0 {
			t.Logf("%+v: never idle", l)
		}
	})
}

// TestMerge checks that Merge keeps the more restrictive state: the merged
// state peeks with the smaller Remaining (then larger ResetAfter) of the two,
// and equals one of them.
func TestMerge(t *testing.T) {
	forEachRandom(t, 60, 80, func(t *testing.T, l Limit, ops []op) {
		var a, b State
		for i, o := range ops {
			if i%2 == 0 { // a sees the even checks, b all of them
				mustTake(t, &a, o.t, o.hits, l)
			}
			mustTake(t, &b, o.t, o.hits, l)
			now := o.t + int64(i%3)
			for _, pair := range [][2]*State{{&a, &b}, {&b, &a}} {
				x, y := pair[0].Clone(), pair[1]
				dx, dy := x.peek(now, l), y.peek(now, l)
				x.Merge(y, now, l)
				dm := x.peek(now, l)
				want := dx
				if dy.Remaining < dx.Remaining || (dy.Remaining == dx.Remaining && dy.ResetAfter > dx.ResetAfter) {
					want = dy
				}
				if dm != want {
					t.Fatalf("%+v step %d: merged peek got %+v, want %+v", l, i, dm, want)
				}
				bm, _ := x.MarshalBinary()
				bx, _ := pair[0].MarshalBinary()
				by, _ := y.MarshalBinary()
				if string(bm) != string(bx) && string(bm) != string(by) {
					t.Fatalf("%+v step %d: merged state is neither input", l, i)
				}
				if x.log != nil && x.log == y.log {
					t.Fatalf("merged state shares its log with the other")
				}
			}
		}
		// Merging with a zero State or a State of another Kind keeps s.
		before, _ := a.MarshalBinary()
		a.Merge(&State{}, ops[len(ops)-1].t, l)
		a.Merge(nil, ops[len(ops)-1].t, l)
		if after, _ := a.MarshalBinary(); string(after) != string(before) {
			t.Fatalf("merge with a fresh state changed s")
		}
	})
}

// TestMergeKinds checks Merge across Kinds: a state of l.Kind wins over one of
// another Kind, whichever side it is on.
func TestMergeKinds(t *testing.T) {
	gc := Limit{Kind: GCRA, Limit: 1, Period: time.Second, Burst: 1}
	fw := Limit{Kind: FixedWindow, Limit: 1, Period: time.Second}
	var a, b State
	mustTake(t, &a, t0, 1, fw)
	mustTake(t, &b, t0, 2, gc)
	a.Merge(&b, t0, gc)
	if d := mustTake(t, &a, t0, 1, gc); a.Kind() != GCRA || d.Allowed {
		t.Errorf("merged into another kind: got %v %+v, want gcra denied", a.Kind(), d)
	}
	var z State
	z.Merge(&b, t0, gc)
	if z.Kind() != GCRA {
		t.Errorf("merged into zero: got kind %v, want gcra", z.Kind())
	}
}

// TestBackwardsWaitsOnlyTheStep checks, for every Kind, that after a large
// backwards step a drained key is not locked out beyond the step: the check is
// decided at the state's latest time (GCRA: at now, against its TAT), waits at
// most the step plus the normal full wait, and passes after that wait.
func TestBackwardsWaitsOnlyTheStep(t *testing.T) {
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			l := Limit{Kind: k, Limit: 10, Period: time.Second, Burst: 9}
			var s State
			for i := range int64(50) {
				mustTake(t, &s, t9+i*ms, 1, l)
			}
			// An hour back: within the step plus two Periods (the longest
			// normal wait, for SlidingWindowCounter) a hit passes again.
			const step = 3600 * time.Second
			back := t9 - int64(step)
			d := mustTake(t, &s, back, 1, l)
			if !d.Allowed && d.RetryAfter > step+2*time.Second {
				t.Fatalf("after an hour back: got RetryAfter %v, want <= 1h2s", d.RetryAfter)
			}
			if !d.Allowed {
				if d2 := mustTake(t, &s, back+int64(d.RetryAfter), 1, l); !d2.Allowed {
					t.Fatalf("after waiting RetryAfter %v: got %+v, want allowed", d.RetryAfter, d2)
				}
			}
		})
	}
}
