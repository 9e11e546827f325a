package algo

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A sliding-window log kept packed whenever PackLog accepts it (unpacked with
// the next check's Limit, or none, into one reused buffer) and whole otherwise
// decides every check of random sequences as the log that was never packed,
// and holds the same entries; PackLog refuses exactly the logs of three
// entries or more. Both answers occur.
func TestPackLogRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(41, 42))
	var packs, refusals int
	var buf SlidingWindowLogState
	for range 400 {
		l := randLimit(r, SlidingWindowLog)
		var kept, cur State
		for i, o := range randOps(r, l, 60) {
			if i%13 == 12 {
				l.Limit = 1 + r.Int64N(6) // a Limit that shrinks or grows
			}
			want, err1 := kept.Take(o.t, o.hits, l)
			got, err2 := cur.Take(o.t, o.hits, l)
			if got != want || (err1 == nil) != (err2 == nil) {
				t.Fatalf("%+v check %d %+v: packed %+v %v, kept %+v %v", l, i, o, got, err2, want, err1)
			}
			if b1, b2 := mustMarshal(t, &cur), mustMarshal(t, &kept); string(b1) != string(b2) {
				t.Fatalf("%+v check %d: entries %x, want %x", l, i, b1, b2)
			}
			var w [LogPackedWords]int64
			n := int32(0)
			if cur.log != nil {
				n = cur.log.n
			}
			if !cur.PackLog(w[:]) {
				if n <= maxPackedLog {
					t.Fatalf("%+v check %d: refused a log of %d entries", l, i, n)
				}
				refusals++
				cur = cur.Clone() // kept whole, as the node boxes it: off buf
				continue
			}
			if n > maxPackedLog {
				t.Fatalf("%+v check %d: packed a log of %d entries", l, i, n)
			}
			packs++
			next := l.Limit
			if i%3 == 0 {
				next = 0 // the Limit is not always known
			}
			cur = UnpackLog(w[:], &buf, next)
		}
	}
	if packs == 0 || refusals == 0 {
		t.Fatalf("%d packs, %d refusals: both forms must be exercised", packs, refusals)
	}
}

// Unpacking into a reused buffer with the check's Limit, taking an admitted
// check that leaves at most two entries and packing again allocates nothing,
// for Limits below, at and above the smallest buffer.
func TestPackLogCheckAllocatesNothing(t *testing.T) {
	for _, limit := range []int64{1, 2, 3, 4, 10} {
		l := Limit{Kind: SlidingWindowLog, Limit: limit, Period: time.Second}
		var buf SlidingWindowLogState
		var w [LogPackedWords]int64
		now := int64(0)
		check := func() {
			now += int64(time.Second) // the last entry has expired: admitted
			s := UnpackLog(w[:], &buf, limit)
			if d, err := s.Take(now, 1, l); err != nil || !d.Allowed {
				t.Fatalf("limit %d: %+v %v", limit, d, err)
			}
			if !s.PackLog(w[:]) {
				t.Fatalf("limit %d: a one-entry log did not pack", limit)
			}
		}
		check() // buf's buffer, once
		if a := testing.AllocsPerRun(100, check); a != 0 {
			t.Errorf("limit %d: %v allocations per check, want 0", limit, a)
		}
	}
}

// PackLog refuses a State of another Kind and leaves w alone; a fresh log
// packs as zeros, which unpack to a fresh log.
func TestPackLogOtherKindsAndFresh(t *testing.T) {
	t.Parallel()
	var g State
	mustTake(t, &g, 1, 1, Limit{Kind: GCRA, Limit: 5, Period: time.Second})
	w := [LogPackedWords]int64{7, 8, 9}
	if g.PackLog(w[:]) || w != [LogPackedWords]int64{7, 8, 9} {
		t.Fatalf("a GCRA State packed as a log: %v", w)
	}
	fresh := State{kind: SlidingWindowLog}
	if !fresh.PackLog(w[:]) || w != [LogPackedWords]int64{} {
		t.Fatalf("a fresh log packed as %v, want zeros", w)
	}
	var buf SlidingWindowLogState
	u := UnpackLog(w[:], &buf, 0)
	l := Limit{Kind: SlidingWindowLog, Limit: 3, Period: time.Minute}
	var ref State
	for i := range 5 {
		now := int64(i) * int64(time.Second)
		if got, want := mustTake(t, &u, now, 1, l), mustTake(t, &ref, now, 1, l); got != want {
			t.Fatalf("check %d: unpacked fresh log %+v, fresh log %+v", i, got, want)
		}
	}
}

// TakeLogPacked, falling back to the unpacked State when it declines (as the
// node does), decides every check of random sequences as TakeInto on a log
// that was never packed, leaves the same entries, and returns the same
// errors; sequences include clocks that step back, Limits that change and
// invalid checks. Both its answers occur.
func TestTakeLogPackedMatchesTakeInto(t *testing.T) {
	t.Parallel()
	var buf SlidingWindowLogState
	checkPackedTake(t, packedForm{
		kind:   SlidingWindowLog,
		seed:   61,
		take:   TakeLogPacked,
		unpack: func(w []int64, limit int64) State { return UnpackLog(w, &buf, limit) },
		pack:   (*State).PackLog,
		change: func(r *rand.Rand, l *Limit) { l.Limit = 1 + r.Int64N(6) },
	})
}

// A check that grows the unpacked log far past two entries (it is then boxed,
// as a Clone) does not leave its large buffer in the reused buf: the next
// unpack starts from a small one.
func TestUnpackLogDropsAGrownBuffer(t *testing.T) {
	t.Parallel()
	l := Limit{Kind: SlidingWindowLog, Limit: 50_000, Period: time.Minute}
	var buf SlidingWindowLogState
	var w [LogPackedWords]int64
	s := UnpackLog(w[:], &buf, l.Limit)
	mustTake(t, &s, 1, 40_000, l)
	if s.PackLog(w[:]) || cap(buf.buf) < 40_000 {
		t.Fatalf("a log of 40,000 entries: packed or not grown in buf (cap %d)", cap(buf.buf))
	}
	u := UnpackLog(w[:], &buf, l.Limit)
	if c := cap(buf.buf); c > maxKeptLogBuf {
		t.Fatalf("after the next unpack buf keeps a buffer of %d entries, want at most %d", c, maxKeptLogBuf)
	}
	if d := mustTake(t, &u, 2, 1, l); !d.Allowed || d.Remaining != l.Limit-1 {
		t.Fatalf("a fresh unpacked log after the reset: %+v", d)
	}
}
