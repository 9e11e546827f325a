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
	m.Publish(prev, cur, "c", time.Minute, func(x Gated) { g = x })
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
	cur2 := func() (uint64, map[string]chan struct{}) { return cur.Digest(), g.Pending }
	if !m.Done("a", cur.Digest(), cur2) {
		t.Fatal("a's marker for the published ring did not open its gate")
	}
	if m.Done("a", cur.Digest(), cur2) {
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
	if m.Done("b", next.Digest(), cur2) {
		t.Fatal("a marker for another ring opened a gate")
	}
	if mk, kept := m.Kept("b"); !kept || mk.Digest != next.Digest() {
		t.Fatalf("marker for the next ring: %+v kept %v", mk, kept)
	}
	var g2 Gated
	m.Publish(cur, next, "d", time.Minute, func(x Gated) { g2 = x })
	if g2.Pending["b"] != nil {
		t.Fatal("d waits for b, whose marker for this ring came first")
	}
	if _, kept := m.Kept("b"); kept {
		t.Fatal("a used marker was kept")
	}
	var g3 Gated
	m.Publish(nil, next, "d", time.Minute, func(x Gated) { g3 = x })
	if g3.Gates != nil {
		t.Fatal("a nil previous ring gated partitions")
	}
}
