package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

// bucket is a token bucket that refills too slowly to matter over a test
// (100 an hour): every count below is exact.
var bucket = algo.Limit{Kind: algo.TokenBucket, Limit: 100, Period: time.Hour, Burst: 100}

const ownerPeriod = 100 * time.Millisecond

// owner is an owner's Holds over a fresh store; *clk is its clock, and
// notOwned lists the ring hashes its sweeps find owned by another member.
type owner struct {
	*Holds
	clk      int64
	notOwned map[uint64]bool
	sent     []store.Moved // the states replicate was given
	failRepl bool
}

func newOwner(t *testing.T) *owner {
	t.Helper()
	o := &owner{clk: t0, notOwned: map[uint64]bool{}}
	o.Holds = &Holds{
		Store:    store.New(1000, func(k string) uint64 { return uint64(len(k)) }, nil),
		Clock:    func() int64 { return o.clk },
		Period:   ownerPeriod,
		MaxShare: 0.5,
		Owns: func(h uint64) func() bool {
			if o.notOwned[h] {
				return nil
			}
			return func() bool { return true }
		},
	}
	return o
}

func (o *owner) replicate(_ context.Context, m *store.Moved) error {
	if o.failRepl {
		return errors.New("backup unreachable")
	}
	o.sent = append(o.sent, *m)
	return nil
}

// check decides a check of hits of key h under l on the owner at its clock
// (the holds counted), as the node's owner-local path does.
func (o *owner) check(t *testing.T, h uint64, l algo.Limit, hits int64) algo.Decision {
	t.Helper()
	var d algo.Decision
	if err := o.TakeInto(&d, h, l, hits, o.clk, o.clk, nil); err != nil {
		t.Fatal(err)
	}
	return d
}

