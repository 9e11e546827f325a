package membership

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit/transport"
)

// fakePeers answers Hellos for the members it holds, by peer address.
type fakePeers struct {
	mu    sync.Mutex
	alive map[string]transport.Hello // addr -> its answer
	// fail: addr -> the errors its next Hellos return, in order, before
	// alive answers again; calls: addr -> the Hellos sent to it.
	fail  map[string][]error
	calls map[string]int
}

func (f *fakePeers) hello(_ context.Context, addr string) (transport.Hello, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[addr]++
	if errs := f.fail[addr]; len(errs) > 0 {
		f.fail[addr] = errs[1:]
		return transport.Hello{}, "", errs[0]
	}
	h, ok := f.alive[addr]
	if !ok {
		return transport.Hello{}, "", errors.New("connection refused")
	}
	return h, h.Member, nil
}

// failNext makes the next Hellos to addr fail with errs, in order.
func (f *fakePeers) failNext(addr string, errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[addr] = append(f.fail[addr], errs...)
}

// called returns how many Hellos were sent to addr.
func (f *fakePeers) called(addr string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[addr]
}

func (f *fakePeers) set(addr string, h *transport.Hello) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h == nil {
		delete(f.alive, addr)
	} else {
		f.alive[addr] = *h
	}
}

func newTestTable(t *testing.T, secure bool) (*Table, *fakePeers, *sync.WaitGroup) {
	t.Helper()
	f := &fakePeers{alive: make(map[string]transport.Hello), fail: make(map[string][]error), calls: make(map[string]int)}
	wg := new(sync.WaitGroup)
	tb := NewTable(Config{
		Self:           transport.Hello{ClusterLabel: "c", Member: "me", ProtocolVersion: transport.ProtocolVersion, InstanceID: "i0"},
		Secure:         secure,
		AdmissionRetry: time.Hour, ProbeInterval: time.Hour, Timeout: time.Second, CloseTimeout: time.Minute,
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hello:   f.hello,
		Drop:    func(string) {},
		Revoked: func(string, string) bool { return false },
		Refused: func(string) {},
		WG:      wg,
	})
	return tb, f, wg
}

func gossipNode(name, peerAddr, id string) *memberlist.Node {
	return &memberlist.Node{Name: name, Addr: net.ParseIP("127.0.0.1"), Port: 7946, Meta: EncodeMeta(peerAddr, id)}
}

func stateOf(tb *Table, name string) (string, bool) {
	for _, m := range tb.List() {
		if m.Name == name {
			return m.State, true
		}
	}
	return "", false
}

// A member gossip reports is joining until its Hello passes, then in the
// ring; in secure mode gossip saying it left does not move it while it
// answers its probe, and it is dropped once the probe fails.
func TestTableAdmitsAndDoubts(t *testing.T) {
	t.Parallel()
	tb, f, wg := newTestTable(t, true)
	d := Delegate{T: tb}
	hello := transport.Hello{ClusterLabel: "c", Member: "a", ProtocolVersion: transport.ProtocolVersion, InstanceID: "i1"}
	f.set("10.0.0.1:7947", &hello)
	d.NotifyJoin(gossipNode("a", "10.0.0.1:7947", "i1"))
	if s, _ := stateOf(tb, "a"); s != StateJoining {
		t.Fatalf("before its Hello: state %q, want %q", s, StateJoining)
	}
	tb.AdmitNow()
	wg.Wait()
	if s, _ := stateOf(tb, "a"); s != StateAlive {
		t.Fatalf("after its Hello: state %q, want %q", s, StateAlive)
	}
	if got, _ := tb.RingMembers(false); len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("ring members %v, want [a]", got)
	}
	if name, ok := tb.MemberAt("10.0.0.1:7947"); !ok || name != "a" {
		t.Fatalf("MemberAt: %q, %v, want a, true", name, ok)
	}

	d.NotifyLeave(gossipNode("a", "10.0.0.1:7947", "i1"))
	tb.probeDoubted()
	wg.Wait()
	if s, ok := stateOf(tb, "a"); !ok || s != StateAlive {
		t.Fatalf("gossip says it left but it answers its probe: state %q (listed %v), want %q", s, ok, StateAlive)
	}

	f.set("10.0.0.1:7947", nil)
	tb.mu.Lock()
	tb.admit["a"].doubt.last = time.Time{} // probe again now
	tb.mu.Unlock()
	tb.probeDoubted()
	wg.Wait()
	if _, ok := stateOf(tb, "a"); ok {
		t.Fatalf("its probe failed: still listed, want dropped")
	}
	if !tb.MayCall("a") {
		t.Fatalf("MayCall right after it left: false, want true (its handoff may still arrive)")
	}
}

