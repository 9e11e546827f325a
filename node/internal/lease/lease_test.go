package lease

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

const (
	t0 = int64(1_700_000_000_000_000_000)
	ms = int64(time.Millisecond)
)

// hot makes the table see key h under l at 1,000 checks/s until it asks
// for a lease, by now at the latest, and returns what it asks for.
func hot(t *testing.T, tb *Table, h uint64, l algo.Limit, now int64) (int64, uint64) {
	t.Helper()
	// An ask left by an earlier check, answered long enough ago that the
	// quiet time after an ask that got nothing is over.
	tb.Answered(h, l, tb.epoch.Load(), now-41*ms-tb.period, 0, 0, "")
	var a Answer
	for i := range 41 {
		ok, ask, epoch := tb.Decide(h, l, 1, now-40*ms+int64(i)*ms, &a)
		if ok {
			t.Fatalf("admitted without a lease")
		}
		if ask > 0 {
			return ask, epoch
		}
	}
	t.Fatalf("no ask at 1,000 checks/s")
	return 0, 0
}

// admit reports whether a check at now is admitted from a lease; a check
// that asks for the next lease instead (forwarded) is followed by another.
func admit(tb *Table, h uint64, l algo.Limit, now int64, a *Answer) bool {
	ok, ask, _ := tb.Decide(h, l, 1, now, a)
	if !ok && ask > 0 {
		ok, _, _ = tb.Decide(h, l, 1, now, a)
	}
	return ok
}

// A member asks once it checks a key above the threshold, asks for its rate
// × Period, and admits from the grant until it is used.
func TestAskAndAdmit(t *testing.T) {
	t.Parallel()
	tb := New(Config{Size: 8, Threshold: 100, Period: 10 * time.Millisecond})
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 1000, Period: time.Hour}
	var a Answer
	if ok, ask, _ := tb.Decide(1, l, 1, t0, &a); ok || ask != 0 {
		t.Fatalf("first check: got ok %v ask %d, want forwarded without an ask", ok, ask)
	}
	now := t0 + 100*ms
	ask, epoch := hot(t, tb, 1, l, now)
	if ask < 5 || ask > 20 {
		t.Fatalf("ask %d, want about 1,000/s × 10 ms", ask)
	}
	if ok, ask2, _ := tb.Decide(1, l, 1, now, &a); ok || ask2 != 0 {
		t.Fatalf("while asking: got ok %v ask %d, want forwarded without a second ask", ok, ask2)
	}
	tb.Answered(1, l, epoch, now, 4, time.Minute, "o")
	for i := range 4 {
		ok := admit(tb, 1, l, now+1, &a)
		if !ok || a.Remaining != int64(3-i) || a.Owner != "o" {
			t.Fatalf("check %d: got ok %v %+v, want admitted with %d left", i, ok, a, 3-i)
		}
	}
	if admit(tb, 1, l, now+1, &a) {
		t.Fatalf("admitted past the grant")
	}
	// Another limit and another key are other entries.
	tb.Answered(1, l, tb.epoch.Load(), now, 4, time.Minute, "o")
	if ok, _, _ := tb.Decide(1, algo.Limit{Kind: algo.FixedWindow, Limit: 999, Period: time.Hour}, 1, now+1, &a); ok {
		t.Fatalf("admitted under another limit")
	}
}