// state returns what key h's state alone could still admit (a peek of
// the store, without the holds).
func (o *owner) state(t *testing.T, h uint64, l algo.Limit) int64 {
	t.Helper()
	d, err := o.Store.Take(h, l, 0, o.clk, o.clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

func (o *owner) held(h uint64, k algo.Kind) int64 {
	sh := o.Lock(h)
	defer sh.Unlock()
	return sh.Held(h, k)
}

// grant decides a forwarded check of hits that asks for ask hits on the
// owner, in a ring of members, and returns its Result with the grant.
func (o *owner) grant(t *testing.T, h uint64, l algo.Limit, hits int64, c transport.Check, members int) transport.Result {
	t.Helper()
	c.Limit, c.Hits = l, hits
	r := transport.Result{Code: transport.CodeOK, Decision: o.check(t, h, l, hits)}
	o.Grant(context.Background(), &c, h, &r, members, nil, o.replicate)
	return r
}

// A grant lends min(ask, MaxShare × capacity / other members, what is
// left), replicates first, holds the slice back from the owner's own
// checks, and records it in the state when the lease has ended.
func TestGrantHoldsTheSlice(t *testing.T) {
	o := newOwner(t)
	r := o.grant(t, 7, bucket, 1, transport.Check{LeaseHits: 30}, 3)
	// 100 × 0.5 / 2 other members = 25.
	if r.LeaseHits != 25 || r.LeaseFor != ownerPeriod || r.LeaseID <= 0 || r.LeaseRenewed {
		t.Fatalf("grant %d hits for %v id %d renewed %v, want 25 for %v, a new id", r.LeaseHits, r.LeaseFor, r.LeaseID, r.LeaseRenewed, ownerPeriod)
	}
	if r.Decision.Remaining != 99-25 {
		t.Errorf("Remaining %d, want 74 (the slice is not left)", r.Decision.Remaining)
	}
	if len(o.sent) != 1 || o.sent[0].Limit != bucket {
		t.Fatalf("replicated %d states, want the key's one", len(o.sent))
	}
	if got := o.held(7, algo.TokenBucket); got != 25 {
		t.Fatalf("held %d, want 25", got)
	}
	if got := o.state(t, 7, bucket); got != 99 {
		t.Errorf("the state alone admits %d, want 99 (a slice is held, not taken)", got)
	}
	if d := o.check(t, 7, bucket, 75); d.Allowed {
		t.Errorf("the owner admitted 75 with 99 left and 25 lent")
	}
	if d := o.check(t, 7, bucket, 74); !d.Allowed || d.Remaining != 0 {
		t.Errorf("the owner's check of 74: %+v, want admitted, 0 left", d)
	}
	o.clk += int64(ownerPeriod) // the lease's last instant: still held
	if d := o.check(t, 7, bucket, 0); !o.Any() || d.Remaining != 0 {
		t.Fatalf("at the lease's end: held %v, remaining %d", o.Any(), d.Remaining)
	}
	o.clk++
	if d := o.check(t, 7, bucket, 1); d.Allowed {
		t.Errorf("admitted after the ended slice was recorded in a full state")
	}
	if o.Any() || o.state(t, 7, bucket) != 0 {
		t.Errorf("after the lease: held %v, state admits %d, want nothing held and the slice recorded (0 left)", o.Any(), o.state(t, 7, bucket))
	}
}

// A grant its backup does not take is not lent: nothing held, r untouched.
func TestGrantNotReplicatedLendsNothing(t *testing.T) {
	o := newOwner(t)
	o.failRepl = true
	r := o.grant(t, 7, bucket, 1, transport.Check{LeaseHits: 30}, 3)
	if r.LeaseHits != 0 || r.LeaseID != 0 || r.LeaseFor != 0 || r.Decision.Remaining != 99 {
		t.Fatalf("result %+v, want no lease and 99 left", r)
	}
	if o.Any() {
		t.Fatal("a slice is held after a grant that was not replicated")
	}
	if d := o.check(t, 7, bucket, 99); !d.Allowed {
		t.Errorf("the owner cannot admit the 99 left: %+v", d)
	}
}

// A renewal records the used part of the slice it names in the state,
// carries the hits its lessee still holds into the new lease, and tops
// them up to its ask (within the share).
func TestGrantRenewal(t *testing.T) {
	o := newOwner(t)
	first := o.grant(t, 7, bucket, 1, transport.Check{LeaseHits: 30}, 3)
	o.clk += 10 * ms
	// The lessee used 15 of its 25 and asks for 30 in all.
	r := o.grant(t, 7, bucket, 0, transport.Check{LeaseHits: 30, LeaseID: first.LeaseID, LeaseLeft: 10}, 3)
	// The share is 25: 10 carried, 15 new.
	if !r.LeaseRenewed || r.LeaseHits != 15 || r.LeaseID <= 0 || r.LeaseID == first.LeaseID {
		t.Fatalf("renewal: %d hits, id %d (was %d), renewed %v; want 15 new hits under a new id", r.LeaseHits, r.LeaseID, first.LeaseID, r.LeaseRenewed)
	}
	if got := o.state(t, 7, bucket); got != 99-15 {
		t.Errorf("the state admits %d, want 84 (the 15 used recorded)", got)
	}
	if got := o.held(7, algo.TokenBucket); got != 25 {
		t.Errorf("held %d, want 25 (10 carried + 15 new)", got)
	}
	sh := o.Lock(7)
	_, old := sh.Hits(7, algo.TokenBucket, uint64(first.LeaseID))
	sh.Unlock()
	if old {
		t.Error("the renewed slice is still held under its old id")
	}
	if d := o.check(t, 7, bucket, 60); d.Allowed {
		t.Error("the owner admitted 60 with 84 left and 25 lent")
	}
	if d := o.check(t, 7, bucket, 59); !d.Allowed {
		t.Error("the owner denied 59 with 84 left and 25 lent")
	}

	// A late renewal of a slice no longer held changes nothing.
	before := o.state(t, 7, bucket)
	r = o.grant(t, 7, bucket, 0, transport.Check{LeaseHits: 30, LeaseID: first.LeaseID, LeaseLeft: 0}, 3)
	if r.LeaseRenewed || o.state(t, 7, bucket) != before {
		t.Errorf("a renewal of a recorded slice: renewed %v, state %d (was %d)", r.LeaseRenewed, o.state(t, 7, bucket), before)
	}
}

// A fixed window's slice is taken from the window at the grant, after the
// backup took the state, and its lease ends with the window.
func TestGrantFixedWindow(t *testing.T) {
	o := newOwner(t)
	fw := algo.Limit{Kind: algo.FixedWindow, Limit: 100, Period: time.Second}
	r := o.grant(t, 3, fw, 1, transport.Check{LeaseHits: 30}, 2)
	if r.LeaseHits != 30 || r.LeaseID != 0 || r.LeaseFor <= 0 || r.LeaseFor > ownerPeriod {
		t.Fatalf("grant %d hits for %v id %d, want 30 for at most %v without an id", r.LeaseHits, r.LeaseFor, r.LeaseID, ownerPeriod)
	}
	if o.Any() {
		t.Error("a fixed window's slice is held")
	}
	if got := o.state(t, 3, fw); got != 69 {
		t.Errorf("the window admits %d, want 69 (the slice taken)", got)
	}
	o.failRepl = true
	if r := o.grant(t, 4, fw, 1, transport.Check{LeaseHits: 30}, 2); r.LeaseHits != 0 || o.state(t, 4, fw) != 99 {
		t.Errorf("unreplicated: lent %d, window admits %d, want 0 and 99", r.LeaseHits, o.state(t, 4, fw))
	}
}

// Checks that cannot be leased, and nil holds, get nothing and change
// nothing.
func TestGrantRefuses(t *testing.T) {
	sliding := algo.Limit{Kind: algo.SlidingWindowCounter, Limit: 100, Period: time.Second}
	for _, tc := range []struct {
		name string
		l    algo.Limit
		c    transport.Check
		r    func(*transport.Result)
	}{
		{"no ask", bucket, transport.Check{}, nil},
		{"penalty", bucket, transport.Check{LeaseHits: 30, Penalty: transport.Penalty{Denials: 3, Within: time.Second, Ban: time.Second}}, nil},
		{"created at", bucket, transport.Check{LeaseHits: 30, CreatedAt: t0}, nil},
		{"max wait", bucket, transport.Check{LeaseHits: 30, MaxWait: time.Second}, nil},
		{"cancel", bucket, transport.Check{LeaseHits: 30, CancelAt: t0}, nil},
		{"sliding window", sliding, transport.Check{LeaseHits: 30}, nil},
		{"denied", bucket, transport.Check{LeaseHits: 30}, func(r *transport.Result) { r.Decision.Allowed = false }},
		{"banned", bucket, transport.Check{LeaseHits: 30}, func(r *transport.Result) { r.Banned = true }},
		{"not ok", bucket, transport.Check{LeaseHits: 30}, func(r *transport.Result) { r.Code = transport.CodeUnavailable }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOwner(t)
			c := tc.c
			c.Limit, c.Hits = tc.l, 1
			r := transport.Result{Code: transport.CodeOK, Decision: o.check(t, 7, tc.l, 1)}
			if tc.r != nil {
				tc.r(&r)
			}
			want := r
			o.Grant(context.Background(), &c, 7, &r, 3, nil, o.replicate)
			if r != want || o.Any() || len(o.sent) != 0 {
				t.Errorf("got %+v, held %v, %d replicated; want nothing lent", r, o.Any(), len(o.sent))
			}
		})
	}
	var nilHolds *Holds
	c := transport.Check{Limit: bucket, Hits: 1, LeaseHits: 30}
	r := transport.Result{Code: transport.CodeOK, Decision: algo.Decision{Allowed: true, Remaining: 99}}
	nilHolds.Grant(context.Background(), &c, 7, &r, 3, nil, nil)
	nilHolds.Sweep(t0)
	nilHolds.HandOff(nil)
	nilHolds.Reset(7, algo.GCRA, true, true)
	if r.LeaseHits != 0 {
		t.Error("nil holds lent")
	}
}

// A sweep records the ended slices of keys the owner still owns, and
// forgets those of keys it no longer owns (their state moved on).
func TestSweep(t *testing.T) {
	o := newOwner(t)
	o.grant(t, 1, bucket, 1, transport.Check{LeaseHits: 30}, 3)
	o.grant(t, 2, bucket, 1, transport.Check{LeaseHits: 30}, 3)
	o.notOwned[2] = true
	o.Sweep(t0 + int64(ownerPeriod))
	if o.held(1, algo.TokenBucket) != 25 || o.held(2, algo.TokenBucket) != 25 {
		t.Fatal("a sweep at the leases' end took a slice")
	}
	o.Sweep(t0 + int64(ownerPeriod) + 1)
	if o.Any() {
		t.Fatal("slices held after a sweep past their end")
	}
	if got := o.state(t, 1, bucket); got != 99-25 {
		t.Errorf("owned key: the state admits %d, want 74 (the slice recorded)", got)
	}
	if got := o.state(t, 2, bucket); got != 99 {
		t.Errorf("key no longer owned: the state admits %d, want 99 (the slice forgotten)", got)
	}
}

// A handoff records, before their end, the slices of the keys the owner
// does not keep, and leaves the others held.
func TestHandOff(t *testing.T) {
	o := newOwner(t)
	o.grant(t, 1, bucket, 1, transport.Check{LeaseHits: 30}, 3)
	o.grant(t, 2, bucket, 1, transport.Check{LeaseHits: 30}, 3)
	o.clk += ms
	o.HandOff(func(h uint64) bool { return h == 1 })
	if o.held(1, algo.TokenBucket) != 25 || o.state(t, 1, bucket) != 99 {
		t.Errorf("kept key: held %d, state %d; want 25 held, 99", o.held(1, algo.TokenBucket), o.state(t, 1, bucket))
	}
	if o.held(2, algo.TokenBucket) != 0 || o.state(t, 2, bucket) != 74 {
		t.Errorf("handed-off key: held %d, state %d; want the slice recorded (0 held, 74)", o.held(2, algo.TokenBucket), o.state(t, 2, bucket))
	}
}

// A reset forgets a key's slices only when every member dropped its leases,
// and only under the reset's algorithm (or all).
func TestReset(t *testing.T) {
	o := newOwner(t)
	o.grant(t, 1, bucket, 1, transport.Check{LeaseHits: 30}, 3)
	o.Reset(1, algo.TokenBucket, false, false)
	o.Reset(1, algo.GCRA, false, true)
	if o.held(1, algo.TokenBucket) != 25 {
		t.Fatal("an incomplete reset, or one of another algorithm, dropped the slice")
	}
	o.Reset(1, algo.TokenBucket, false, true)
	if o.Any() {
		t.Fatal("a complete reset left the slice held")
	}
	o.grant(t, 1, bucket, 1, transport.Check{LeaseHits: 30}, 3)
	o.Reset(1, algo.GCRA, true, true)
	if o.Any() {
		t.Fatal("a complete reset of every algorithm left the slice held")
	}
}
