package membership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/transport"
)

// localClose is the error transport.Pool.Hello returns when this node closed
// the connection under the call (a Drop of the address meanwhile).
func localClose(addr string) error {
	return fmt.Errorf("%w: %w: hello to %s: rpc error: code = Canceled desc = grpc: the client connection is closing",
		transport.ErrUnavailable, transport.ErrLocalClose, addr)
}

// refusedConn is the error of a Hello to an address nothing listens on.
func refusedConn(addr string) error {
	return fmt.Errorf("%w: hello to %s: connection refused", transport.ErrUnavailable, addr)
}

// The probe of a doubted member judges the member, not this node's own
// connection to it: a probe whose connection this node closed under it (the
// ring rebuild's dropGonePeers, or another handshake's redial, dropped the
// pooled connection) is sent again at once on a new one, and only what the
// peer does decides. A member that answers the new attempt stays, with no
// ring change, whether gossip said it left or claimed its name elsewhere; a
// member that really fails, at the first attempt or the next, is dropped as
// before, with no extra attempt for a failure the peer caused; and a
// connection closed under every attempt does not keep a member past its
// probe's bound (helloAttempts Hellos, then the failure counts).
func TestProbeRetriesLocalClose(t *testing.T) {
	t.Parallel()
	const addr, claimAddr = "10.0.0.1:7947", "10.0.0.9:7947"
	for _, tc := range []struct {
		name  string
		claim bool           // gossip claims the name at claimAddr, else says it left
		fail  func() []error // the probe's Hellos that fail, in order
		gone  bool           // the member no longer answers at all
		want  string         // "stays" or "dropped"
		calls int            // Hellos the probe sends
	}{
		{name: "left, local close, then answers", fail: func() []error { return []error{localClose(addr)} }, want: "stays", calls: 2},
		{name: "claimed, local close, then answers", claim: true, fail: func() []error { return []error{localClose(addr)} }, want: "stays", calls: 2},
		{name: "left, local close twice, then answers", fail: func() []error { return []error{localClose(addr), localClose(addr)} }, want: "stays", calls: 3},
		{name: "left, refuses the connection", fail: func() []error { return []error{refusedConn(addr)} }, want: "dropped", calls: 1},
		{name: "left, times out", fail: func() []error {
			return []error{fmt.Errorf("%w: hello to %s: rpc error: code = DeadlineExceeded desc = context deadline exceeded", transport.ErrUnavailable, addr)}
		}, want: "dropped", calls: 1},
		{name: "left, refuses the Hello", fail: func() []error {
			return []error{fmt.Errorf("%w: hello to %s: member %q is leaving", transport.ErrRefused, addr, "a")}
		}, want: "dropped", calls: 1},
		{name: "left, local close, then gone", fail: func() []error { return []error{localClose(addr)} }, gone: true, want: "dropped", calls: 2},
		{name: "claimed, local close, then gone", claim: true, fail: func() []error { return []error{localClose(addr)} }, gone: true, want: "dropped", calls: 2},
		{name: "left, local close at every attempt", fail: func() []error {
			return []error{localClose(addr), localClose(addr), localClose(addr), localClose(addr)}
		}, want: "dropped", calls: helloAttempts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb, f, wg := newTestTable(t, true)
			d := admitA(t, tb, f, wg, addr)
			before := f.called(addr)

			if tc.claim {
				d.NotifyUpdate(gossipNode("a", claimAddr, "forged"))
			} else {
				d.NotifyLeave(gossipNode("a", addr, "i1"))
			}
			tb.mu.Lock()
			doubted := tb.admit["a"] != nil && tb.admit["a"].doubt != nil
			tb.mu.Unlock()
			if !doubted {
				t.Fatal("gossip contradicts the admitted member, but it is not doubted")
			}
			f.failNext(addr, tc.fail()...)
			if tc.gone {
				// The errors above come first; after them it does not answer.
				f.set(addr, nil)
			}
			tb.probeDoubted()
			wg.Wait()

			if got := f.called(addr) - before; got != tc.calls {
				t.Errorf("the probe sent %d Hellos to %s, want %d", got, addr, tc.calls)
			}
			ring, _ := tb.RingMembers(false)
			inRing := false
			for _, m := range ring {
				if m.Name == "a" {
					inRing = true
					if m.Addr != addr || m.ID != "i1" {
						t.Errorf("ring holds a at %s (instance %s), want its admitted %s (i1)", m.Addr, m.ID, addr)
					}
				}
			}
			switch tc.want {
			case "stays":
				if !inRing {
					t.Fatalf("it answers its probe on a new connection, but it left the ring (members %v)", ring)
				}
				tb.mu.Lock()
				a := tb.admit["a"]
				ok := a != nil && a.state == StateAlive && a.doubt != nil && a.doubt.passed == 1 && !a.probing
				tb.mu.Unlock()
				if !ok {
					t.Fatalf("admission after the probe: %+v, want alive, one probe passed, still doubted (gossip disagrees)", a)
				}
			case "dropped":
				if inRing {
					t.Fatalf("its probe failed, but it is still in the ring (members %v)", ring)
				}
				if tc.claim {
					// The claim was tried in its place, at its own address.
					if f.called(claimAddr) != 1 {
						t.Errorf("the claim at %s got %d Hellos, want 1", claimAddr, f.called(claimAddr))
					}
				}
			}
		})
	}
}

