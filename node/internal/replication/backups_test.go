package replication

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/ringlimit/ringlimit/ring"
)

// TestBackupsAreTheOwnerWithoutTheOwner: no table for one member or with
// replication off (and a nil table has no backup); else every key's backup
// is another member than its owner, its owner in the ring without it.
func TestBackupsAreTheOwnerWithoutTheOwner(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	members := []ring.Member{{Name: "a", Addr: "addr-a"}, {Name: "b", Addr: "addr-b"}, {Name: "c", Addr: "addr-c"}}
	snapOf := func(ms []ring.Member) *ring.Snapshot {
		t.Helper()
		s, err := ring.SnapshotOf(ring.DefaultConfig(), ms)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if NewBackups(snapOf(members[:1]), true, log) != nil {
		t.Fatal("a table for one member")
	}
	all := snapOf(members)
	if NewBackups(all, false, log) != nil {
		t.Fatal("a table with replication off")
	}
	if m, ok := (*Backups)(nil).OfHash(1); ok || m.Name != "" {
		t.Fatalf("a nil table gives backup %+v", m)
	}
	bt := NewBackups(all, true, log)
	if bt.Partitions() != all.PartitionCount() {
		t.Fatalf("%d partitions, want %d", bt.Partitions(), all.PartitionCount())
	}
	without := map[string]*ring.Snapshot{} // the ring without each member
	for i, gone := range members {
		without[gone.Name] = snapOf(append(append([]ring.Member{}, members[:i]...), members[i+1:]...))
	}
	for i := range 1000 {
		h := all.Hash(fmt.Sprintf("key-%d", i))
		owner, _ := all.OwnerOfHash(h)
		bk, ok := bt.OfHash(h)
		if !ok || bk.Name == owner.Name || bk != bt.Of(all.PartitionOfHash(h)) {
			t.Fatalf("key %d: owner %s, backup %+v (%v)", i, owner.Name, bk, ok)
		}
		if want, _ := without[owner.Name].OwnerOfHash(h); want.Name != bk.Name {
			t.Fatalf("key %d: backup %s, its owner without %s is %s", i, bk.Name, owner.Name, want.Name)
		}
	}
}
