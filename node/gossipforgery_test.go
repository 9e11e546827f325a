package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit/algo"
)

// The attacks of these tests are run by real memberlists built as an attacker
// would: the cluster's label and gossip key, no certificate.

// forger is a gossip speaker holding only the gossip key.
type forger struct {
	ml *memberlist.Memberlist
	tr *dropTransport // nil: memberlist's own transport
}

// attackerMeta is the gossip metadata an attacker advertises.
type attackerMeta []byte

func (m attackerMeta) NodeMeta(int) []byte                  { return m }
func (attackerMeta) NotifyMsg([]byte)                       {}
func (attackerMeta) GetBroadcasts(int, int) [][]byte        { return nil }
func (attackerMeta) LocalState(bool) []byte                 { return nil }
func (attackerMeta) MergeRemoteState(buf []byte, join bool) {}

// gossipWatch counts what gossip says of one member name: a passive
// memberlist member (its metadata is nothing a node decodes) whose events
// show that an attack reached the cluster's gossip, with or without the
// defence.
type gossipWatch struct {
	name          string
	leaves, moves atomic.Int64
	realGossip    string // the member's own gossip address
}

func (w *gossipWatch) NotifyJoin(m *memberlist.Node) { w.NotifyUpdate(m) }
func (w *gossipWatch) NotifyLeave(m *memberlist.Node) {
	if m.Name == w.name {
		w.leaves.Add(1)
	}
}
func (w *gossipWatch) NotifyUpdate(m *memberlist.Node) {
	if m.Name == w.name && m.Address() != w.realGossip {
		w.moves.Add(1)
	}
}

// dropTransport is memberlist's UDP/TCP transport that drops every packet
// to and from one address and every stream to it, as an attacker's network
// would. (Streams that address opens come from another port and are let
// through: they tell the attacker what the others' gossip tells it anyway.)
//
// memberlist sends to a member only through WriteToAddress and
// DialAddressTimeout, which *NetTransport has (it is a NodeAwareTransport),
// so those are what must drop: with only WriteTo and DialTimeout
// overridden, the attacker's probe of the victim failed over UDP (the ack
// was dropped) but its TCP fallback reached the victim and cleared it, and
// a death was forged only when that ping came back too late.
type dropTransport struct {
	*memberlist.NetTransport
	drop    string
	in      chan *memberlist.Packet
	done    chan struct{} // closed at Shutdown: packets are dropped
	drained chan struct{} // closed when the inner transport has stopped
}

func newDropTransport(drop string) (*dropTransport, error) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}})
	if err != nil {
		return nil, err
	}
	t := &dropTransport{NetTransport: nt, drop: drop, in: make(chan *memberlist.Packet),
		done: make(chan struct{}), drained: make(chan struct{})}
	go func() {
		for {
			select {
			case p := <-nt.PacketCh():
				if p.From.String() == t.drop {
					continue
				}
				select {
				case t.in <- p:
				case <-t.done:
				}
			case <-t.drained:
				return
			}
		}
	}()
	return t, nil
}

func (t *dropTransport) PacketCh() <-chan *memberlist.Packet { return t.in }

func (t *dropTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if addr == t.drop {
		return time.Now(), nil
	}
	return t.NetTransport.WriteTo(b, addr)
}

func (t *dropTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

func (t *dropTransport) DialAddressTimeout(a memberlist.Address, d time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, d)
}

func (t *dropTransport) DialTimeout(addr string, d time.Duration) (net.Conn, error) {
	if addr == t.drop {
		return nil, errors.New("dropped")
	}
	return t.NetTransport.DialTimeout(addr, d)
}

// Shutdown stops the inner transport, reading its packets until it has
// stopped (its listener blocks on an unread packet).
func (t *dropTransport) Shutdown() error {
	close(t.done)
	err := t.NetTransport.Shutdown()
	close(t.drained)
	return err
}