// A grant ends after Period, or after leaseFor when earlier (a fixed
// window's end), and an invalidation drops it and keeps the answer of a
// forward in flight out.
func TestEndAndInvalidate(t *testing.T) {
	t.Parallel()
	tb := New(Config{Size: 8, Threshold: 1, Period: 50 * time.Millisecond})
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 1000, Period: time.Hour}
	var a Answer
	now := t0
	_, epoch := hot(t, tb, 7, l, now)
	tb.Answered(7, l, epoch, now, 100, 20*time.Millisecond, "o")
	if !admit(tb, 7, l, now+19*ms, &a) {
		t.Fatalf("not admitted before the window's end")
	}
	if ok, _, _ := tb.Decide(7, l, 1, now+20*ms, &a); ok {
		t.Fatalf("admitted at the window's end")
	}
	now += 100 * ms
	_, epoch = hot(t, tb, 7, l, now)
	tb.Answered(7, l, epoch, now, 100, time.Hour, "o")
	if ok, _, _ := tb.Decide(7, l, 1, now+50*ms, &a); ok {
		t.Fatalf("admitted after Period")
	}
	now += 100 * ms
	_, epoch = hot(t, tb, 7, l, now)
	tb.Answered(7, l, epoch, now, 100, time.Hour, "o")
	tb.Invalidate(7)
	if ok, _, _ := tb.Decide(7, l, 1, now+1, &a); ok {
		t.Fatalf("admitted after an invalidation")
	}
	_, epoch = hot(t, tb, 7, l, now+10*ms)
	tb.Invalidate(99) // any key's invalidation while the forward is out
	tb.Answered(7, l, epoch, now+10*ms, 100, time.Hour, "o")
	if ok, _, _ := tb.Decide(7, l, 1, now+11*ms, &a); ok {
		t.Fatalf("admitted from a grant answered across an invalidation")
	}
}

// ownerTake is the owner's check of hits of key 1 at now with its holds:
// the slices whose lease ended are recorded first, then the check is
// admitted only if the state could take its hits plus the held ones.
func ownerTake(owner *algo.State, holds *Holds, l algo.Limit, hits, now int64) algo.Decision {
	sh := holds.Lock(1)
	defer sh.Unlock()
	return ownerTakeLocked(owner, sh, l, hits, now)
}

func ownerTakeLocked(owner *algo.State, sh *Shard, l algo.Limit, hits, now int64) algo.Decision {
	sh.Record(1, l.Kind, now, func(n int64, l algo.Limit) bool {
		d, _ := owner.Take(now, n, l)
		return d.Allowed
	})
	if x := sh.Held(1, l.Kind); x > 0 {
		probe := owner.Clone()
		if d, _ := probe.Take(now, hits+x, l); !d.Allowed {
			return d
		}
	}
	d, _ := owner.Take(now, hits, l)
	return d
}

// grantTo is the owner's grant of n hits of key 1 to tb at now, usable for
// period: held, not taken.
func grantTo(owner *algo.State, holds *Holds, tb *Table, l algo.Limit, n, now int64, period time.Duration) bool {
	sh := holds.Lock(1)
	defer sh.Unlock()
	probe := owner.Clone()
	if d := ownerTakeLocked(&probe, sh, l, n, now); !d.Allowed {
		return false
	}
	sh.Add(1, l, n, now+int64(period))
	tb.Answered(1, l, tb.epoch.Load(), now, n, period, "o")
	return true
}

// A slice lent from a full GCRA or token-bucket key and kept unused for
// longer than the state takes to refill it: the owner holds it back until
// the lease ends, so the owner and the lessee together never exceed the
// capacity at one instant; after the end the slice is recorded in the state
// as admitted then. Had the owner taken it from the state at the grant, the
// state would have forgotten it, and the owner would admit a full key on top
// of the lessee's slice.
func TestHoldKeepsLentHitsCounted(t *testing.T) {
	t.Parallel()
	for _, l := range []algo.Limit{
		{Kind: algo.GCRA, Limit: 10, Period: time.Second, Burst: 9},
		{Kind: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 10},
	} {
		tb := New(Config{Size: 8, Threshold: 1, Period: time.Hour})
		var owner algo.State
		holds := &Holds{}
		now := t0
		hot(t, tb, 1, l, now)
		if !grantTo(&owner, holds, tb, l, 6, now, time.Hour) {
			t.Fatalf("%v: no grant", l.Kind)
		}
		later := now + 5000*ms // the state alone would be full again
		var ownerAdmits, lessee int64
		for ownerTake(&owner, holds, l, 1, later).Allowed {
			ownerAdmits++
		}
		var a Answer
		for admit(tb, 1, l, later, &a) {
			lessee++
		}
		if ownerAdmits != 4 || lessee != 6 {
			t.Errorf("%v: owner admitted %d and the lessee %d at one instant, want 4 and 6", l.Kind, ownerAdmits, lessee)
		}
		// After the lease's end the slice is recorded as admitted then.
		end := now + int64(time.Hour)
		if d := ownerTake(&owner, holds, l, 0, end+1); holds.Any() || d.Remaining != 4 {
			t.Errorf("%v: after the end: held %v, remaining %d; want the slice recorded and 4 left", l.Kind, holds.Any(), d.Remaining)
		}
		if d := ownerTake(&owner, holds, l, 0, end+1+int64(time.Second)); d.Remaining != 10 {
			t.Errorf("%v: a second later: remaining %d, want 10", l.Kind, d.Remaining)
		}
	}
}

