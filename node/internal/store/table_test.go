package store

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/algo"
)

// TestTableMatchesMap drives a table and a Go map with the same random inserts,
// removals and scans (few distinct hashes, crowded into a small range of home
// slots so that probe runs are long and wrap around) and checks they always
// hold the same keys.
func TestTableMatchesMap(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var tb table[[1]int64]
	ref := map[uint64]int64{}
	// Hashes near 2^64 all have their home at the last slots: runs wrap.
	hash := func() uint64 { return ^uint64(0) - uint64(rng.IntN(300))<<40 }
	for step := range 20000 {
		h := hash()
		i := tb.find(h)
		v, ok := ref[h]
		if (i >= 0) != ok {
			t.Fatalf("step %d: find(%x) = %d, map has it: %v", step, h, i, ok)
		}
		switch op := rng.IntN(10); {
		case op < 5 && !ok:
			i = tb.insert(h)
			tb.slots[i].w[0] = int64(step)
			ref[h] = int64(step)
		case op < 5 && ok:
			if got := tb.slots[i].w[0]; got != v {
				t.Fatalf("step %d: value %d, want %d", step, got, v)
			}
		case op < 9 && ok:
			tb.remove(i)
			delete(ref, h)
		case op == 9:
			// Scan, dropping the odd values; every key must be visited.
			seen := map[uint64]bool{}
			tb.scan(func(i int) {
				seen[tb.slots[i].h] = true
				if tb.slots[i].w[0]%2 == 1 {
					delete(ref, tb.slots[i].h)
					tb.remove(i)
				}
			})
			for h, v := range ref {
				if !seen[h] && v%2 == 0 {
					t.Fatalf("step %d: scan skipped %x", step, h)
				}
			}
			tb.shrink()
		}
		if tb.n != len(ref) {
			t.Fatalf("step %d: table holds %d, map %d", step, tb.n, len(ref))
		}
	}
	for h, v := range ref {
		if i := tb.find(h); i < 0 || tb.slots[i].w[0] != v {
			t.Fatalf("final: find(%x) = %d, want value %d", h, i, v)
		}
	}
	if tb.n*loadDen > len(tb.slots)*maxLoadNum {
		t.Fatalf("load %d/%d above the bound", tb.n, len(tb.slots))
	}
}

// A key whose hash is the empty marker is still stored (as foldedHash).
func TestStoreKeepsTheKeyWithHashZero(t *testing.T) {
	t.Parallel()
	s := New(10, xxhash.Sum64String, nil)
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	now := int64(time.Hour)
	if d, err := s.Take(0, l, 1, now, now, nil); err != nil || !d.Allowed {
		t.Fatalf("first hit: got %+v, %v; want allowed", d, err)
	}
	if d, _ := s.Take(0, l, 1, now, now, nil); d.Allowed {
		t.Fatal("second hit on hash 0 allowed: its state was not kept")
	}
}