// startForger starts a memberlist named name with the cluster's label and
// gossip key (from base), advertising meta, with fast timings; mod adjusts
// its config. It joins seed.
func startForger(t *testing.T, base Config, name string, meta []byte, seed string, tr *dropTransport, mod func(*memberlist.Config)) *forger {
	t.Helper()
	mc := memberlist.DefaultLANConfig()
	mc.Name = name
	mc.BindAddr = "127.0.0.1"
	mc.BindPort = 0
	mc.Label = base.ClusterLabel
	mc.SecretKey = base.SecretKey
	g := FastGossip()
	mc.ProbeInterval, mc.ProbeTimeout, mc.GossipInterval = g.ProbeInterval, g.ProbeTimeout, g.GossipInterval
	mc.PushPullInterval, mc.DeadNodeReclaimTime = g.PushPullInterval, g.DeadNodeReclaimTime
	mc.Delegate = attackerMeta(meta)
	mc.LogOutput = io.Discard
	if tr != nil {
		mc.Transport = tr
	}
	if mod != nil {
		mod(mc)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		if tr != nil {
			tr.Shutdown()
		}
		t.Fatalf("attacker %s: %v", name, err)
	}
	f := &forger{ml: ml, tr: tr}
	t.Cleanup(func() { f.stop() })
	if _, err := ml.Join([]string{seed}); err != nil {
		t.Fatalf("attacker %s join: %v", name, err)
	}
	return f
}

// stop ends the attacker's memberlist without a leave (safe twice).
func (f *forger) stop() {
	_ = f.ml.Shutdown()
}

// leaver is attack (a): each forged leave starts a memberlist named as the
// victim, bumps its incarnation past the victim's own (each update is
// rejected by the others as a conflict of addresses, but counts) and leaves,
// which the others take for the victim's leave. The victim refutes with the
// forged incarnation + 1, so each leave bumps further than the last.
type leaver struct {
	base   Config
	victim string
	seed   string
	inc    int
}

func (lv *leaver) leave(t *testing.T) {
	t.Helper()
	lv.inc += 300
	f := startForger(t, lv.base, lv.victim, nil, lv.seed, nil, nil)
	for range lv.inc {
		_ = f.ml.UpdateNode(time.Nanosecond) // a timeout: it is not waited for
	}
	if err := f.ml.Leave(time.Second); err != nil {
		t.Logf("attacker leave: %v", err)
	}
	f.stop()
}

