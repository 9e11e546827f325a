package handoff

import (
	"io"
	"log/slog"
	"testing"

	"github.com/ringlimit/ringlimit/node/internal/replication"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
)

// Every case of Change.Move, found among the partitions of a real change
// ("d" leaves a, b, c, d as seen by "a"), and Resync's partitions.
func TestChangeMoveAndResync(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	old, cur := snapOf(t, "a", "b", "c", "d"), snapOf(t, "a", "b", "c")
	c := &Change{Self: "a", Old: old, Cur: cur,
		OldBackups: replication.NewBackups(old, true, log), CurBackups: replication.NewBackups(cur, true, log)}
	seen := map[store.MoveAction]int{}
	resync := c.Resync()
	for p := range cur.PartitionCount() {
		h := partitionHash(t, cur, p)
		owner, _ := cur.OwnerOfHash(h)
		was, _ := old.OwnerOfHash(h)
		backup, _ := c.CurBackups.OfHash(h)
		oldBackup, _ := c.OldBackups.OfHash(h)
		want := store.MoveDrop // the stray action passed in
		switch {
		case owner.Name == "a":
			want = store.MoveKeep
		case backup.Name == "a" && was.Name == "a":
			want = store.MoveSendCopy
		case backup.Name == "a":
			want = store.MoveKeep
		case was.Name == "a":
			want = store.MoveSend
		}
		got := c.Move(h, store.MoveDrop)
		if got != want {
			t.Fatalf("partition %d (owner %s, was %s, backup %s): Move = %v, want %v", p, owner.Name, was.Name, backup.Name, got, want)
		}
		seen[got]++
		wantResync := owner.Name == "a" && (was.Name != "a" || oldBackup.Name != backup.Name)
		if (resync != nil && resync[p]) != wantResync {
			t.Fatalf("partition %d: resync %v, want %v", p, resync != nil && resync[p], wantResync)
		}
	}
	if seen[store.MoveKeep] == 0 || seen[store.MoveDrop] == 0 {
		t.Fatalf("the change did not exercise keep and stray: %v", seen)
	}
	c.Leaving = true
	if got := c.Move(partitionHash(t, cur, 0), store.MoveDrop); got != store.MoveSend {
		t.Fatalf("leaving: Move = %v, want MoveSend", got)
	}
	if c.Resync() != nil {
		t.Fatal("leaving: Resync lists partitions")
	}
}

// partitionHash returns a ring hash that falls in partition p of s.
func partitionHash(t *testing.T, s *ring.Snapshot, p int) uint64 {
	t.Helper()
	for h := uint64(0); h < 1<<24; h++ {
		if s.PartitionOfHash(h*0x9e3779b97f4a7c15) == p {
			return h * 0x9e3779b97f4a7c15
		}
	}
	t.Fatalf("no hash found for partition %d", p)
	return 0
}

// MoveListed sends a listed stray (a state handed here by mistake) of a key
// another member owns to that owner, keeping a copy, where Move keeps it as
// if it were this member's replica: its owner has no copy of it, and this
// member's marker says it holds nothing more. Unlisted states, and listed
// ones of keys this member owns, move as Move says.
func TestChangeMoveListedSendsStraysWithTheHandoff(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	old, cur := snapOf(t, "a", "b", "c", "d"), snapOf(t, "a", "b", "c")
	c := &Change{Self: "a", Old: old, Cur: cur,
		OldBackups: replication.NewBackups(old, true, log), CurBackups: replication.NewBackups(cur, true, log)}
	backedUp := 0
	for p := range cur.PartitionCount() {
		h := partitionHash(t, cur, p)
		owner, _ := cur.OwnerOfHash(h)
		was, _ := old.OwnerOfHash(h)
		backup, _ := c.CurBackups.OfHash(h)
		if got, want := c.MoveListed(h, false, store.MoveDrop), c.Move(h, store.MoveDrop); got != want {
			t.Fatalf("partition %d, not listed: MoveListed = %v, Move = %v", p, got, want)
		}
		want := c.Move(h, store.MoveDrop)
		if owner.Name != "a" && backup.Name == "a" && was.Name != "a" {
			want = store.MoveSendCopy // Move: MoveKeep, "still its replica"
			backedUp++
		}
		if got := c.MoveListed(h, true, store.MoveDrop); got != want {
			t.Fatalf("partition %d (owner %s, was %s, backup %s), listed: MoveListed = %v, want %v", p, owner.Name, was.Name, backup.Name, got, want)
		}
	}
	if backedUp == 0 {
		t.Fatal("no partition backed up by a and owned by another before and after; the test needs one")
	}
	c.Leaving = true
	if got := c.MoveListed(partitionHash(t, cur, 0), true, store.MoveDrop); got != store.MoveSend {
		t.Fatalf("leaving: MoveListed = %v, want MoveSend", got)
	}
}