// In insecure mode gossip decides alone: a leave removes the member at once.
func TestTableInsecureLeaveRemoves(t *testing.T) {
	t.Parallel()
	tb, f, wg := newTestTable(t, false)
	d := Delegate{T: tb}
	f.set("10.0.0.1:7947", &transport.Hello{ClusterLabel: "c", Member: "a", ProtocolVersion: transport.ProtocolVersion, InstanceID: "i1"})
	d.NotifyJoin(gossipNode("a", "10.0.0.1:7947", "i1"))
	tb.AdmitNow()
	wg.Wait()
	d.NotifyLeave(gossipNode("a", "10.0.0.1:7947", "i1"))
	if _, ok := stateOf(tb, "a"); ok {
		t.Fatalf("insecure, gossip says it left: still listed, want removed")
	}
}

// A member whose Hello answers with another cluster label is refused and
// counted.
func TestTableRefusesWrongLabel(t *testing.T) {
	t.Parallel()
	tb, f, wg := newTestTable(t, true)
	f.set("10.0.0.2:7947", &transport.Hello{ClusterLabel: "other", Member: "b", ProtocolVersion: transport.ProtocolVersion, InstanceID: "i2"})
	Delegate{T: tb}.NotifyJoin(gossipNode("b", "10.0.0.2:7947", "i2"))
	tb.AdmitNow()
	wg.Wait()
	if s, _ := stateOf(tb, "b"); s != StateRefused {
		t.Fatalf("state %q, want %q", s, StateRefused)
	}
	if k := tb.RefusedCount(); k != 1 {
		t.Fatalf("RefusedCount %d, want 1", k)
	}
}

// Gossip.Config sets memberlist's LAN preset to the node's fields: one port
// bound and advertised, the timings, no compression, the Delegate's hooks.
func TestGossipConfig(t *testing.T) {
	t.Parallel()
	tb, _, _ := newTestTable(t, true)
	mc := Gossip{Name: "me", BindAddr: "0.0.0.0", AdvertiseAddr: "10.0.0.9", Port: 7946, Label: "c",
		Timings: Timings{ProbeInterval: 200 * time.Millisecond, SuspicionMult: 4}}.Config(Delegate{T: tb}, tb.cfg.Log)
	if mc.BindPort != 7946 || mc.AdvertisePort != 7946 || mc.AdvertiseAddr != "10.0.0.9" || mc.Label != "c" {
		t.Fatalf("addresses: bind %d, advertise %s:%d, label %q", mc.BindPort, mc.AdvertiseAddr, mc.AdvertisePort, mc.Label)
	}
	if mc.ProbeInterval != 200*time.Millisecond || mc.SuspicionMult != 4 || mc.EnableCompression {
		t.Fatalf("probe interval %v, suspicion mult %d, compression %v; want 200ms, 4, false", mc.ProbeInterval, mc.SuspicionMult, mc.EnableCompression)
	}
	if _, ok := mc.Events.(Delegate); !ok {
		t.Fatalf("events delegate %T, want Delegate", mc.Events)
	}
}