// within polls cond every 5 ms until it holds (true) or d passes (false).
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// The done-when test of the defence: an attacker holding only the gossip key
// forges the leave of a live member, forges its deaths, and claims its name
// and address, while 60 keys limited to 1 per hour are checked through every
// node again and again. No key is admitted twice, and the member never leaves
// any node's ring (no node rebuilds its ring at all).
//
// Not parallel: the forged deaths race the victim's refutations on timing,
// and false deaths from a loaded machine would blur what is measured.
func TestGossipForgeryCannotMoveMembers(t *testing.T) {
	lb := &logBuffer{}
	m := &secMetrics{}
	base, nodes, _ := secureCluster(t, 3, m, lb)
	victim := nodes[1]
	seed := nodes[0].GossipAddr()

	watch := &gossipWatch{name: victim.Name(), realGossip: victim.GossipAddr()}
	startForger(t, base, "watcher", nil, seed, nil, func(mc *memberlist.Config) { mc.Events = watch })

	l := algo.Limit{Kind: algo.GCRA, Burst: 0, Limit: 1, Period: time.Hour}
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = fmt.Sprintf("forgery-key-%d", i)
	}
	admitted := make([]atomic.Int64, len(keys))
	var rounds, ringMisses atomic.Int64
	var firstMiss atomic.Value
	var errMu sync.Mutex
	var checkErrs []error
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	checkAll := func() {
		for i, k := range keys {
			for _, n := range nodes {
				d, err := n.Allow(ctx, k, l)
				if err != nil {
					if ctx.Err() == nil {
						errMu.Lock()
						checkErrs = append(checkErrs, fmt.Errorf("%s via %s: %w", k, n.Name(), err))
						errMu.Unlock()
					}
					continue
				}
				if d.Allowed {
					admitted[i].Add(1)
				}
			}
		}
	}
	checkAll() // every key admitted once, here
	rebuilds := make([]uint64, len(nodes))
	for i, n := range nodes {
		rebuilds[i] = n.Stats().Rebuilds
	}
	wg.Add(2)
	go func() {
		// A round every 10 ms at most (18,000 checks/s): an unpaced loop
		// takes both cores from gossip, and the attacks below then depend
		// on how fast the machine is rather than on what the nodes do.
		defer wg.Done()
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for ctx.Err() == nil {
			checkAll()
			rounds.Add(1)
			select {
			case <-ctx.Done():
			case <-tk.C:
			}
		}
	}()
	go func() {
		defer wg.Done()
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			for _, n := range nodes {
				if snap := n.rs.Load().Snap; !snap.Has(victim.Name()) || snap.Len() != len(nodes) {
					if ringMisses.Add(1) == 1 {
						firstMiss.Store(fmt.Sprintf("%s's ring has %d members, without %s", n.Name(), snap.Len(), victim.Name()))
					}
				}
			}
		}
	}()
	stopLoad := func() {
		cancel()
		wg.Wait()
	}
	defer stopLoad()

	lv := &leaver{base: base, victim: victim.Name(), seed: seed}
	// (a) forged leaves.
	// A forged leave is one broadcast from a memberlist that stops a second
	// later; on a loaded machine it may not get out, so the attacker sends it
	// again, as a real one would, up to 5 times.
	for k := 1; k <= 3; k++ {
		before := watch.leaves.Load()
		reached := false
		for try := 0; try < 5 && !reached; try++ {
			lv.leave(t)
			reached = within(4*time.Second, func() bool { return watch.leaves.Load() > before })
		}
		if !reached {
			t.Errorf("forged leave %d did not reach gossip in 5 tries of 4 s", k)
		}
	}
	t.Logf("(a) 3 forged leaves: gossip told of %d leaves of %s", watch.leaves.Load(), victim.Name())

	// (b) forged deaths: attacker members that hear nothing from the victim
	// (dropTransport) declare it dead at the first probe they miss, again
	// and again: each refutation they hear of from the others is followed
	// by the next death. Should 5 s pass without a new death, the attacker
	// starts fresh ones under new names, as a real one would.
	before, t0 := watch.leaves.Load(), time.Now()
	var mallories []*forger
	startMallories := func(gen int) {
		for _, f := range mallories {
			f.stop()
		}
		mallories = mallories[:0]
		for i := range 3 {
			tr, err := newDropTransport(victim.GossipAddr())
			if err != nil {
				t.Fatal(err)
			}
			mallories = append(mallories, startForger(t, base, fmt.Sprintf("mallory-%d-%d", gen, i), nil, seed, tr, func(mc *memberlist.Config) {
				mc.ProbeInterval, mc.ProbeTimeout = 20*time.Millisecond, 10*time.Millisecond
				mc.GossipInterval = 5 * time.Millisecond
				mc.IndirectChecks = 0
				// No suspicion time: dead at the first missed probe, before the
				// victim can refute the suspicion.
				mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = 0, 1
			}))
		}
	}
	startMallories(0)
	gens := 1
	// Ten deaths (each one a doubt, a probe and a refutation on every node)
	// must reach gossip within 60 s (they take a few seconds).
	for deadline := time.Now().Add(60 * time.Second); watch.leaves.Load() < before+10 || time.Since(t0) <= 2*time.Second; {
		last := watch.leaves.Load()
		if !within(5*time.Second, func() bool { return watch.leaves.Load() > last }) && watch.leaves.Load() < before+10 {
			if time.Now().After(deadline) {
				t.Errorf("forged deaths: %d reached gossip within 60 s (%d generations of attackers), want 10", watch.leaves.Load()-before, gens)
				break
			}
			startMallories(gens)
			gens++
		}
	}
	for _, f := range mallories {
		f.stop()
	}
	t.Logf("(b) forged deaths: gossip told of %d deaths of %s in %v (%d generations of attackers)", watch.leaves.Load()-before, victim.Name(), time.Since(t0).Round(time.Millisecond), gens)

	// (c) name and address claims: a memberlist named as the victim at the
	// attacker's address takes the name the moment a forged leave lands
	// (memberlist gives a left member's name to the next claim at once),
	// first with a peer address of its own, then with the victim's peer
	// address and another instance id; the victim's refutation is then
	// rejected by gossip as a conflict for as long as the claim lives.
	claims := []struct{ what, meta string }{
		{"a peer address of its own", "v1|127.0.0.1:1|forged-instance"},
		{"the victim's peer address", "v1|" + victim.PeerAddr() + "|forged-instance"},
	}
	for _, c := range claims {
		movesBefore := watch.moves.Load()
		claim := startForger(t, base, victim.Name(), []byte(c.meta), seed, nil, nil)
		won := false
		for try := 0; try < 10 && !won; try++ {
			lv.leave(t)
			won = within(time.Second, func() bool {
				_ = claim.ml.UpdateNode(time.Nanosecond)
				return watch.moves.Load() > movesBefore
			})
		}
		if !won {
			t.Errorf("the claim with %s did not reach gossip after 10 forged leaves", c.what)
		}
		r := rounds.Load()
		within(10*time.Second, func() bool { return rounds.Load() >= r+3 })
		t.Logf("(c) %s claimed at %s with %s during %d rounds of checks", victim.Name(), claim.ml.LocalNode().Address(), c.what, rounds.Load()-r)
		claim.stop()
	}
	// Another name advertising the victim's peer address, with every pooled
	// connection to the victim dropped so that it is dialled again meanwhile.
	other := startForger(t, base, "node-x", []byte("v1|"+victim.PeerAddr()+"|x-instance"), seed, nil, nil)
	if !within(10*time.Second, func() bool {
		for _, n := range nodes {
			found := false
			for _, mb := range n.Members() {
				found = found || mb.Name == "node-x"
			}
			if !found {
				return false
			}
		}
		return true
	}) {
		t.Error("node-x did not reach every node's gossip within 10 s")
	}
	for _, n := range nodes {
		if n != victim {
			n.peers.Drop(victim.PeerAddr())
		}
	}
	r := rounds.Load()
	within(10*time.Second, func() bool { return rounds.Load() >= r+3 })
	other.stop()

	stopLoad()
	total := rounds.Load()
	over, lost := 0, 0
	for i, k := range keys {
		switch got := admitted[i].Load(); {
		case got > 1:
			if over++; over <= 3 {
				t.Errorf("%s admitted %d times, want once (1 per hour)", k, got)
			}
		case got == 0:
			lost++
		}
	}
	if over > 0 || lost > 0 {
		t.Errorf("%d of %d keys admitted more than once, %d never, want every key admitted exactly once", over, len(keys), lost)
	}
	if n := ringMisses.Load(); n > 0 {
		t.Errorf("%d samples of a ring without %s, want 0 (first: %v)", n, victim.Name(), firstMiss.Load())
	}
	for i, n := range nodes {
		if got := n.Stats().Rebuilds; got != rebuilds[i] {
			t.Errorf("%s rebuilt its ring %d times during the attacks, want 0", n.Name(), got-rebuilds[i])
		}
	}
	errMu.Lock()
	if len(checkErrs) > 0 {
		t.Errorf("%d checks failed, first: %v", len(checkErrs), checkErrs[0])
	}
	errMu.Unlock()
	if got := m.count("gossip"); got == 0 {
		t.Error(`PeerRefused("gossip") never counted, want a count for each overruled rumour`)
	}
	t.Logf("%d rounds of %d checks; gossip told of %d leaves or deaths and %d moves of %s; %d rumours overruled (all nodes)",
		total, len(keys)*len(nodes), watch.leaves.Load(), watch.moves.Load(), victim.Name(), m.count("gossip"))

	// Gossip heals once the attackers are gone: every node agrees again with
	// the victim's admitted identity.
	eventually(t, 30*time.Second, "gossip agrees with the victim again on every node", func() bool {
		for _, n := range nodes {
			for _, mb := range n.Members() {
				if mb.Name == victim.Name() && (mb.State != StateAlive || mb.Reason != "" || mb.Addr != victim.PeerAddr()) {
					return false
				}
			}
		}
		return true
	})
}

