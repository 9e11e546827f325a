package membership

import (
	"context"
	"errors"
	"fmt"
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
			d := Delegate{T: tb}
			hello := transport.Hello{ClusterLabel: "c", Member: "a", ProtocolVersion: transport.ProtocolVersion, InstanceID: "i1"}
			f.set(addr, &hello)
			d.NotifyJoin(gossipNode("a", addr, "i1"))
			tb.AdmitNow()
			wg.Wait()
			if s, _ := stateOf(tb, "a"); s != StateAlive {
				t.Fatalf("after its Hello: state %q, want %q", s, StateAlive)
			}
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