// Random schedules of one owner (with its holds) and three lessees: over
// every interval between two admissions, the admissions of all of them
// together stay within the algorithm's bound, capacity + interval × rate.
func TestLeasesNeverExceedTheBound(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 9))
	for round := range 300 {
		l := algo.Limit{Kind: algo.GCRA, Limit: 1 + r.Int64N(50), Period: time.Second, Burst: r.Int64N(30)}
		capacity := l.Burst + 1
		if round%2 == 1 {
			l = algo.Limit{Kind: algo.TokenBucket, Limit: 1 + r.Int64N(50), Period: time.Second, Burst: 1 + r.Int64N(30)}
			capacity = l.Burst
		}
		var owner algo.State
		holds := &Holds{}
		period := time.Duration(1+r.Int64N(2000)) * time.Millisecond
		tables := []*Table{
			New(Config{Size: 4, Threshold: 1, Period: period}),
			New(Config{Size: 4, Threshold: 1, Period: period}),
			New(Config{Size: 4, Threshold: 1, Period: period}),
		}
		var admits []int64 // instants of admitted hits
		now := t0
		for range 400 {
			now += r.Int64N(200 * ms)
			who := r.IntN(4)
			burst := 1 + r.IntN(int(capacity))
			if who == 3 {
				for range burst {
					if !ownerTake(&owner, holds, l, 1, now).Allowed {
						break
					}
					admits = append(admits, now)
				}
				continue
			}
			tb := tables[who]
			var a Answer
			for range burst {
				if !admit(tb, 1, l, now, &a) {
					break
				}
				admits = append(admits, now)
				burst--
			}
			if burst == 0 {
				continue
			}
			// A forward: the check, then a grant of a random slice.
			if ownerTake(&owner, holds, l, 1, now).Allowed {
				admits = append(admits, now)
				grantTo(&owner, holds, tb, l, 1+r.Int64N(capacity), now, period)
			}
		}
		rate := float64(l.Limit) / float64(l.Period)
		if l.Kind == algo.GCRA {
			rate = 1 / float64(int64(l.Period)/l.Limit) // the emission interval is rounded down
		}
		for i := range admits {
			for j := i; j < len(admits); j++ {
				bound := float64(capacity) + float64(admits[j]-admits[i])*rate + 1e-9
				if float64(j-i+1) > bound {
					t.Fatalf("round %d (%+v): %d admissions in [%d, %d] ns, bound %.2f", round, l, j-i+1, admits[i]-t0, admits[j]-t0, bound)
				}
			}
		}
	}
}