// A member that restarts at new addresses (a crash, then a new process under
// its name on other ports) is admitted at its new address, and a member that
// leaves gracefully leaves every ring promptly: the defence drops a member
// whose probe fails.
func TestGossipGuardRestartAndLeave(t *testing.T) {
	base, nodes, _ := secureCluster(t, 3, nil, nil)
	victim := nodes[2]
	oldAddr := victim.PeerAddr()
	victim.Abort()
	cfg := base
	cfg.Name = victim.Name()
	cfg.Join = []string{nodes[0].GossipAddr()}
	var restarted *Node
	eventually(t, 30*time.Second, "the crashed member restarts under its name", func() bool {
		n, err := New(cfg)
		if errors.Is(err, ErrDuplicateName) {
			return false // gossip has not seen the crash yet
		}
		if err != nil {
			t.Fatalf("restart: %v", err)
		}
		restarted = n
		return true
	})
	t.Cleanup(func() { restarted.Abort() })
	if restarted.PeerAddr() == oldAddr {
		t.Fatalf("restarted at its old peer address %s, want a new one", oldAddr)
	}
	live := []*Node{nodes[0], nodes[1], restarted}
	// The others' gossip takes the new address once it has declared the old
	// process dead (memberlist refuses a live name at another address); the
	// old identity's probe then fails and the new one is admitted.
	t0 := time.Now()
	eventually(t, 30*time.Second, "every member has the restarted member at its new address in its ring", func() bool {
		for _, n := range live {
			found := false
			for _, m := range n.rs.Load().Snap.Members() {
				found = found || m.Name == restarted.Name() && m.Addr == restarted.PeerAddr() && m.ID == restarted.id
			}
			if !found {
				return false
			}
		}
		return true
	})
	t.Logf("restart at a new address in every ring %v after New returned", time.Since(t0).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitConverged(ctx, live...); err != nil {
		t.Fatal(err)
	}
	for _, n := range live[:2] {
		for _, mb := range n.Members() {
			if mb.Name == restarted.Name() && (mb.Addr != restarted.PeerAddr() || mb.State != StateAlive) {
				t.Errorf("%s sees %s at %s (%s), want %s (alive)", n.Name(), mb.Name, mb.Addr, mb.State, restarted.PeerAddr())
			}
		}
	}

	// A graceful leave: out of every ring well before a crash would be
	// detected (suspicion alone is 0.8 s or more in FastGossip).
	t0 = time.Now()
	done := make(chan error, 1)
	go func() { done <- restarted.Close() }()
	eventually(t, 5*time.Second, "the leaving member is out of every ring", func() bool {
		for _, n := range live[:2] {
			if n.rs.Load().Snap.Has(restarted.Name()) {
				return false
			}
		}
		return true
	})
	took := time.Since(t0)
	if err := <-done; err != nil {
		t.Errorf("Close: %v", err)
	}
	if took > 2*time.Second {
		t.Errorf("the leave took %v to reach every ring, want at most 2 s", took)
	}
	t.Logf("graceful leave out of every ring after %v", took.Round(time.Millisecond))
}
