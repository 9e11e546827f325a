package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/node/internal/handoff"
	"github.com/ringlimit/ringlimit/ring"
)

// A handoff gate waits for its previous owner's marker. HandoffTimeout counts
// from the later of the ring's publication and the previous owner's first
// Hello to this instance: before that Hello the previous owner has not heard
// of this node, still decides the partition's keys itself and has handed
// nothing off, so deciding them here on an empty state would admit their
// hits twice. (When the gate expired HandoffTimeout after publication, a
// member joining a fleet under load decided on empty states while the last
// previous owners had not heard of it yet: keys over their limit in the join
// phase of TestFleetRollingRestart.) A Hello from another instance of the
// previous owner does not count; a marker opens the gate at once.
func TestHandoffGateCountsFromThePreviousOwnersHello(t *testing.T) {
	t.Parallel()
	const ht = 50 * time.Millisecond
	r, err := ring.New(DefaultConfig().Ring)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetMembers([]ring.Member{{Name: "self", Addr: "a:1", ID: "s1"}, {Name: "prev", Addr: "a:2", ID: "p2"}}); err != nil {
		t.Fatal(err)
	}
	mk := func() (*Node, *ringState, chan struct{}) {
		n := &Node{cfg: Config{HandoffTimeout: ht, ForwardTimeout: 10 * time.Second}, stop: make(chan struct{}),
			log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		g := make(chan struct{})
		return n, &ringState{Snap: r.Snapshot(), Pending: map[string]chan struct{}{"prev": g}, Deadline: time.Now().Add(ht)}, g
	}
	wait := func(n *Node, rs *ringState, g chan struct{}) chan time.Time {
		done := make(chan time.Time, 1)
		go func() {
			if err := n.waitHandoff(context.Background(), rs, 0, g); err != nil {
				t.Errorf("waitHandoff: %v", err)
			}
			done <- time.Now()
		}()
		return done
	}

	n, rs, g := mk()
	done := wait(n, rs, g)
	n.hellos.Note("prev", "p1") // its previous instance
	select {
	case <-done:
		t.Fatalf("gate given up without a Hello from the previous owner's instance, %v after publication (HandoffTimeout %v)", time.Since(rs.Deadline.Add(-ht)), ht)
	case <-time.After(6 * ht): // bounded: the assertion is that it is still waiting
	}
	heard := time.Now()
	n.hellos.Note("prev", "p2")
	select {
	case at := <-done:
		if d := at.Sub(heard); d < ht {
			t.Errorf("gate given up %v after the Hello, want >= HandoffTimeout %v", d, ht)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("gate still closed 5 s after the previous owner's Hello (HandoffTimeout %v)", ht)
	}

	n, rs, g = mk()
	n.cfg.HandoffTimeout = time.Hour
	rs.Deadline = time.Now().Add(time.Hour)
	done = wait(n, rs, g)
	close(g)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("an opened gate still waited 5 s later")
	}

	n, rs, g = mk()
	n.hellos.Note("prev", "p2") // heard long before the ring changed
	start := time.Now()
	done = wait(n, rs, g)
	select {
	case at := <-done:
		if d := at.Sub(start); d > 5*time.Second {
			t.Errorf("gate of a previous owner heard before the ring changed given up after %v, want about HandoffTimeout %v", d, ht)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("gate of a previous owner heard before the ring changed still closed after 5 s (HandoffTimeout %v)", ht)
	}
}

// A check waiting on a handoff gate follows the ring when it is replaced:
// members joining one after another publish one ring after another, and a
// partition gained in the first is not gained again in the next. It goes on
// waiting on the partition's gate carried into the new ring, decides at once
// when the new ring has none, and routes again (errNotOwner) when the new
// ring gives the partition to another member. (It used to wait on the first
// ring's gate, which no marker opens once its ring is gone, until
// HandoffTimeout: hundreds of checks held about 1 s when 10 of 20 members
// joined at once.)
func TestHandoffWaitFollowsTheRing(t *testing.T) {
	t.Parallel()
	r, err := ring.New(DefaultConfig().Ring)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetMembers([]ring.Member{{Name: "self", Addr: "a:1", ID: "s1"}, {Name: "prev", Addr: "a:2", ID: "p2"}}); err != nil {
		t.Fatal(err)
	}
	snap := r.Snapshot()
	var mine, theirs int = -1, -1
	for p := range snap.PartitionCount() {
		switch snap.PartitionOwner(p).Name {
		case "self":
			mine = p
		case "prev":
			theirs = p
		}
	}
	n := &Node{cfg: Config{Name: "self", HandoffTimeout: time.Hour, ForwardTimeout: time.Hour}, stop: make(chan struct{}),
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n.hellos.Note("prev", "p2")
	gated := func(p int, g chan struct{}) *ringState {
		rs := &ringState{Snap: snap, Pending: map[string]chan struct{}{"prev": g}, Deadline: time.Now().Add(time.Hour), Next: make(chan struct{})}
		if g != nil {
			rs.Gates = make([]chan struct{}, snap.PartitionCount())
			rs.Gates[p] = g
		}
		return rs
	}
	wait := func(p int, deadline time.Duration) (*ringState, chan struct{}, chan error) {
		g := make(chan struct{})
		rs := gated(p, g)
		rs.Deadline = time.Now().Add(deadline)
		n.rs.Store(rs)
		done := make(chan error, 1)
		go func() { done <- n.waitHandoff(context.Background(), rs, p, g) }()
		return rs, g, done
	}
	replace := func(old, rs *ringState) {
		n.rs.Store(rs)
		close(old.Next)
	}

	// Carried: still waiting after the ring moved, done once the gate opens.
	rs, g, done := wait(mine, time.Hour)
	replace(rs, gated(mine, g))
	select {
	case err := <-done:
		t.Fatalf("the wait ended (%v) while the new ring's gate was still closed", err)
	case <-time.After(50 * time.Millisecond): // bounded: the assertion is that it is still waiting
	}
	close(g)
	if err := <-done; err != nil {
		t.Fatalf("carried gate opened: %v", err)
	}

	// Carried into a ring published later: still given up at the first
	// ring's deadline (the previous owner said hello long ago), not the
	// new ring's.
	n.cfg.HandoffTimeout = 50 * time.Millisecond // prev's Hello is older than that
	rs, g, done = wait(mine, 50*time.Millisecond)
	replace(rs, gated(mine, g)) // its Deadline is an hour away
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("carried gate given up: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a carried gate still waited 5 s past the first ring's deadline: each ring of a burst gave it HandoffTimeout again")
	}

	// Open in the new ring: decided at once.
	rs, _, done = wait(mine, time.Hour)
	replace(rs, gated(mine, nil))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("no gate in the new ring: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting 5 s after a ring without the gate was published")
	}

	// Another member's in the new ring: routed again.
	rs, _, done = wait(theirs, time.Hour)
	replace(rs, gated(theirs, nil))
	select {
	case err := <-done:
		if !errors.Is(err, errNotOwner) {
			t.Fatalf("the partition is another member's in the new ring: %v, want errNotOwner", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting 5 s after a ring giving the partition away was published")
	}
}

// Ready does not wait for the gate on every member's marker (a member left:
// every member sees it for a moment at each leave of a rolling restart), and
// still waits for a gate on a previous owner's handoff.
func TestReadyIgnoresTheWaitForEveryone(t *testing.T) {
	t.Parallel()
	n := &Node{}
	n.ready.Store(true)
	closed := func(name string) *ringState {
		return &ringState{Pending: map[string]chan struct{}{name: make(chan struct{})}, Deadline: time.Now().Add(time.Hour)}
	}
	n.rs.Store(closed(handoff.Everyone))
	if !n.Ready() {
		t.Fatal("not ready while only the wait for every member's marker is closed")
	}
	n.rs.Store(closed("prev"))
	if n.Ready() {
		t.Fatal("ready while a previous owner's handoff gate is closed")
	}
}
