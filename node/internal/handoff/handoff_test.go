package handoff

import (
	"testing"

	"github.com/ringlimit/ringlimit/node/internal/store"
)

func TestBatchesByOwner(t *testing.T) {
	b := NewBatches()
	b.Mark("gained", "addr-g")
	b.AddState("o1", "addr-1", &store.Moved{H: 7, LastNow: 3})
	b.AddBan("o2", "addr-2", store.BanState{Key: "k", BanUntil: 9})
	if st, ok := b.States["gained"]; !ok || len(st) != 0 {
		t.Fatalf("a member that gained partitions: states %v (present %v), want the marker alone", st, ok)
	}
	if st := b.States["o1"]; len(st) != 1 || st[0].KeyHash != 7 || st[0].LastNow != 3 || st[0].State == nil {
		t.Fatalf("o1's batch: %+v", st)
	}
	if _, ok := b.States["o2"]; !ok || len(b.Bans["o2"]) != 1 || b.Bans["o2"][0].Key != "k" {
		t.Fatalf("o2's batch: states present %v, bans %+v", ok, b.Bans["o2"])
	}
	for name, want := range map[string]string{"gained": "addr-g", "o1": "addr-1", "o2": "addr-2"} {
		if b.Addrs[name] != want {
			t.Fatalf("Addrs[%s] = %q, want %q", name, b.Addrs[name], want)
		}
	}
	if b.Lost != 0 {
		t.Fatalf("Lost = %d, want 0", b.Lost)
	}
}
