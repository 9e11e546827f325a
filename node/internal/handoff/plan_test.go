package handoff

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// "a" leaves a, b, c, d: its states go to their owners under the ring of the
// others, and each of them gets a marker, whether it gained partitions from
// a or not.
func TestPlanSendsStatesToTheirOwnersAndMarksGainers(t *testing.T) {
	old, cur := snapOf(t, "a", "b", "c", "d"), snapOf(t, "b", "c", "d")
	var moved []store.Moved
	for h := range uint64(50) {
		moved = append(moved, store.Moved{H: h * 0x9e3779b97f4a7c15})
	}
	b := Plan(&Change{Self: "a", Old: old, Cur: cur}, moved, []store.BanState{{Key: "k"}})
	got := 0
	for name, sts := range b.States {
		for _, ks := range sts {
			if m, _ := cur.OwnerOfHash(ks.KeyHash); m.Name != name {
				t.Fatalf("state %#x sent to %s, owned by %s", ks.KeyHash, name, m.Name)
			}
			got++
		}
	}
	if got != len(moved) || b.Lost != 0 {
		t.Fatalf("%d of %d states placed, %d lost", got, len(moved), b.Lost)
	}
	if _, ok := b.States["b"]; !ok {
		t.Fatal("b gained partitions and got no batch (no marker)")
	}
	if _, ok := b.States["c"]; !ok {
		t.Fatal("c gained partitions and got no batch (no marker)")
	}
	if len(b.States) != 3 {
		t.Fatalf("batches for %d members, want one for each of b, c and d", len(b.States))
	}
	// A change in which "c" gains nothing as "b" sees it: c still gets
	// b's marker, and b none of its own.
	nb := Plan(&Change{Self: "b", Old: snapOf(t, "b", "c"), Cur: snapOf(t, "b", "c", "d")}, nil, nil)
	if _, ok := nb.States["c"]; !ok {
		t.Fatal("c, gaining nothing from b's change, got no marker")
	}
	if _, ok := nb.States["b"]; ok {
		t.Fatal("b marked itself")
	}
	if m, _ := cur.Owner("k"); len(b.Bans[m.Name]) != 1 {
		t.Fatalf("the ban state did not go to its owner %s: %v", m.Name, b.Bans)
	}
}

// A member that refuses (it is leaving too) has its states given to the
// owners under the ring without it; an owner that refuses in that round is
// left out of the next; what no member takes is counted.
func TestDeliverGivesRefusedStatesToTheNextOwner(t *testing.T) {
	members := snapOf(t, "b", "c", "d").Members()
	cur, _ := ring.SnapshotOf(ring.DefaultConfig(), members)
	b := NewBatches()
	for h := range uint64(200) {
		h *= 0x9e3779b97f4a7c15
		m, _ := cur.OwnerOfHash(h)
		b.AddState(m.Name, m.Addr, &store.Moved{H: h})
	}
	var mu sync.Mutex
	took := map[string]int{}
	refuse := map[string]bool{"b": true}
	send := func(_ context.Context, name, _ string, states []transport.KeyState, _ []transport.PenaltyState) error {
		mu.Lock()
		defer mu.Unlock()
		if refuse[name] {
			return errors.New("leaving")
		}
		took[name] += len(states)
		return nil
	}
	retries := 0
	lost, err := b.Deliver(context.Background(), members, ring.DefaultConfig(), send, send, func(failed []string, err error) {
		retries++
		if retries == 1 && (len(failed) != 1 || failed[0] != "b") {
			t.Errorf("first retry for %v, want [b]", failed)
		}
	})
	if err != nil || lost != 0 {
		t.Fatalf("Deliver: lost %d, err %v", lost, err)
	}
	if took["c"]+took["d"] != 200 || took["b"] != 0 || retries != 1 {
		t.Fatalf("took %v after %d retries, want all 200 on c and d after 1", took, retries)
	}
	// Everyone refuses: every state is counted lost, with the errors.
	refuse = map[string]bool{"b": true, "c": true, "d": true}
	lost, err = b.Deliver(context.Background(), members, ring.DefaultConfig(), send, send, func([]string, error) {})
	if lost != 200 || !errors.Is(err, ErrNoneLeft) {
		t.Fatalf("all refusing: lost %d, err %v; want 200 and ErrNoneLeft", lost, err)
	}
}
