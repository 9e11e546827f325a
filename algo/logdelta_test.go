package algo

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

// A replica kept up to date by LogSince/AppendLog equals the original after
// every update, whatever the checks (several hits at once, the clock stepping
// back, long pauses that expire everything, Limit changes), and a replica that
// missed an update refuses the next one instead of going wrong.
func TestLogDeltaKeepsReplicaEqual(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 77))
		l := Limit{Kind: SlidingWindowLog, Limit: 1 + r.Int64N(40), Period: time.Duration(1+r.Int64N(100)) * time.Millisecond}
		var orig, replica State
		now := int64(1_700_000_000_000_000_000)
		tt, tn := replica.LogTail() // what the replica was last brought to
		for step := range 3000 {
			switch r.IntN(10) {
			case 0:
				now -= r.Int64N(int64(l.Period)) // clock steps back
			case 1:
				now += 3 * int64(l.Period) // everything expires
			default:
				now += r.Int64N(int64(l.Period) / 4)
			}
			if r.IntN(50) == 0 {
				l.Limit = 1 + r.Int64N(40) // the caller changes the limit
			}
			if _, err := orig.Take(now, r.Int64N(4), l); err != nil {
				t.Fatal(err)
			}
			if r.IntN(3) != 0 {
				continue // several checks between updates
			}
			delta, ok := orig.LogSince(tt, tn)
			if !ok {
				t.Fatalf("seed %d step %d: LogSince(%d, %d) refused a log that grew from it", seed, step, tt, tn)
			}
			if !replica.AppendLog(tt, tn, &delta, l) {
				// Only when the Limit shrank under what the log holds: the
				// whole state is copied then, as the node does.
				if lt, _ := orig.LogTail(); lt != 0 && int64(orig.log.n) <= l.Limit {
					t.Fatalf("seed %d step %d: AppendLog refused an update in order (log %d entries, limit %d)", seed, step, orig.log.n, l.Limit)
				}
				replica = orig.Clone()
			}
			a, _ := orig.MarshalBinary()
			b, _ := replica.MarshalBinary()
			if !bytes.Equal(a, b) {
				t.Fatalf("seed %d step %d: replica differs from the original:\n%x\n%x", seed, step, a, b)
			}
			tt, tn = orig.LogTail()
		}
	}
}

func TestLogDeltaRefusesOutOfOrder(t *testing.T) {
	l := Limit{Kind: SlidingWindowLog, Limit: 10, Period: time.Second}
	var orig State
	base := int64(1_700_000_000_000_000_000)
	for i := range int64(3) {
		if _, err := orig.Take(base+i, 1, l); err != nil {
			t.Fatal(err)
		}
	}
	replica := orig.Clone()
	tt, tn := orig.LogTail()
	if tt != base+2 || tn != 1 {
		t.Fatalf("tail (%d, %d), want (%d, 1)", tt, tn, base+2)
	}
	if _, err := orig.Take(base+3, 2, l); err != nil {
		t.Fatal(err)
	}
	delta, ok := orig.LogSince(tt, tn)
	if !ok || delta.log.n != 2 {
		t.Fatalf("delta of 2 new hits: ok %v, %+v", ok, delta.log)
	}
	// A replica that is behind (another tail) refuses, unchanged.
	behind := replica.Clone()
	if _, err := behind.Take(base+2, 1, l); err != nil {
		t.Fatal(err)
	}
	before, _ := behind.MarshalBinary()
	if behind.AppendLog(tt, tn, &delta, l) {
		t.Fatal("a replica with another tail accepted the delta")
	}
	after, _ := behind.MarshalBinary()
	if !bytes.Equal(before, after) {
		t.Fatal("a refused AppendLog changed the replica")
	}
	// Entries before the tail, or over the limit, are refused.
	early := State{kind: SlidingWindowLog, log: &SlidingWindowLogState{buf: []int64{base}, n: 1}}
	if replica.AppendLog(tt, tn, &early, l) {
		t.Fatal("accepted an entry older than the tail")
	}
	many := State{kind: SlidingWindowLog, log: &SlidingWindowLogState{buf: make([]int64, 20), n: 20}}
	for i := range many.log.buf {
		many.log.buf[i] = base + 10
	}
	if replica.AppendLog(tt, tn, &many, l) {
		t.Fatal("accepted more entries than the limit")
	}
	if !replica.AppendLog(tt, tn, &delta, l) {
		t.Fatal("refused the delta in order")
	}
	// A log that lost entries at its tail cannot have grown from it.
	if _, ok := orig.LogSince(base+3, 5); ok {
		t.Fatal("LogSince accepted a tail with more entries than the log holds at it")
	}
	var other State
	if _, ok := other.LogSince(0, 0); ok {
		t.Fatal("LogSince of a State of no Kind")
	}
}

// FuzzAppendLog feeds AppendLog a replica and a delta decoded from arbitrary
// bytes (what a peer could send) and an arbitrary tail: it must never panic,
// a refusal must leave the replica unchanged, and an accepted update must
// leave a log in time order within the limit.
func FuzzAppendLog(f *testing.F) {
	l := Limit{Kind: SlidingWindowLog, Limit: 8, Period: time.Second}
	base := int64(1_700_000_000_000_000_000)
	var a State
	for i := range int64(3) {
		a.Take(base+i*1000, 1, l)
	}
	tt, tn := a.LogTail()
	ab, _ := a.MarshalBinary()
	a.Take(base+5000, 2, l)
	d, _ := a.LogSince(tt, tn)
	db, _ := d.MarshalBinary()
	f.Add(ab, db, tt, tn, int64(8), int64(1e9))
	f.Add([]byte{1, 1, 0}, db, int64(0), int64(0), int64(3), int64(10))
	f.Add(ab, []byte{1, 1, 2, 0, 0}, tt, tn, int64(1), int64(1))
	f.Fuzz(func(t *testing.T, rb, db []byte, tt, tn, limit, period int64) {
		var r, d State
		if r.UnmarshalBinary(rb) != nil || d.UnmarshalBinary(db) != nil {
			return
		}
		l := Limit{Kind: SlidingWindowLog, Limit: limit, Period: time.Duration(period)}
		before, _ := r.MarshalBinary()
		if !r.AppendLog(tt, tn, &d, l) {
			after, _ := r.MarshalBinary()
			if !bytes.Equal(before, after) {
				t.Fatalf("a refused AppendLog changed the replica: %x -> %x", before, after)
			}
			return
		}
		if r.Kind() != SlidingWindowLog {
			t.Fatalf("accepted, but the replica is of kind %v", r.Kind())
		}
		if r.log != nil {
			if int64(r.log.n) > min(l.Limit, MaxLogLimit) {
				t.Fatalf("replica holds %d entries, limit %d", r.log.n, l.Limit)
			}
			for i := int32(1); i < r.log.n; i++ {
				if r.log.at(i) < r.log.at(i-1) {
					t.Fatalf("replica out of order at %d", i)
				}
			}
		}
		// The result encodes and decodes as any state does.
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back State
		if err := back.UnmarshalBinary(b); err != nil {
			t.Fatalf("accepted result does not decode: %v", err)
		}
	})
}