// A Hello's retry after a local close runs within the same Timeout as the
// first attempt (one deadline for both), so the probe's bound is unchanged:
// a peer that does not answer the new attempt fails the probe with its own
// error, not the local close.
func TestSayHelloRetryKeepsDeadline(t *testing.T) {
	t.Parallel()
	tb, _, _ := newTestTable(t, true)
	var deadlines []time.Time
	tb.cfg.Hello = func(ctx context.Context, addr string) (transport.Hello, string, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			t.Error("a Hello without a deadline")
		}
		deadlines = append(deadlines, dl)
		if len(deadlines) == 1 {
			return transport.Hello{}, "", localClose(addr)
		}
		return transport.Hello{}, "", fmt.Errorf("%w: hello to %s: %w", transport.ErrUnavailable, addr, context.DeadlineExceeded)
	}
	start := time.Now()
	_, _, err := tb.sayHello("10.0.0.1:7947")
	end := time.Now()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, transport.ErrLocalClose) {
		t.Fatalf("error %v, want the peer's timeout, not the local close", err)
	}
	if len(deadlines) != 2 {
		t.Fatalf("%d Hellos, want 2 (one retry after the local close)", len(deadlines))
	}
	if !deadlines[1].Equal(deadlines[0]) {
		t.Fatalf("the retry's deadline %v is not the first attempt's %v: the retry extends the probe", deadlines[1], deadlines[0])
	}
	if lo, hi := start.Add(tb.cfg.Timeout), end.Add(tb.cfg.Timeout); deadlines[0].Before(lo) || deadlines[0].After(hi) {
		t.Fatalf("deadline %v, want one Timeout (%v) after the call began, within [%v, %v]", deadlines[0], tb.cfg.Timeout, lo, hi)
	}
}

