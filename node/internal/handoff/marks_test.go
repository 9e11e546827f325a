package handoff

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

func snapOf(t *testing.T, names ...string) *ring.Snapshot {
	t.Helper()
	ms := make([]ring.Member, len(names))
	for i, n := range names {
		ms[i] = ring.Member{Name: n, Addr: n + ":1"}
	}
	s, err := ring.SnapshotOf(ring.DefaultConfig(), ms)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The partitions "c" gains when it joins a and b are gated on their previous
// owners, a marker closes its sender's gate, a marker that came first opens
// the partitions at once, and a marker for another ring is kept until that
// ring is published.
func TestMarksGateGainedPartitions(t *testing.T) {
	prev, cur := snapOf(t, "a", "b"), snapOf(t, "a", "b", "c")
	var m Marks
	var g Gated
	m.Publish(prev, cur, "c", time.Minute, Gated{}, func(x Gated) { g = x })
	gated := 0
	for p := range cur.PartitionCount() {
		gainedFrom := prev.PartitionOwner(p).Name
		mine := cur.PartitionOwner(p).Name == "c"
		if (g.Gates[p] != nil) != mine {
			t.Fatalf("partition %d: gated %v, owned by c %v", p, g.Gates[p] != nil, mine)
		}
		if mine {
			gated++
			if g.Gates[p] != g.Pending[gainedFrom] {
				t.Fatalf("partition %d waits on another gate than its previous owner %s's", p, gainedFrom)
			}
		}
	}
	if gated == 0 || len(g.Pending) != 2 {
		t.Fatalf("%d partitions gated on %d owners, want some on a and b", gated, len(g.Pending))
	}
	cur2 := func() (*ring.Snapshot, map[string]chan struct{}) { return cur, g.Pending }
	if !m.Done("a", cur.Digest(), nil, cur2) {
		t.Fatal("a's marker for the published ring did not open its gate")
	}
	if m.Done("a", cur.Digest(), nil, cur2) {
		t.Fatal("a gate opened twice")
	}
	select {
	case <-g.Pending["a"]:
	default:
		t.Fatal("a's gate still closed")
	}
	if _, kept := m.Kept("a"); kept {
		t.Fatal("a marker for the published ring was kept")
	}
	// b's marker comes for a ring not published yet: kept, then used.
	next := snapOf(t, "a", "b", "c", "d")
	if m.Done("b", next.Digest(), nil, cur2) {
		t.Fatal("a marker for another ring opened a gate")
	}
	if mk, kept := m.Kept("b"); !kept || mk.Digest != next.Digest() {
		t.Fatalf("marker for the next ring: %+v kept %v", mk, kept)
	}
	var g2 Gated
	m.Publish(cur, next, "d", time.Minute, Gated{}, func(x Gated) { g2 = x })
	if g2.Pending["b"] != nil {
		t.Fatal("d waits for b, whose marker for this ring came first")
	}
	if _, kept := m.Kept("b"); kept {
		t.Fatal("a used marker was kept")
	}
	var g3 Gated
	m.Publish(nil, next, "d", time.Minute, Gated{}, func(x Gated) { g3 = x })
	if g3.Gates != nil {
		t.Fatal("a nil previous ring gated partitions")
	}
}

// Members joining one after another: "c" gains partitions in its first ring
// and still owns some of them in the next, where it gains them from nobody.
// Their gates, still closed, stay closed on the same channel until the same
// member's marker for the new ring; a gate already open, or one on a member
// gone from the new ring, is not carried, nor is anything without carry.
func TestMarksCarryClosedGatesIntoTheNextRing(t *testing.T) {
	prev, cur, next := snapOf(t, "a", "b"), snapOf(t, "a", "b", "c"), snapOf(t, "a", "b", "c", "d")
	var m Marks
	var g Gated
	m.Publish(prev, cur, "c", time.Minute, Gated{}, func(x Gated) { g = x })
	// b's handoff for cur arrived: its gate is open and not carried.
	if !m.Done("b", cur.Digest(), nil, func() (*ring.Snapshot, map[string]chan struct{}) { return cur, g.Pending }) {
		t.Fatal("b's marker did not open its gate")
	}
	var g2 Gated
	m.Publish(cur, next, "c", time.Minute, g, func(x Gated) { g2 = x })
	carried, open := 0, 0
	for p := range next.PartitionCount() {
		stillMine := next.PartitionOwner(p).Name == "c"
		switch {
		case g.Gates[p] == nil || !stillMine:
			if g2.Gates != nil && g2.Gates[p] != nil {
				t.Fatalf("partition %d gated in the next ring: it was not gated before or is not c's", p)
			}
		case g.Gates[p] == g.Pending["a"]:
			if g2.Gates[p] != g.Gates[p] {
				t.Fatalf("partition %d: its closed gate on a was not carried on the same channel", p)
			}
			carried++
		default: // b's, open
			if g2.Gates != nil && g2.Gates[p] != nil {
				t.Fatalf("partition %d: b's open gate was carried", p)
			}
			open++
		}
	}
	if carried == 0 || open == 0 {
		t.Fatalf("carried %d gates on a, dropped %d open ones on b: want some of each", carried, open)
	}
	if !m.Done("a", next.Digest(), nil, func() (*ring.Snapshot, map[string]chan struct{}) { return next, g2.Pending }) {
		t.Fatal("a's marker for the next ring did not open the carried gate")
	}
	select {
	case <-g.Pending["a"]:
	default:
		t.Fatal("waiters on the first ring's gate were not released by the marker that opened the carried one")
	}
	var g3 Gated
	m.Publish(cur, next, "c", time.Minute, Gated{}, func(x Gated) { g3 = x })
	for p := range next.PartitionCount() {
		if g3.Gates != nil && g3.Gates[p] != nil && cur.PartitionOwner(p).Name == "c" {
			t.Fatalf("partition %d gated in the next ring without a carry", p)
		}
	}
	// A member gone from the new ring leaves no gate behind.
	without := snapOf(t, "b", "c", "d")
	var c2 Gated
	var m2 Marks
	m2.Publish(prev, cur, "c", time.Minute, Gated{}, func(x Gated) { c2 = x })
	var g4 Gated
	m2.Publish(cur, without, "c", time.Minute, c2, func(x Gated) { g4 = x })
	for p := range without.PartitionCount() {
		if g4.Gates != nil && g4.Gates[p] != nil && g4.Gates[p] == c2.Pending["a"] {
			t.Fatalf("partition %d still waits on a, which left", p)
		}
	}
}

// A marker naming members in After opens its sender's gate only once each
// of them (still in the ring, not this node) has sent its own marker for the
// same ring; the last of those opens it, and a kept marker's After counts
// at Publish too.
func TestMarksAfterWaitsForTheNamedMembers(t *testing.T) {
	prev, cur := snapOf(t, "a", "b"), snapOf(t, "a", "b", "c", "x")
	var m Marks
	var g Gated
	m.Publish(prev, cur, "c", time.Minute, Gated{}, func(x Gated) { g = x })
	if g.Pending["a"] == nil {
		t.Fatal("c gained nothing from a; the test needs it to")
	}
	now := func() (*ring.Snapshot, map[string]chan struct{}) { return cur, g.Pending }
	if m.Done("a", cur.Digest(), []string{"x", "c", "gone"}, now) {
		t.Fatal("a's gate opened before x's marker: x may still hold the states a passed it")
	}
	if isClosed(g.Pending["a"]) {
		t.Fatal("a's gate is open")
	}
	m.Done("x", cur.Digest(), nil, now)
	if !isClosed(g.Pending["a"]) {
		t.Fatal("x's marker did not open a's gate, which waited only for it")
	}
	// Kept before the ring: the same rule at Publish.
	next := snapOf(t, "a", "b", "c", "x", "y")
	var m2 Marks
	m2.Done("a", next.Digest(), []string{"y"}, func() (*ring.Snapshot, map[string]chan struct{}) { return cur, nil })
	var g2 Gated
	m2.Publish(prev, next, "c", time.Minute, Gated{}, func(x Gated) { g2 = x })
	if g2.Pending["a"] == nil {
		t.Fatal("a's early marker named y, whose marker has not come, yet a's partitions are open")
	}
	m2.Done("y", next.Digest(), []string{"a"}, func() (*ring.Snapshot, map[string]chan struct{}) { return next, g2.Pending })
	if !isClosed(g2.Pending["a"]) {
		t.Fatal("y's marker (naming a back: a cycle) did not open a's gate")
	}
}

// Partitions gained from a member gone from the ring (members leaving at
// once) wait for every other member's marker for the ring: the gone
// member's states may still be on their way through any of them, passed on
// by a member whose ring named another leaver. The last marker opens them.
func TestMarksGainedFromAGoneMemberWaitForEveryone(t *testing.T) {
	prev, cur := snapOf(t, "a", "b", "c", "d"), snapOf(t, "b", "c", "d")
	var crashed Marks
	var gc Gated
	crashed.Publish(prev, cur, "c", time.Minute, Gated{}, func(x Gated) { gc = x })
	if gc.Pending[Everyone] != nil {
		t.Fatal("a sent no marker (it crashed), yet the partitions gained from it wait: its backup must decide at once")
	}
	var m Marks
	// a's leave: its handoff's marker, for its ring without itself.
	m.Done("a", cur.Digest()+1, nil, func() (*ring.Snapshot, map[string]chan struct{}) { return prev, nil })
	var g Gated
	m.Publish(prev, cur, "c", time.Minute, Gated{}, func(x Gated) { g = x })
	gone := 0
	for p := range cur.PartitionCount() {
		if prev.PartitionOwner(p).Name == "a" && cur.PartitionOwner(p).Name == "c" {
			gone++
			if g.Gates[p] == nil || g.Gates[p] != g.Pending[Everyone] {
				t.Fatalf("partition %d, gained from a (gone), is not gated on everyone's markers", p)
			}
		}
	}
	if gone == 0 {
		t.Fatal("c gained nothing from a; the test needs it to")
	}
	now := func() (*ring.Snapshot, map[string]chan struct{}) { return cur, g.Pending }
	m.Done("b", cur.Digest(), nil, now)
	if isClosed(g.Pending[Everyone]) {
		t.Fatal("opened with d's marker still to come")
	}
	m.Done("d", cur.Digest(), nil, now)
	if !isClosed(g.Pending[Everyone]) {
		t.Fatal("every other member's marker came, and the partitions gained from a are still closed")
	}
	// Every marker in before the ring: no gate at all.
	m2 := Marks{}
	m2.Done("a", cur.Digest()+1, nil, func() (*ring.Snapshot, map[string]chan struct{}) { return prev, nil })
	m2.Done("b", cur.Digest(), nil, func() (*ring.Snapshot, map[string]chan struct{}) { return prev, nil })
	m2.Done("d", cur.Digest(), nil, func() (*ring.Snapshot, map[string]chan struct{}) { return prev, nil })
	var g3 Gated
	m2.Publish(prev, cur, "c", time.Minute, Gated{}, func(x Gated) { g3 = x })
	if g3.Pending[Everyone] != nil {
		t.Fatal("every marker came before the ring, and partitions gained from a are gated")
	}
}

// Members leaving at once make one ring after another: the wait for
// everyone's markers on partitions gained from a leaver is carried into the
// next ring while it is still closed, and opens with everyone's markers for
// that ring; without the carry the next ring decided those partitions on the
// state at hand while the leaver's states were still being passed on.
func TestMarksCarryTheWaitForEveryoneIntoTheNextRing(t *testing.T) {
	prev, cur, next := snapOf(t, "a", "b", "c", "d", "e"), snapOf(t, "b", "c", "d", "e"), snapOf(t, "c", "d", "e")
	var m Marks
	m.Done("a", cur.Digest()+1, nil, func() (*ring.Snapshot, map[string]chan struct{}) { return prev, nil })
	var g Gated
	m.Publish(prev, cur, "c", time.Minute, Gated{}, func(x Gated) { g = x })
	if g.Pending[Everyone] == nil {
		t.Fatal("nothing gained from a (it left) waits for everyone; the test needs it to")
	}
	m.Done("b", next.Digest()+1, nil, func() (*ring.Snapshot, map[string]chan struct{}) { return cur, g.Pending })
	var g2 Gated
	m.Publish(cur, next, "c", time.Minute, g, func(x Gated) { g2 = x })
	carried := 0
	for p := range next.PartitionCount() {
		if g.Gates[p] == g.Pending[Everyone] && next.PartitionOwner(p).Name == "c" {
			if g2.Gates == nil || g2.Gates[p] == nil {
				t.Fatalf("partition %d, gained from a that left, opened in the next ring before everyone's markers", p)
			}
			carried++
		}
	}
	if carried == 0 {
		t.Fatal("no partition gained from a stayed c's; the test needs one")
	}
	now := func() (*ring.Snapshot, map[string]chan struct{}) { return next, g2.Pending }
	m.Done("d", next.Digest(), nil, now)
	if isClosed(g.Pending[Everyone]) {
		t.Fatal("opened with e's marker for the next ring still to come")
	}
	m.Done("e", next.Digest(), nil, now)
	if !isClosed(g.Pending[Everyone]) {
		t.Fatal("every other member's marker for the next ring came, and the carried wait is still closed")
	}
}