// A check that leaves less than half of the slice is admitted and asks for
// the next lease (renewed in the background, the check does not wait); an
// ask that got nothing keeps the member from asking again for a quarter
// period (it admits from what it holds meanwhile), and Use admits from the
// slice whatever the ask policy.
func TestRenewAheadQuietAfterNothingAndUse(t *testing.T) {
	t.Parallel()
	tb := New(Config{Size: 8, Threshold: 1, Period: 100 * time.Millisecond})
	l := algo.Limit{Kind: algo.GCRA, Limit: 1000, Period: time.Second, Burst: 999}
	now := t0
	_, epoch := hot(t, tb, 5, l, now)
	tb.Answered(5, l, epoch, now, 4, time.Second, "o")
	var a Answer
	// A slice of 4: two checks are admitted; the third leaves less than
	// half of it, so it is admitted and asks for the next slice.
	for i := 0; i < 2; i++ {
		if !admit(tb, 5, l, now+1, &a) {
			t.Fatalf("check %d not admitted", i)
		}
	}
	ok, ask, epoch := tb.Decide(5, l, 1, now+2, &a)
	if !ok || ask == 0 || a.Remaining != 1 {
		t.Fatalf("got ok %v ask %d remaining %d with half the slice used, want admitted with an ask and 1 left", ok, ask, a.Remaining)
	}
	if ok, ask, _ := tb.Decide(5, l, 1, now+2, &a); !ok || ask != 0 {
		t.Fatalf("renewal in flight: got ok %v ask %d, want admitted without a second ask", ok, ask)
	}
	if tb.Use(5, l, 1, now+2, &a) {
		t.Fatalf("Use admitted from a used slice: %+v", a)
	}
	tb.Answered(5, l, epoch, now+2, 0, 0, "") // the owner had nothing to spare
	if ok, ask, _ := tb.Decide(5, l, 1, now+3, &a); ok || ask != 0 {
		t.Fatalf("slice used, still quiet: got ok %v ask %d, want forwarded without an ask", ok, ask)
	}
	if _, ask, _ := tb.Decide(5, l, 1, now+2+26*ms, &a); ask == 0 {
		t.Fatalf("after the quiet time: no ask")
	}
}

func TestCapacity(t *testing.T) {
	for _, c := range []struct {
		l    algo.Limit
		want int64
	}{
		{algo.Limit{Kind: algo.GCRA, Limit: 10, Burst: 4}, 5},
		{algo.Limit{Kind: algo.TokenBucket, Limit: 10, Burst: 4}, 4},
		{algo.Limit{Kind: algo.FixedWindow, Limit: 10}, 10},
	} {
		if got := Capacity(c.l); got != c.want {
			t.Fatalf("Capacity(%+v) = %d, want %d", c.l, got, c.want)
		}
	}
}

// A renewal merges the hits left of the lease it renewed into the new one,
// under the new id and end; a grant that renewed nothing takes a slot of
// its own.
func TestInstallRenewal(t *testing.T) {
	t.Parallel()
	tb := New(Config{Size: 8, Threshold: 1, Period: 100 * time.Millisecond})
	l := algo.Limit{Kind: algo.GCRA, Limit: 1000, Period: time.Second, Burst: 999}
	now := t0
	_, epoch := hot(t, tb, 5, l, now)
	tb.Install(5, l, epoch, now, Grant{Hits: 10, For: time.Second, ID: 41, Owner: "o"})
	var a Answer
	for i := 0; i < 5; i++ {
		if !admit(tb, 5, l, now+1, &a) {
			t.Fatalf("check %d not admitted", i)
		}
	}
	ok, ask, epoch := tb.Decide(5, l, 1, now+2, &a)
	if !ok || ask == 0 || a.RenewID != 41 || a.RenewLeft != 4 {
		t.Fatalf("got ok %v ask %d renew %d left %d, want a renewal of lease 41 with 4 left", ok, ask, a.RenewID, a.RenewLeft)
	}
	admit(tb, 5, l, now+3, &a) // in flight: 3 left of lease 41
	tb.Install(5, l, epoch, now+2, Grant{Hits: 5, For: time.Second, ID: 42, Renewed: 41, Owner: "o"})
	if !tb.Use(5, l, 8, now+90*ms, &a) || a.Remaining != 0 {
		t.Fatalf("after the renewal: %+v, want 3 + 5 hits until the new end", a)
	}
}

