package ringview

import (
	"testing"

	"github.com/ringlimit/ringlimit/ring"
)

func TestGatesAndMine(t *testing.T) {
	snap, err := ring.SnapshotOf(ring.DefaultConfig(), []ring.Member{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}})
	if err != nil {
		t.Fatal(err)
	}
	v := &View{Snap: snap}
	v.SetMine("a")
	for p := range v.Mine {
		if v.Mine[p] != (v.Snap.PartitionOwner(p).Name == "a") {
			t.Fatalf("Mine[%d] = %v, owner %s", p, v.Mine[p], v.Snap.PartitionOwner(p).Name)
		}
	}
	h := v.Snap.Hash("k")
	if v.Gate(h) != nil {
		t.Fatal("a view without gates gated a key")
	}
	g := make(chan struct{})
	v.Gates = make([]chan struct{}, v.Snap.PartitionCount())
	v.Gates[v.Snap.PartitionOfHash(h)] = g
	if v.Gate(h) != g {
		t.Fatal("the key's closed gate was not returned")
	}
	close(g)
	if v.Gate(h) != nil {
		t.Fatal("an opened gate still gates")
	}
	left := &View{Snap: snap, Leaving: true}
	left.SetMine("a")
	for p := range left.Mine {
		if left.Mine[p] {
			t.Fatalf("a leaving node owns partition %d", p)
		}
	}
	if !left.IsLeaving() || left.Members() != 2 {
		t.Fatal("IsLeaving/Members")
	}
	if _, ok := v.Backup(h); ok {
		t.Fatal("a view without backups named one")
	}
}
