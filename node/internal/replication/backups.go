package replication

import (
	"log/slog"

	"github.com/ringlimit/ringlimit/ring"
)

// Backups is the backup of every partition of one ring snapshot: the
// snapshot's own table (ring.Snapshot.PartitionBackup), an index per
// partition into its members, so a lookup touches 4 bytes per partition (a
// Member per partition, 196 KiB at 4,093 partitions, missed the cache on
// every replication send). The backup of a key is its owner in the ring
// without the key's owner: the member that becomes the owner when the owner
// leaves or is declared dead. A nil *Backups has no backups (one member, or
// replication off).
type Backups struct {
	snap *ring.Snapshot
}

// NewBackups returns the backup table of snap, or nil when on is false
// (replication off) or snap has fewer than two members. The snapshot computes
// every partition's backup once, one bounded-load pass per member over its
// circle: O(members × partitions), 1,000 members in well under a second (see
// node's BenchmarkMembershipChange); the ring per member this used to build
// cost O(members² × virtual nodes). A snapshot whose partition 0 has no
// backup is logged as an error on log.
func NewBackups(snap *ring.Snapshot, on bool, log *slog.Logger) *Backups {
	if snap.Len() < 2 || !on {
		return nil
	}
	if _, ok := snap.PartitionBackup(0); !ok {
		log.Error("backup table: partition 0 has no backup; the ring without its owner cannot be placed")
	}
	return &Backups{snap: snap}
}

// Of returns the backup of partition p (the zero Member when it has none).
func (t *Backups) Of(p int) ring.Member {
	m, _ := t.snap.PartitionBackup(p)
	return m
}

// Partitions returns the number of partitions t covers.
func (t *Backups) Partitions() int { return t.snap.PartitionCount() }

// OfHash returns the backup of the key whose ring hash is h, false when t is
// nil or the key's partition has no backup.
func (t *Backups) OfHash(h uint64) (ring.Member, bool) {
	if t == nil {
		return ring.Member{}, false
	}
	m := t.Of(t.snap.PartitionOfHash(h))
	return m, m.Name != ""
}