// A slice recorded (its lease ended) is no longer held: a renewal that
// names it afterwards finds nothing to record or carry.
func TestHoldsRecordedSliceNotFound(t *testing.T) {
	t.Parallel()
	var hs Holds
	l := algo.Limit{Kind: algo.GCRA, Limit: 1000, Period: time.Second, Burst: 999}
	sh := hs.Lock(3)
	id := sh.Add(3, l, 10, t0+100*ms)
	if n, ok := sh.Hits(3, l.Kind, id); !ok || n != 10 {
		t.Fatalf("Hits = %d, %v, want 10, true", n, ok)
	}
	sh.Record(3, l.Kind, t0+200*ms, func(int64, algo.Limit) bool { return true })
	if _, ok := sh.Hits(3, l.Kind, id); ok {
		t.Fatalf("a recorded slice is still held")
	}
	sh.Unlock()
	if hs.Any() {
		t.Fatalf("Any after the only slice was recorded")
	}
}

// While a request is in flight, Pending gives a channel that its answer
// closes (a check that found the leases used up waits on it); none before
// the ask or after the answer.
func TestPendingClosedByTheAnswer(t *testing.T) {
	t.Parallel()
	tb := New(Config{Size: 8, Threshold: 1, Period: 100 * time.Millisecond})
	l := algo.Limit{Kind: algo.GCRA, Limit: 1000, Period: time.Second, Burst: 999}
	if tb.Pending(5, l) != nil {
		t.Fatal("a pending request before any ask")
	}
	_, epoch := hot(t, tb, 5, l, t0)
	ch := tb.Pending(5, l)
	if ch == nil {
		t.Fatal("no pending request after an ask")
	}
	select {
	case <-ch:
		t.Fatal("closed before the answer")
	default:
	}
	tb.Install(5, l, epoch, t0, Grant{Hits: 10, For: time.Second, ID: 1, Owner: "o"})
	select {
	case <-ch:
	default:
		t.Fatal("not closed by the answer")
	}
	if tb.Pending(5, l) != nil {
		t.Fatal("still pending after the answer")
	}
}

// A member whose lease ran out asks for the next one even though its rate
// fell under the threshold (its checks were forwarded, slowly), for
// relapse periods after the lease ended; a member that never held one, or
// held one long ago, asks only from the threshold on.
func TestRelapseAsksUnderTheThreshold(t *testing.T) {
	t.Parallel()
	period := 100 * time.Millisecond
	tb := New(Config{Size: 8, Threshold: 100, Period: period})
	l := algo.Limit{Kind: algo.GCRA, Limit: 1000, Period: time.Second, Burst: 999}
	var a Answer
	// Never leased: 10 checks/s ask for nothing.
	for i := range 5 {
		if _, ask, _ := tb.Decide(3, l, 1, t0+int64(i)*100*ms, &a); ask != 0 {
			t.Fatalf("check %d at 10/s, never leased: ask %d, want none", i, ask)
		}
	}
	_, epoch := hot(t, tb, 5, l, t0)
	tb.Install(5, l, epoch, t0, Grant{Hits: 1, For: period, ID: 1, Owner: "o"})
	if ok, ask, epoch := tb.Decide(5, l, 1, t0+ms, &a); !ok || ask == 0 {
		t.Fatalf("the lease's one hit: ok %v ask %d, want admitted with a renewal", ok, ask)
	} else {
		tb.Answered(5, l, epoch, t0+ms, 0, 0, "") // nothing to spare
	}
	// The lease is used up and ends; checks come at 10/s.
	now := t0 + 200*ms
	for i := range 3 {
		now += 100 * ms
		_, ask, epoch := tb.Decide(5, l, 1, now, &a)
		if ask == 0 {
			t.Fatalf("check %d at 10/s after a lease: no ask", i)
		}
		tb.Answered(5, l, epoch, now, 0, 0, "")
		now += int64(period / 4) // past the quiet time
	}
	now += relapse * int64(period)
	for i := range 3 {
		now += 100 * ms
		if _, ask, _ := tb.Decide(5, l, 1, now, &a); ask != 0 {
			t.Fatalf("check %d at 10/s, %d periods after the lease: ask %d, want none", i, relapse, ask)
		}
	}
}
