package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/failover/redislimit"
	"github.com/ringlimit/ringlimit/node/failover/redistest"
)

const sec = int64(time.Second)

// randLimit draws a Limit of kind k: small ones where rounding is exposed
// (Periods of a few ns, T not a whole number of ns) and large ones whose
// products exceed 2^53 (SlidingWindowCounter's prev*(Period-elapsed)).
func randLimit(r *rand.Rand, k algo.Kind) algo.Limit {
	periods := []int64{1, 3, 7, 10, 64, 1000, 999_983, sec, 60 * sec, 3600 * sec, 86400 * sec}
	l := algo.Limit{Kind: k, Limit: 1 + r.Int64N(12), Period: time.Duration(periods[r.IntN(len(periods))]), Burst: r.Int64N(8)}
	if r.IntN(4) == 0 {
		l.Limit = 1 + r.Int64N(2_000_000)
	}
	switch k {
	case algo.SlidingWindowLog:
		l.Limit = min(l.Limit, 300)
	case algo.TokenBucket:
		l.Burst++
		if r.IntN(3) == 0 {
			l.Burst = 1 + r.Int64N(200_000) // Burst*Period above 2^53 with the long Periods
		}
	case algo.GCRA:
		l.Limit = min(l.Limit, int64(l.Period)) // T >= 1 ns
	}
	if redislimit.Validate(l) != nil {
		return randLimit(r, k)
	}
	return l
}

type step struct {
	key  string
	now  int64
	hits int64
	lim  algo.Limit
}

// randSteps draws n checks on a few keys with a few Limits (of every Kind, so a
// key also changes Kind), a clock that mostly moves forward by amounts around
// the emission interval and the Period, and sometimes steps back (by up to two
// Periods), starting around 2026 or before 1970.
func randSteps(r *rand.Rand, n int, kinds []algo.Kind) []step {
	var lims []algo.Limit
	for _, k := range kinds {
		for range 2 {
			lims = append(lims, randLimit(r, k))
		}
	}
	keys := []string{"a", "b", "c", "{x}:d"}
	start := []int64{1_795_000_000 * sec, -3 * sec, 0, 1 << 40}[r.IntN(4)]
	now := map[string]int64{}
	cur := map[string]algo.Limit{}
	out := make([]step, n)
	for i := range out {
		key := keys[r.IntN(len(keys))]
		if _, ok := cur[key]; !ok || r.IntN(40) == 0 {
			cur[key] = lims[r.IntN(len(lims))]
			if _, ok := now[key]; !ok {
				now[key] = start + r.Int64N(sec)
			}
		}
		l := cur[key]
		p := int64(l.Period)
		t := now[key]
		switch r.IntN(8) {
		case 0: // same instant
		case 1:
			t += r.Int64N(p/l.Limit + 1)
		case 2:
			t += r.Int64N(p + 1)
		case 3:
			t += p - 1 + r.Int64N(3)
		case 4:
			t += r.Int64N(3 * p)
		case 5:
			t++
		case 6:
			t -= r.Int64N(2*p + 1) // the clock steps back
		case 7:
			t -= r.Int64N(p/l.Limit + 2)
		}
		now[key] = t
		hits := int64(1)
		switch r.IntN(5) {
		case 0:
			hits = 0
		case 1:
			hits = r.Int64N(min(l.Limit, 1000) + l.Burst + 3)
		}
		out[i] = step{key, t, hits, l}
	}
	return out
}

