package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/transport"
)

// lessee is a table whose renewals go to a fake owner: owner "b" at
// "addr-b" unless noOwner, answering answer (or err) and recording what it
// was sent.
type lessee struct {
	*Table
	mu      sync.Mutex
	sent    []transport.Check
	addrs   []string
	answer  transport.Result
	err     error
	noOwner bool
	clk     int64
}

func newLessee(period time.Duration) *lessee {
	ls := &lessee{clk: t0}
	ls.Table = New(Config{Size: 8, Threshold: 100, Period: period, Timeout: time.Second,
		Clock: func() int64 { return ls.clk },
		Owner: func(uint64) (string, string, bool) { return "b", "addr-b", !ls.noOwner },
		Forward: func(_ context.Context, addr string, c transport.Check) (transport.Result, error) {
			ls.mu.Lock()
			defer ls.mu.Unlock()
			ls.sent, ls.addrs = append(ls.sent, c), append(ls.addrs, addr)
			return ls.answer, ls.err
		}})
	return ls
}

// settle waits until no lease request is in flight.
func (ls *lessee) settle(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ls.InFlight() > 0; {
		if time.Now().After(deadline) {
			t.Fatal("a lease request is still in flight after 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// asking checks the fresh key h under l at 1,000 checks/s until the table
// asks for a lease, by now at the latest, and returns the ask: one
// request in flight.
func asking(t *testing.T, tb *Table, h uint64, l algo.Limit, now int64) (int64, uint64) {
	t.Helper()
	var a Answer
	for i := range 41 {
		if _, ask, epoch := tb.Decide(h, l, 1, now-40*ms+int64(i)*ms, &a); ask > 0 {
			return ask, epoch
		}
	}
	t.Fatal("no ask at 1,000 checks/s")
	return 0, 0
}

var window = algo.Limit{Kind: algo.FixedWindow, Limit: 1000, Period: time.Hour}

// A check that finds its key's leases used up while a renewal is in flight
// waits for it and is decided from the renewal's grant.
func TestAwaitWaitsForTheRenewal(t *testing.T) {
	ls := newLessee(time.Second)
	_, epoch := asking(t, ls.Table, 5, window, t0)
	go func() {
		time.Sleep(20 * time.Millisecond)
		ls.Install(5, window, epoch, t0, Grant{Hits: 10, For: time.Second, Owner: "b"})
	}()
	var a Answer
	start := time.Now()
	ok, ask, e := ls.Decide(5, window, 1, t0, &a)
	if ok || ask != 0 {
		t.Fatalf("Decide during the renewal: ok %v ask %d, want neither", ok, ask)
	}
	ok, ask, _ = ls.Await(5, window, 1, e, &a)
	if !ok || ask != 0 || a.Remaining != 9 || a.Owner != "b" {
		t.Fatalf("got ok %v ask %d %+v, want admitted from the renewal's 10 hits", ok, ask, a)
	}
	if waited := time.Since(start); waited < 15*time.Millisecond {
		t.Errorf("returned after %v, before the renewal was answered", waited)
	}
}

// Without a renewal in flight, a check no lease admits is not held up.
func TestAwaitWithoutRenewalDoesNotWait(t *testing.T) {
	ls := newLessee(10 * time.Second)
	var a Answer
	start := time.Now()
	_, _, epoch := ls.Decide(5, window, 1, t0, &a)
	if ok, ask, e := ls.Await(5, window, 1, epoch, &a); ok || ask != 0 || e != epoch {
		t.Fatalf("got ok %v ask %d epoch %d, want false, 0, %d", ok, ask, e, epoch)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("waited %v", waited)
	}
}

// A renewal is a peek of the key that carries the ask, names the lease it
// renews only to the owner that lent it, and installs the owner's grant.
func TestRenew(t *testing.T) {
	ls := newLessee(time.Second)
	ask, epoch := asking(t, ls.Table, 5, window, t0)
	ls.answer = transport.Result{Code: transport.CodeOK, LeaseHits: 20, LeaseFor: time.Second, LeaseID: 8}
	w := transport.Check{Key: "k", Limit: window, Hits: 3}
	ls.Renew(5, w, ask, epoch, t0, &Answer{Owner: "b", RenewID: 4, RenewLeft: 2})
	ls.settle(t)
	ls.mu.Lock()
	got, addr := ls.sent[0], ls.addrs[0]
	ls.mu.Unlock()
	if addr != "addr-b" || got.Key != "k" || got.Hits != 0 || got.LeaseHits != ask || got.LeaseID != 4 || got.LeaseLeft != 2 {
		t.Fatalf("sent %+v to %s, want a peek of k asking for %d and naming lease 4 (2 left) to addr-b", got, addr, ask)
	}
	var a Answer
	if ok, _, _ := ls.Decide(5, window, 1, t0+ms, &a); !ok || a.Remaining != 19 {
		t.Fatalf("after the renewal: ok %v %+v, want admitted from its 20 hits", ok, a)
	}

	// A lease of another owner is not named.
	ls2 := newLessee(time.Second)
	ask, epoch = asking(t, ls2.Table, 5, window, t0)
	ls2.Renew(5, w, ask, epoch, t0, &Answer{Owner: "c", RenewID: 4, RenewLeft: 2})
	ls2.settle(t)
	ls2.mu.Lock()
	defer ls2.mu.Unlock()
	if s := ls2.sent[0]; s.LeaseID != 0 || s.LeaseLeft != 0 {
		t.Errorf("named lease %d (%d left) of owner c to owner b", s.LeaseID, s.LeaseLeft)
	}
}

// Without an owner to ask, a renewal ends at once and sends nothing.
func TestRenewWithoutOwner(t *testing.T) {
	ls := newLessee(time.Second)
	ls.noOwner = true
	ask, epoch := asking(t, ls.Table, 5, window, t0)
	ls.Renew(5, transport.Check{Limit: window}, ask, epoch, t0, &Answer{})
	if ls.InFlight() != 0 || len(ls.sent) != 0 {
		t.Fatalf("in flight %d, sent %d, want the request ended, nothing sent", ls.InFlight(), len(ls.sent))
	}
}

// Result installs a grant only from an OK answer; a renewed lease's rest
// joins the new one.
func TestResult(t *testing.T) {
	ls := newLessee(time.Second)
	_, epoch := asking(t, ls.Table, 5, window, t0)
	ls.Result(5, window, epoch, t0, 0, &transport.Result{Code: transport.CodeOK, LeaseHits: 50, LeaseFor: time.Second}, errors.New("down"), "b")
	_, epoch = asking(t, ls.Table, 7, window, t0)
	ls.Result(7, window, epoch, t0, 0, &transport.Result{Code: transport.CodeUnavailable, LeaseHits: 50, LeaseFor: time.Second}, nil, "b")
	var a Answer
	if ls.Use(5, window, 1, t0, &a) || ls.Use(7, window, 1, t0, &a) || ls.InFlight() != 0 {
		t.Fatalf("admitted after failed answers (in flight %d), want nothing installed and the requests ended", ls.InFlight())
	}

	now := t0 + time.Hour.Nanoseconds()
	_, epoch = asking(t, ls.Table, 6, window, now)
	ls.Result(6, window, epoch, now, 0, &transport.Result{Code: transport.CodeOK, LeaseHits: 10, LeaseFor: time.Second, LeaseID: 1}, nil, "b")
	ok, ask, epoch := ls.Decide(6, window, 6, now+ms, &a)
	if !ok || ask <= 0 || a.RenewID != 1 || a.RenewLeft != 4 {
		t.Fatalf("6 of 10 used: ok %v ask %d %+v, want admitted, a renewal of lease 1 with 4 left", ok, ask, a)
	}
	ls.Result(6, window, epoch, now+ms, a.RenewID, &transport.Result{Code: transport.CodeOK, LeaseHits: 5, LeaseFor: time.Second, LeaseID: 2, LeaseRenewed: true}, nil, "b")
	// After the renewed lease's end, before the new one's: the 4 carried
	// hits live as long as the new lease.
	later := now + time.Second.Nanoseconds() + ms/2
	if !ls.Use(6, window, 9, later, &a) || a.Remaining != 0 {
		t.Fatalf("after the renewal: %+v, want its 5 plus the 4 carried usable until its end", a)
	}
	if ls.Use(6, window, 1, later, &a) {
		t.Error("the renewed lease's hits counted twice")
	}
}

// Fill writes a lease's admission; Stats of a nil table is zero.
func TestFillAndStats(t *testing.T) {
	d := algo.Decision{RetryAfter: time.Second}
	a := Answer{Remaining: 4, ResetAfter: time.Minute, Owner: "b"}
	a.Fill(&d, algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second, Burst: 4})
	if !d.Allowed || d.Limit != 5 || d.Remaining != 4 || d.ResetAfter != time.Minute || d.RetryAfter != time.Second {
		t.Errorf("Fill: %+v", d)
	}
	var nilTable *Table
	if x, y := nilTable.Stats(); x != 0 || y != 0 {
		t.Errorf("nil table: %d, %d", x, y)
	}
	ls := newLessee(time.Second)
	_, epoch := asking(t, ls.Table, 5, window, t0)
	ls.Install(5, window, epoch, t0, Grant{Hits: 3, For: time.Second, Owner: "b"})
	var b Answer
	ls.Decide(5, window, 1, t0, &b)
	if x, y := ls.Stats(); x != 1 || y != 1 {
		t.Errorf("Stats %d admitted, %d granted; want 1, 1", x, y)
	}
}