// Distinct Limits are interned per shard and released with their last key;
// a key keeps the Limit its state was last written under: a check denied under
// another Limit leaves it, an admitted one sets it.
func TestStoreInternsLimits(t *testing.T) {
	t.Parallel()
	s := New(100, xxhash.Sum64String, nil)
	now := int64(time.Hour)
	h := uint64(7) // shard 7
	sh := &s.shards[ShardOf(h)]
	a := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second}
	b := algo.Limit{Kind: algo.GCRA, Limit: 20, Period: time.Second}
	for i := range uint64(5) {
		if _, err := s.Take(h+i*NumShards, a, 1, now, now, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(sh.limits.idx); got != 1 {
		t.Fatalf("distinct limits after 5 keys of one limit: got %d, want 1", got)
	}
	if d, err := s.Take(h, b, 1, now, now, nil); err != nil || d.Allowed {
		t.Fatalf("a second hit within a's interval: %+v, %v; want denied", d, err)
	}
	i := sh.gcra.find(h)
	if got := sh.limits.at(sh.gcra.slots[i].lim); got != a {
		t.Fatalf("limit of the key after a denied check with b: got %+v, want %+v", got, a)
	}
	now += int64(time.Second)
	if d, err := s.Take(h, b, 1, now, now, nil); err != nil || !d.Allowed {
		t.Fatalf("a hit a second later: %+v, %v; want allowed", d, err)
	}
	if got := sh.limits.at(sh.gcra.slots[i].lim); got != b {
		t.Fatalf("limit of the key after a check with b: got %+v, want %+v", got, b)
	}
	if got := len(sh.limits.idx); got != 2 {
		t.Fatalf("distinct limits: got %d, want 2", got)
	}
	s.DropIdle(now + int64(time.Hour))
	if got, n := len(sh.limits.idx), s.Len(); got != 0 || n != 0 {
		t.Fatalf("after every key went idle: %d limits, %d keys; want 0, 0", got, n)
	}
}

// Every algorithm's state survives extract and install into another store
// unchanged (the next check decides the same on both), and the extracted
// hashes are exactly those move selected.
func TestStoreExtractInstallRoundTrip(t *testing.T) {
	t.Parallel()
	now := int64(time.Hour)
	from := New(1000, xxhash.Sum64String, nil)
	to := New(1000, xxhash.Sum64String, nil)
	ref := New(1000, xxhash.Sum64String, nil) // never moved
	rng := rand.New(rand.NewPCG(3, 4))
	type key struct {
		h uint64
		l algo.Limit
	}
	var keys []key
	for _, k := range algo.Kinds() {
		l := algo.Limit{Kind: k, Limit: 5, Period: time.Minute, Burst: 3}
		for range 40 {
			keys = append(keys, key{rng.Uint64(), l})
		}
	}
	for step := range 400 {
		k := keys[rng.IntN(len(keys))]
		at := now + int64(step)*int64(10*time.Millisecond)
		d1, err1 := from.Take(k.h, k.l, 1, at, at, nil)
		d2, err2 := ref.Take(k.h, k.l, 1, at, at, nil)
		if d1 != d2 || err1 != nil || err2 != nil {
			t.Fatalf("step %d: stores disagree before the move: %+v %v / %+v %v", step, d1, err1, d2, err2)
		}
	}
	held := from.Len()
	moved := from.Extract(func(h uint64) MoveAction {
		if h%2 == 0 {
			return MoveSend
		}
		return MoveKeep
	}, now)
	for _, m := range moved {
		if m.H%2 != 0 {
			t.Fatalf("extracted hash %x, move said no", m.H)
		}
		to.Install(m.H, m.Limit, m.St, m.LastNow, m.CallerClock, now, false)
	}
	if from.Len()+to.Len() != held {
		t.Fatalf("keys after the move: %d + %d, want %d", from.Len(), to.Len(), held)
	}
	later := now + int64(5*time.Second)
	for _, k := range keys {
		s := from
		if k.h%2 == 0 {
			s = to
		}
		d1, _ := s.Take(k.h, k.l, 1, later, later, nil)
		d2, _ := ref.Take(k.h, k.l, 1, later, later, nil)
		if d1 != d2 {
			t.Fatalf("%v key %x after the move: got %+v, want %+v", k.l.Kind, k.h, d1, d2)
		}
	}
}

// TestStoreInstallFromPeerKeepsNoClock: a state installed from a peer (a
// replica, a handoff) whose last check time is that peer's clock, not later
// than ours, is judged by our clock from then on, as our decisions on it are:
// no clockRec (which cost every replica a map entry), and it goes idle when
// its state is idle at our clock. A caller's timestamp, or a peer time ahead
// of ours, keeps a clockRec.
func TestStoreInstallFromPeerKeepsNoClock(t *testing.T) {
	t.Parallel()
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second} // emission interval 100 ms
	wall := int64(1_700_000_000) * int64(time.Second)
	last := wall - 5*int64(time.Millisecond) // the owner's last check, 5 ms before the backup's clock
	var st algo.State
	if _, err := st.Take(last, 1, l); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		lastNow   int64
		caller    bool
		wantClock bool
	}{
		{"peer clock before ours", last, false, false},
		{"peer clock equal to ours", wall, false, false},
		{"caller timestamp", last, true, true},
		{"peer clock ahead of ours", wall + int64(time.Millisecond), false, true},
	} {
		s := New(10, xxhash.Sum64String, nil)
		h := fold(xxhash.Sum64String(c.name))
		s.Install(h, l, st, c.lastNow, c.caller, wall, false)
		// Installed again (the next replication send): merged, same outcome.
		s.Install(h, l, st, c.lastNow, c.caller, wall+1, false)
		sh := &s.shards[ShardOf(h)]
		i := sh.gcra.find(h)
		if i < 0 {
			t.Fatalf("%s: state not installed", c.name)
		}
		_, rec := sh.gcra.clocks[h]
		flag := sh.gcra.slots[i].flags&flagClock != 0
		if rec != c.wantClock || flag != c.wantClock {
			t.Errorf("%s: got clockRec %v, flagClock %v; want %v", c.name, rec, flag, c.wantClock)
		}
	}

	// Idle by our clock: the state (TAT = last + 100 ms) is kept just before
	// its TAT and dropped at it, as its owner would drop it.
	s := New(10, xxhash.Sum64String, nil)
	h := fold(xxhash.Sum64String("idle"))
	s.Install(h, l, st, last, false, wall, false)
	tat := last + int64(100*time.Millisecond)
	s.DropIdle(tat - 1)
	if s.Len() != 1 {
		t.Fatalf("dropped at TAT-1 ns: got %d keys, want 1", s.Len())
	}
	s.DropIdle(tat)
	if s.Len() != 0 {
		t.Fatalf("kept at its TAT: got %d keys, want 0 (idle at our clock)", s.Len())
	}
}