// TestScriptsEqualAlgo feeds the same seeded random sequences to algo.State and
// to the Lua scripts on a real redis-server, and requires identical Decisions.
func TestScriptsEqualAlgo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, k := range redislimit.SupportedKinds() {
		for seed := range uint64(5) {
			t.Run(fmt.Sprintf("%v/seed%d", k, seed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, uint64(k)))
				l, err := redislimit.New(srv.Client(), redislimit.Options{Prefix: fmt.Sprintf("p:%v:%d:", k, seed), ExpiryGrace: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				kinds := []algo.Kind{k}
				if seed >= 3 {
					kinds = redislimit.SupportedKinds() // keys also change Kind
				}
				ref := map[string]*algo.State{}
				for i, s := range randSteps(r, 1000, kinds) {
					st := ref[s.key]
					if st == nil {
						st = new(algo.State)
						ref[s.key] = st
					}
					want, werr := st.Take(s.now, s.hits, s.lim)
					got, gerr := l.Take(ctx, s.key, s.now, s.hits, s.lim)
					if werr != nil || gerr != nil {
						t.Fatalf("step %d %+v: errors algo %v, redis %v", i, s, werr, gerr)
					}
					if got != want {
						t.Fatalf("step %d key %q now %d hits %d limit %+v: got %+v, want %+v", i, s.key, s.now, s.hits, s.lim, got, want)
					}
				}
			})
		}
	}
}

// TestScriptsLargeValues pins checks whose intermediate products exceed 2^53
// (where float64 Lua arithmetic would round) against algo.
func TestScriptsLargeValues(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	l, err := redislimit.New(srv.Client(), redislimit.Options{ExpiryGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1_795_000_000*sec + 123_456_789)
	cases := []algo.Limit{
		{Kind: algo.SlidingWindowCounter, Limit: 1<<51 - 1, Period: redislimit.MaxDuration},
		{Kind: algo.SlidingWindowCounter, Limit: 3_000_017, Period: time.Duration(86400*sec + 7)},
		{Kind: algo.GCRA, Limit: 7, Period: redislimit.MaxDuration / 8, Burst: 6},
		{Kind: algo.TokenBucket, Limit: 1<<51 - 3, Period: redislimit.MaxDuration / 1000, Burst: 1000},
		{Kind: algo.TokenBucket, Limit: 100_003, Period: time.Hour, Burst: 1_000_000}, // Burst*Period = 3.6e18
		{Kind: algo.TokenBucket, Limit: 7, Period: redislimit.MaxDuration, Burst: 7},
		{Kind: algo.FixedWindow, Limit: 1 << 51, Period: redislimit.MaxDuration - 1},
		{Kind: algo.SlidingWindowLog, Limit: 5, Period: redislimit.MaxDuration},
	}
	for i, lim := range cases {
		var st algo.State
		key := fmt.Sprintf("large%d", i)
		for j, tt := range []int64{now, now + 1, now + int64(lim.Period)/3, now + int64(lim.Period)/3 - 5*sec, now + int64(lim.Period) + 17, now + 2*int64(lim.Period)} {
			hits := []int64{1, 1 << 30, 2, 1, 3, 1 << 31}[j]
			want, werr := st.Take(tt, hits, lim)
			got, gerr := l.Take(ctx, key, tt, hits, lim)
			if werr != nil || gerr != nil || got != want {
				t.Errorf("%+v step %d: got %+v (%v), want %+v (%v)", lim, j, got, gerr, want, werr)
			}
		}
	}
}

func TestUnsupportedAndInvalid(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l, err := redislimit.New(srv.Client(), redislimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, lim := range []algo.Limit{
		{Kind: algo.FixedWindow, Limit: 1, Period: redislimit.MaxDuration + 1},
		{Kind: algo.FixedWindow, Limit: redislimit.MaxCount + 1, Period: time.Second},
		{Kind: algo.GCRA, Limit: 1, Period: redislimit.MaxDuration, Burst: 1},
		{Kind: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 1000},
	} {
		if algo.Limit.Validate(lim) != nil {
			t.Fatalf("%+v: algo refuses it; the case must be valid for algo", lim)
		}
		_, err := l.Take(ctx, "k", 0, 1, lim)
		if !errors.Is(err, redislimit.ErrUnsupportedLimit) || !errors.Is(err, algo.ErrInvalidLimit) {
			t.Errorf("%+v: got %v, want ErrUnsupportedLimit", lim, err)
		}
	}
	if _, err := l.Take(ctx, "k", 0, -1, algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Second}); !errors.Is(err, algo.ErrInvalidLimit) {
		t.Errorf("hits -1: got %v, want algo.ErrInvalidLimit", err)
	}
	if _, err := l.Take(ctx, "", 0, 1, algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Second}); !errors.Is(err, redislimit.ErrInvalidKey) {
		t.Errorf("empty key: got %v, want ErrInvalidKey", err)
	}
	// A step back far beyond the exact range is an error, not a wrong Decision.
	g := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Second}
	if _, err := l.Take(ctx, "step", algo.MaxTime-10, 1, g); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Take(ctx, "step", 0, 1, g); !errors.Is(err, redislimit.ErrClockStep) {
		t.Errorf("step back by 2^62 ns: got %v, want ErrClockStep", err)
	}
}