// A member's own marker saying it is leaving (Table.Leaving) makes this node
// probe it at once, before gossip says anything: a member that is leaving
// fails the probe and leaves the ring, with a ring change signalled; one
// that answers stays, and its doubt ends (gossip never contradicted it). A
// member not admitted yet and this node itself are not probed.
func TestLeavingMarkerProbesAtOnce(t *testing.T) {
	t.Parallel()
	const addr = "10.0.0.1:7947"
	for _, tc := range []struct {
		name    string
		secure  bool
		leaving bool // the member refuses the Hello: it is leaving
	}{
		{"secure, leaving", true, true},
		{"secure, answers", true, false},
		{"insecure, leaving", false, true},
		{"insecure, answers", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb, f, wg := newTestTable(t, tc.secure)
			admitA(t, tb, f, wg, addr)
			// Drain the signals of the admission: what follows must signal anew.
			select {
			case <-tb.sig:
			default:
			}
			before := f.called(addr)
			if tc.leaving {
				f.failNext(addr, fmt.Errorf("%w: hello to %s: member %q is leaving", transport.ErrRefused, addr, "a"))
			}
			// The membership loop, with ProbeInterval an hour: only Leaving
			// can make it probe. A ring change rebuilds 1 ms after it.
			stop := make(chan struct{})
			rebuilt := make(chan struct{}, 1)
			var loop sync.WaitGroup
			loop.Go(func() {
				tb.Run(stop, time.Millisecond, func() bool { return false }, func() {
					select {
					case rebuilt <- struct{}{}:
					default:
					}
				})
			})
			defer func() { close(stop); loop.Wait() }()
			tb.Leaving("a")
			deadline := time.Now().Add(10 * time.Second)
			for !probed(tb, "a") {
				if time.Now().After(deadline) {
					t.Fatalf("Leaving: %d Hellos within 10 s, want a probe at once", f.called(addr)-before)
				}
				time.Sleep(time.Millisecond) // poll, bounded by deadline
			}
			if got := f.called(addr) - before; got != 1 {
				t.Fatalf("Leaving sent %d Hellos, want 1", got)
			}
			ring, _ := tb.RingMembers(false)
			inRing := len(ring) == 1 && ring[0].Name == "a"
			tb.mu.Lock()
			a := tb.admit["a"]
			doubted := a != nil && a.doubt != nil
			tb.mu.Unlock()
			if tc.leaving {
				if inRing {
					t.Fatalf("it is leaving and failed its probe, but it is in the ring (members %v)", ring)
				}
				select {
				case <-rebuilt:
				case <-time.After(10 * time.Second):
					t.Fatal("dropped, but the ring was not rebuilt within 10 s")
				}
				if !tb.MayCall("a") {
					t.Fatal("MayCall right after it left: false, want true (its handoff may still arrive)")
				}
			} else if !inRing || doubted {
				t.Fatalf("it answers its probe: in the ring %v, still doubted %v; want in the ring, not doubted", inRing, doubted)
			}
		})
	}

	t.Run("not admitted, or this node", func(t *testing.T) {
		t.Parallel()
		tb, _, _ := newTestTable(t, true)
		d := Delegate{T: tb}
		d.NotifyJoin(gossipNode("b", "10.0.0.2:7947", "i2")) // joining: no Hello yet
		tb.Leaving("b")
		tb.Leaving("me")
		tb.Leaving("nobody")
		tb.mu.Lock()
		doubted := tb.admit["b"] == nil || tb.admit["b"].doubt != nil
		tb.mu.Unlock()
		if doubted || len(tb.probeNow) != 0 {
			t.Fatalf("a member not admitted: doubted %v, probe asked %v; want neither", doubted, len(tb.probeNow) != 0)
		}
	})
}

// probed reports whether the probe of name has ended: no probe running, and
// the member dropped or its doubt settled.
func probed(tb *Table, name string) bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	a := tb.admit[name]
	return a == nil || (!a.probing && (a.doubt == nil || !a.doubt.last.IsZero()))
}

// admitA has gossip report member "a" (instance i1) at peer address addr,
// which answers its Hello, admits it, and returns the delegate gossip's
// reports come through.
func admitA(t *testing.T, tb *Table, f *fakePeers, wg *sync.WaitGroup, addr string) Delegate {
	t.Helper()
	d := Delegate{T: tb}
	hello := transport.Hello{ClusterLabel: "c", Member: "a", ProtocolVersion: transport.ProtocolVersion, InstanceID: "i1"}
	f.set(addr, &hello)
	d.NotifyJoin(gossipNode("a", addr, "i1"))
	tb.AdmitNow()
	wg.Wait()
	if s, _ := stateOf(tb, "a"); s != StateAlive {
		t.Fatalf("after its Hello: state %q, want %q", s, StateAlive)
	}
	return d
}