// The address and length a table publishes for prefetchHome are its slots'
// after every resize (growth and shrink), so that a prefetch aims at the home
// slot it would probe first.
func TestTablePublishesSlotsForPrefetch(t *testing.T) {
	t.Parallel()
	var tb table[[2]int64]
	check := func(when string) {
		t.Helper()
		if got, want := tb.size.Load(), uintptr(len(tb.slots)); got != want {
			t.Fatalf("%s: published length %d, slots %d", when, got, want)
		}
		if got, want := tb.base.Load(), uintptr(unsafe.Pointer(unsafe.SliceData(tb.slots))); got != want {
			t.Fatalf("%s: published address %#x, slots at %#x", when, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var hs []uint64
	for range 5000 {
		h := rng.Uint64() | 1
		if tb.find(h) < 0 {
			tb.insert(h)
			hs = append(hs, h)
		}
		check("after insert")
	}
	for _, h := range hs {
		tb.remove(tb.find(h))
		tb.shrink()
		check("after remove and shrink")
	}
}

// store.prefetch runs without the shard lock while checks insert keys and
// grow the tables it aims into: under -race (how the tests run) any read of
// a table's memory that is not atomic is reported. The store holds
// prefetchMinKeys keys, so the prefetches are made, and the checks' answers
// stay exact.
func TestPrefetchDuringGrowthIsRaceFree(t *testing.T) {
	t.Parallel()
	s := New(1<<20, xxhash.Sum64String, nil)
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 2, Period: time.Hour}
	now := int64(1_700_000_000) * int64(time.Second)
	hashOf := func(i uint64) uint64 { return xxhash.Sum64(binary.LittleEndian.AppendUint64(nil, i)) }
	for i := range uint64(prefetchMinKeys) {
		if _, err := s.Take(hashOf(i), l, 1, now, now, nil); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	prefetched := make(chan int)
	go func() {
		n := 0
		for x := uint64(1); ; x++ {
			select {
			case <-done:
				prefetched <- n
				return
			default:
			}
			s.Prefetch(hashOf(x%(2*prefetchMinKeys)), l.Kind)
			n++
		}
	}()
	// New keys: tables grow under the prefetches. Each key's second hit is
	// admitted and its third denied, as a fixed window of 2 must.
	for i := uint64(prefetchMinKeys); i < prefetchMinKeys+20_000; i++ {
		for hit, want := range []bool{true, true, false} {
			d, err := s.Take(hashOf(i), l, 1, now, now, nil)
			if err != nil || d.Allowed != want {
				t.Fatalf("key %d hit %d: got %+v, %v; want allowed=%v", i, hit+1, d, err, want)
			}
		}
	}
	close(done)
	if n := <-prefetched; n == 0 {
		t.Fatal("no prefetch ran")
	}
}

// Only a sliding-window log's boxes keep sent marks (the tail last sent to the
// backup, for log deltas): the bucketed window replicates whole states, and a
// mark per boxed bucketed key was 24 bytes of heap for nothing
// (BenchmarkMemoryPerKey/bucketed_sliding_window: 271.2 -> 246.0 B/key, when
// every bucketed key was boxed).
func TestOnlyLogBoxesKeepSentMarks(t *testing.T) {
	t.Parallel()
	s := New(10_000, xxhash.Sum64String, nil)
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC).UnixNano()
	logL := algo.Limit{Kind: algo.SlidingWindowLog, Limit: 5, Period: time.Minute}
	bktL := algo.Limit{Kind: algo.BucketedSlidingWindow, Limit: 5, Period: time.Minute}
	const keys = 300
	for i := range uint64(keys) {
		// Three log entries, and bucketed hits a bucket apart: both boxed.
		for j, l := range []algo.Limit{logL, logL, logL, bktL, bktL} {
			at := now + int64(j)*int64(5*time.Second)
			if d, err := s.Take(xxhash.Sum64String(fmt.Sprint(l.Kind, i)), l, 1, at, at, nil); err != nil || !d.Allowed {
				t.Fatalf("key %d %v: %+v, %v", i, l.Kind, d, err)
			}
		}
	}
	var logs, bkts int
	for i := range s.shards {
		sh := &s.shards[i]
		logs += len(sh.logs.st)
		bkts += len(sh.bkts.st)
		if len(sh.bkts.sent) != 0 {
			t.Fatalf("shard %d: %d sent marks in the bucketed window's boxes, want none", i, len(sh.bkts.sent))
		}
		if len(sh.logs.sent) != len(sh.logs.st) {
			t.Fatalf("shard %d: %d sent marks for %d logs", i, len(sh.logs.sent), len(sh.logs.st))
		}
	}
	if logs != keys || bkts != keys {
		t.Fatalf("boxed %d logs and %d bucketed states, want %d each", logs, bkts, keys)
	}
	if got := unsafe.Sizeof(logMark{}); got != 16 {
		t.Fatalf("logMark is %d bytes, want 16", got)
	}
}

// A sliding-window log of at most two entries, and a bucketed-window key whose
// hits sit in one bucket, are packed in their slot, and boxed once they grow
// past that; either way the store decides every check as an algo.State fed the
// same checks (random clocks, hits, Limits and Periods, which rebucket), a
// copy taken for replication or a handoff stays as it was while other keys of
// its shard are checked (a packed state is unpacked into one buffer per
// shard), and removing the keys frees every box.
func TestSmallLogAndBucketedKeysArePacked(t *testing.T) {
	t.Parallel()
	for _, kind := range []algo.Kind{algo.SlidingWindowLog, algo.BucketedSlidingWindow} {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			s := New(10_000, xxhash.Sum64String, nil)
			rng := rand.New(rand.NewPCG(31, uint64(kind)))
			const keys = 64
			refs := make([]algo.State, keys)
			lims := make([]algo.Limit, keys)
			hash := func(i int) uint64 { return uint64(i)*NumShards + 5 } // every key in shard 5
			newLimit := func() algo.Limit {
				return algo.Limit{Kind: kind, Limit: 1 + rng.Int64N(8), Period: time.Duration(16 + rng.Int64N(1600))}
			}
			for i := range lims {
				lims[i] = newLimit()
			}
			now := int64(time.Hour)
			sh := &s.shards[5]
			tbl, bx := &sh.swl, &sh.logs
			if kind == algo.BucketedSlidingWindow {
				tbl, bx = &sh.bsw, &sh.bkts
			}
			var packed, boxed int
			for step := range 20_000 {
				i := rng.IntN(keys)
				l := &lims[i]
				switch rng.IntN(10) {
				case 0:
					now += rng.Int64N(int64(l.Period) * 2)
				case 1, 2, 3:
					now += rng.Int64N(int64(l.Period)/16 + 1)
				}
				if step%97 == 0 {
					*l = newLimit()
				}
				hits := rng.Int64N(3)
				got, err1 := s.Take(hash(i), *l, hits, now, now, nil)
				want, err2 := refs[i].Take(now, hits, *l)
				if got != want || (err1 == nil) != (err2 == nil) {
					t.Fatalf("step %d key %d %+v: store %+v %v, state %+v %v", step, i, *l, got, err1, want, err2)
				}
				j := tbl.find(fold(hash(i)))
				if j < 0 {
					continue // a peek of an unknown key stores nothing
				}
				if tbl.slots[j].words()[0] < 0 {
					boxed++
				} else {
					packed++
				}
				if step%50 == 0 {
					// A copy of this key, then checks on the others: the copy is unchanged.
					m := tbl.copyAt(sh, kind, &tbl.slots[j], now)
					before := mustMarshalState(t, &m.St)
					if want := mustMarshalState(t, &refs[i]); string(before) != string(want) {
						t.Fatalf("step %d: key %d copied as %x, holds %x", step, i, before, want)
					}
					for k := range keys {
						if k != i {
							if _, err := s.Take(hash(k), lims[k], 0, now, now, nil); err != nil {
								t.Fatal(err)
							}
						}
					}
					if after := mustMarshalState(t, &m.St); string(after) != string(before) {
						t.Fatalf("step %d: a copy of key %d changed from %x to %x while other keys were checked", step, i, before, after)
					}
				}
			}
			if packed == 0 || boxed == 0 {
				t.Fatalf("%d packed and %d boxed observations: both forms must occur", packed, boxed)
			}
			// Every key idle: each is dropped, and every box is free again.
			s.DropIdle(now + int64(time.Hour))
			if n := s.Len(); n != 0 {
				t.Fatalf("%d keys left after they all went idle", n)
			}
			if live := len(bx.st) - len(bx.spare); live != 0 {
				t.Fatalf("%d boxes still held after every key was dropped", live)
			}
		})
	}
}

func mustMarshalState(t *testing.T, st *algo.State) []byte {
	t.Helper()
	b, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