// TestExpiry checks that an admitted check sets the key's TTL to ResetAfter
// (rounded up to ms) plus the grace, and that denied checks leave it alone.
func TestExpiry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	l, err := redislimit.New(c, redislimit.Options{Prefix: "e:", ExpiryGrace: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lim := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Minute, Burst: 1} // T = 6 s
	d, err := l.Take(ctx, "x", 1_795_000_000*sec, 1, lim)
	if err != nil || !d.Allowed || d.ResetAfter != 6*time.Second {
		t.Fatalf("got %+v %v, want allowed, ResetAfter 6s", d, err)
	}
	ttl, err := c.PTTL(ctx, "e:x").Result()
	if err != nil || ttl > 8*time.Second || ttl < 7*time.Second {
		t.Errorf("PTTL %v %v, want about 8s (6s + 2s grace)", ttl, err)
	}
	if n, _ := c.Exists(ctx, "e:nothing").Result(); n != 0 {
		t.Fatal("unexpected key")
	}
	// A peek never creates a key.
	if _, err := l.Take(ctx, "peek", 1_795_000_000*sec, 0, lim); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, "e:peek").Result(); n != 0 {
		t.Errorf("a peek created its key")
	}
}

// FuzzScriptsEqualAlgo: any valid (Limit, hits, times) in the supported range
// gets the same Decisions from the scripts as from algo, over two checks of a
// key (the second possibly earlier than the first); anything else is an error
// wrapping algo.ErrInvalidLimit from both.
func FuzzScriptsEqualAlgo(f *testing.F) {
	srv := redistest.Start(f)
	c := srv.Client()
	f.Add(uint8(algo.GCRA), int64(30), int64(60*sec), int64(15), int64(1_795_000_000*sec), int64(1), int64(-sec), int64(3))
	f.Add(uint8(algo.SlidingWindowCounter), int64(3_000_017), int64(86400*sec+7), int64(0), int64(-5), int64(2_000_000), int64(86400*sec/2), int64(999_999))
	f.Add(uint8(algo.TokenBucket), int64(7), int64(sec), int64(3), int64(0), int64(3), int64(sec/7), int64(1))
	f.Add(uint8(algo.FixedWindow), int64(5), int64(999_983), int64(0), int64(1<<40), int64(5), int64(-999_983), int64(1))
	f.Add(uint8(algo.SlidingWindowLog), int64(4), int64(10), int64(0), int64(7), int64(2), int64(-3), int64(2))
	n := 0
	f.Fuzz(func(t *testing.T, kind uint8, limit, period, burst, now, hits1, step, hits2 int64) {
		n++
		l, err := redislimit.New(c, redislimit.Options{Prefix: fmt.Sprintf("fz%d:", n), ExpiryGrace: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		lim := algo.Limit{Kind: algo.Kind(kind), Limit: limit, Period: time.Duration(period), Burst: burst}
		if lim.Kind == algo.SlidingWindowLog && limit > 1000 {
			t.Skipf("fuzz input skipped: a sliding_window_log of limit %d (> 1000) is too slow to compare on Redis", limit)
		}
		var st algo.State
		ctx := context.Background()
		for _, ch := range []struct{ now, hits int64 }{{now, hits1}, {now + step, hits2}} {
			if (step > 0 && ch.now < now) || (step < 0 && ch.now > now) {
				t.Skip("fuzz input skipped: now + step overflows int64")
			}
			want, werr := st.Take(ch.now, ch.hits, lim)
			got, gerr := l.Take(ctx, "k", ch.now, ch.hits, lim)
			switch {
			case werr != nil:
				if !errors.Is(gerr, algo.ErrInvalidLimit) {
					t.Fatalf("algo refused (%v), redis: %+v %v", werr, got, gerr)
				}
				return
			case errors.Is(gerr, redislimit.ErrUnsupportedLimit) || errors.Is(gerr, redislimit.ErrClockStep) || errors.Is(gerr, redislimit.ErrStateRange):
				return // documented range
			case gerr != nil || got != want:
				t.Fatalf("%+v now %d hits %d: got %+v (%v), want %+v", lim, ch.now, ch.hits, got, gerr, want)
			}
		}
	})
}

// TestTokenBucketLimitChanges: a bucket checked under another Period keeps its
// token*ns debt (as algo does), also when the debt is above 2^53; a debt that
// cannot be computed exactly under the new Limit is ErrStateRange.
func TestTokenBucketLimitChanges(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l, err := redislimit.New(srv.Client(), redislimit.Options{ExpiryGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := 1_795_000_000 * sec
	lims := []algo.Limit{
		{Kind: algo.TokenBucket, Limit: 3, Period: time.Second, Burst: 10},
		{Kind: algo.TokenBucket, Limit: 5, Period: 7 * time.Second, Burst: 10},
		{Kind: algo.TokenBucket, Limit: 100_003, Period: time.Hour, Burst: 1_000_000},
		{Kind: algo.TokenBucket, Limit: 1_000_000, Period: 999_983 * time.Nanosecond, Burst: 3},
		{Kind: algo.TokenBucket, Limit: 2000, Period: time.Minute, Burst: 999_999},
	}
	var st algo.State
	ranged := 0
	for i := range 200 {
		lim := lims[(i/7)%len(lims)]
		hits := int64(i%5) * (lim.Burst/7 + 1)
		now += int64(i%3) * int64(lim.Period) / 11
		if i%13 == 0 {
			now -= int64(lim.Period) / 3
		}
		want, _ := st.Take(now, hits, lim)
		got, err := l.Take(ctx, "tb", now, hits, lim)
		if errors.Is(err, redislimit.ErrStateRange) {
			// Only where algo's answer itself is beyond the exact range.
			if want.ResetAfter < time.Duration(redislimit.MaxDuration) {
				t.Fatalf("step %d %+v hits %d: ErrStateRange, but algo's ResetAfter is %v", i, lim, hits, want.ResetAfter)
			}
			ranged++
			if err := srv.Client().Del(ctx, l.Key("tb")).Err(); err != nil {
				t.Fatal(err)
			}
			st = algo.State{}
			continue
		}
		if err != nil || got != want {
			t.Fatalf("step %d %+v hits %d: got %+v (%v), want %+v", i, lim, hits, got, err, want)
		}
	}
	t.Logf("%d of 200 checks beyond the exact range (the key was then reset on both sides)", ranged)
	// A debt of 10^6 tokens of an hour, read under 1 token per 2^50 ns: the
	// wait is far beyond 2^53 ns.
	big := algo.Limit{Kind: algo.TokenBucket, Limit: 1_000_000, Period: time.Hour, Burst: 1_000_000}
	if _, err := l.Take(ctx, "range", now, 1_000_000, big); err != nil {
		t.Fatal(err)
	}
	tiny := algo.Limit{Kind: algo.TokenBucket, Limit: 1, Period: 1 << 50, Burst: 1}
	if _, err := l.Take(ctx, "range", now, 0, tiny); !errors.Is(err, redislimit.ErrStateRange) {
		t.Errorf("huge debt under a tiny rate: got %v, want ErrStateRange", err)
	}
}
