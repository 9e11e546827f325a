package ring

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Snapshot is one immutable partition→owner table, published by Ring.SetMembers.
// All its methods are safe for concurrent use and give the same answers for the
// life of the Snapshot. Obtain it from Ring.Snapshot; the zero value is not usable.
type Snapshot struct {
	version        uint64
	partitionCount uint64
	pmod           modulus // % partitionCount without a division
	hash           func(string) uint64
	members        []Member // sorted by Name, unique names
	owners         []int32  // partition -> index in members; nil when members is empty
	digest         uint64
	backups        *backups // nil when members is empty; shared by Snapshots of the same names
}

// Owner returns the member that owns key, and false if the Snapshot has no
// members. With a Hasher that has Sum64String (the default does), it does not
// allocate.
func (s *Snapshot) Owner(key string) (Member, bool) {
	if len(s.members) == 0 {
		return Member{}, false
	}
	return s.members[s.owners[s.pmod.mod(s.hash(key))]], true
}

// Hash returns the ring's hash of key (Config.Hasher; xxhash by default), the
// value OwnerOfHash and PartitionOfHash take. A caller that needs the owner and
// also hashes the key for its own purposes (node uses it to pick a shard) hashes
// once.
func (s *Snapshot) Hash(key string) uint64 { return s.hash(key) }

// OwnerOfHash is Owner for a key whose Hash is h.
func (s *Snapshot) OwnerOfHash(h uint64) (Member, bool) {
	if len(s.members) == 0 {
		return Member{}, false
	}
	return s.members[s.owners[s.pmod.mod(h)]], true
}

// PartitionOfHash is Partition for a key whose Hash is h.
func (s *Snapshot) PartitionOfHash(h uint64) int { return int(s.pmod.mod(h)) }

// Partition returns the partition of key: hash(key) % PartitionCount, in
// [0, PartitionCount). It depends only on the key, the Hasher and PartitionCount,
// not on the members, so it is stable across rebuilds.
func (s *Snapshot) Partition(key string) int {
	return int(s.pmod.mod(s.hash(key)))
}

// PartitionCount returns the number of partitions, Config.PartitionCount.
func (s *Snapshot) PartitionCount() int {
	return int(s.partitionCount)
}

// PartitionOwner returns the owner of partition p, or the zero Member if the
// Snapshot has no members. It panics if p is outside [0, PartitionCount), like an
// out-of-range slice index.
func (s *Snapshot) PartitionOwner(p int) Member {
	if p < 0 || uint64(p) >= s.partitionCount {
		panic("ring: partition out of range")
	}
	if len(s.members) == 0 {
		return Member{}
	}
	return s.members[s.owners[p]]
}

// PartitionBackup returns the backup of partition p: the member that owns p in
// the table built from the same members without p's owner, that is the owner
// p gets when its owner leaves or is removed as dead. It is never p's owner.
// False when the Snapshot has fewer than two members (or, which the defaults
// exclude, the members without p's owner cannot be placed). It panics if p is
// outside [0, PartitionCount).
//
// The first call on a Snapshot computes the backups of every partition, one
// bounded-load pass over the circle per member (O(members × PartitionCount),
// no hashing, no sort: 4 ms at 100 members, 42 ms at 1,000 on a 2-core
// machine, see node's BenchmarkMembershipChange), and keeps them; later calls are
// an index lookup. Every node computes the same backups from the same member
// names and Config.
func (s *Snapshot) PartitionBackup(p int) (Member, bool) {
	if p < 0 || uint64(p) >= s.partitionCount {
		panic("ring: partition out of range")
	}
	if len(s.members) < 2 {
		return Member{}, false
	}
	b := s.backups
	b.once.Do(b.compute)
	if i := b.idx[p]; i >= 0 {
		return s.members[i], true
	}
	return Member{}, false
}

// Members returns a copy of the members, sorted by Name. It is empty (nil) for an
// empty Snapshot.
func (s *Snapshot) Members() []Member {
	return slices.Clone(s.members)
}

// Len returns the number of members.
func (s *Snapshot) Len() int {
	return len(s.members)
}

// Version returns the number of successful SetMembers calls that led to this
// Snapshot: 0 for the empty Snapshot of a new Ring, then 1, 2, ... It is local to
// one Ring; nodes compare tables with Digest, not Version.
func (s *Snapshot) Version() uint64 {
	return s.version
}

// Has reports whether a member named name is in the Snapshot.
func (s *Snapshot) Has(name string) bool {
	_, ok := slices.BinarySearchFunc(s.members, name, func(m Member, n string) int {
		return strings.Compare(m.Name, n)
	})
	return ok
}

// Digest returns a 64-bit xxhash of the partition table: PartitionCount and, for
// each partition in order, its owner's Name. Two Snapshots, on any nodes, with the
// same Digest route every key to the same member name (barring a hash collision).
// Addr, ID and Version are not part of it. It is computed once per rebuild.
func (s *Snapshot) Digest() uint64 {
	return s.digest
}

// Equal reports whether s and other have the same partition table: the same
// PartitionCount and the same owner Name for every partition. Like Digest, it
// ignores Addr, ID and Version. It is exact (no hashing) and costs one comparison
// per partition. A nil Snapshot equals only nil.
func (s *Snapshot) Equal(other *Snapshot) bool {
	if s == nil || other == nil {
		return s == other
	}
	if s.partitionCount != other.partitionCount || len(s.owners) != len(other.owners) {
		return false
	}
	for p, i := range s.owners {
		if s.members[i].Name != other.members[other.owners[p]].Name {
			return false
		}
	}
	return true
}

// digest hashes the table as documented on Snapshot.Digest. Each name is prefixed
// with its length so that different tables cannot produce the same byte stream.
func digest(partitionCount int, members []Member, owners []int32) uint64 {
	d := xxhash.New()
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(partitionCount))
	_, _ = d.Write(buf[:])
	for _, i := range owners {
		name := members[i].Name
		binary.LittleEndian.PutUint64(buf[:], uint64(len(name)))
		_, _ = d.Write(buf[:])
		_, _ = d.WriteString(name)
	}
	return d.Sum64()
}
