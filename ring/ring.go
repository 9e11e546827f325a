// Package ring maps a rate-limit key to the one cluster member that owns it, by
// consistent hashing with bounded loads over xxhash: the tables of
// github.com/buraksezer/consistent v0.10.0, computed without its cost per
// rebuild (see bounded.go). The owner table depends only on the set of member
// names and the Config, so every node that sees the same members computes the
// same owner for every key.
//
// Data flow: the caller (the node package, from membership events) hands the
// complete current member list to Ring.SetMembers. SetMembers sorts it by name,
// builds a fresh circle from the names alone, assigns the partitions to
// members into an immutable Snapshot, and publishes it behind
// an atomic pointer; on any failure the previous Snapshot stays published. A lookup
// (Ring.Owner, or Snapshot.Owner on a Snapshot the caller holds) hashes the key,
// takes hash % PartitionCount as its partition, and reads that partition's owner
// from the table: no lock, no allocation. A caller that needs several lookups to
// agree with each other (for example, deciding which keys to hand off after a
// change) takes one Snapshot and asks it, rather than calling Ring.Owner twice.
package ring

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrRebuild is returned, wrapped with the cause, by SetMembers when it cannot
// build a ring from the given members: an empty or duplicate member name, or a
// member set that bounded loads cannot place (more members than PartitionCount,
// or a degenerate Hasher: "not enough room to distribute partitions", where
// consistent panics). The previously published Snapshot stays in force.
var ErrRebuild = errors.New("ring: rebuild failed")

// Member is one cluster member as the ring sees it. Only Name places the member on
// the ring; Addr and ID are carried along so that a lookup returns everything
// needed to reach the owner.
type Member struct {
	// Name is the member's unique, stable name (its memberlist node name). It is
	// the member's only identity on the ring and must not be empty.
	Name string
	// Addr is the member's gRPC address, "host:port".
	Addr string
	// ID identifies one run of the member; it changes when the member restarts.
	ID string
}

// Ring holds the current Snapshot of the member set and rebuilds it on
// SetMembers. Lookups (Owner, Snapshot) take no lock and may run concurrently with
// each other and with SetMembers. Create it with New; the zero value is not usable.
type Ring struct {
	cfg  Config // validated; Hasher is never nil
	hash func(string) uint64

	parts []uint64 // each partition's point on the circle (see bounded.go)

	mu     sync.Mutex          // serializes SetMembers so versions are published in order
	vnodes map[string][]uint64 // under mu: the virtual-node points of each current member
	snap   atomic.Pointer[Snapshot]
}

// New validates cfg and returns a Ring with no members: its Snapshot is empty
// (Version 0) and Owner reports false until the first successful SetMembers.
// An invalid cfg returns an error wrapping ErrInvalidConfig that names the field.
func New(cfg Config) (*Ring, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Hasher == nil {
		cfg.Hasher = xxHasher{}
	}
	r := &Ring{cfg: cfg, parts: partitionHashes(cfg.Hasher, cfg.PartitionCount)}
	if sh, ok := cfg.Hasher.(stringHasher); ok {
		r.hash = sh.Sum64String
	} else {
		h := cfg.Hasher
		r.hash = func(s string) uint64 { return h.Sum64([]byte(s)) }
	}
	r.snap.Store(r.emptySnapshot(0))
	return r, nil
}

// SnapshotOf returns the table of a ring with cfg and members, built once:
// New followed by SetMembers, for a ring nobody will change (a node's
// "what if these members were gone" rings, tests). Its errors are theirs.
func SnapshotOf(cfg Config, members []Member) (*Snapshot, error) {
	r, err := New(cfg)
	if err == nil {
		err = r.SetMembers(members)
	}
	if err != nil {
		return nil, err
	}
	return r.Snapshot(), nil
}

// Snapshot returns the current table. It is never nil and never changes; a later
// SetMembers publishes a new Snapshot rather than modifying this one.
func (r *Ring) Snapshot() *Snapshot {
	return r.snap.Load()
}

// Owner returns the member that owns key in the current Snapshot, and false if the
// ring has no members. It takes no lock and, with a Hasher that has Sum64String
// (the default does), does not allocate.
func (r *Ring) Owner(key string) (Member, bool) {
	return r.snap.Load().Owner(key)
}

// SetMembers replaces the member set with members (the complete set, not a delta),
// rebuilds the partition table from scratch and publishes it as a new Snapshot
// whose Version is one more than the previous one. The order of members does not
// matter. An empty or nil slice publishes an empty Snapshot (every Owner reports
// false).
//
// If only Addr or ID changed (the same names as the current Snapshot), the
// partition table is reused and only the member details are replaced.
//
// On error (an empty or duplicate Name, or a member set the Config cannot place)
// it returns an error wrapping ErrRebuild and the previous Snapshot stays
// published. SetMembers is safe to call concurrently; calls are applied one at a
// time. It does not retain members.
//
// A full rebuild sorts members × ReplicationFactor points once and scans the
// circle once per partition (see BenchmarkSetMembers for its cost); call it from
// a goroutine of its own, not from inside a memberlist callback.
func (r *Ring) SetMembers(members []Member) error {
	sorted := slices.Clone(members)
	slices.SortFunc(sorted, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	for i, m := range sorted {
		if m.Name == "" {
			return fmt.Errorf("%w: member with Addr %q and ID %q has an empty Name", ErrRebuild, m.Addr, m.ID)
		}
		if i > 0 && sorted[i-1].Name == m.Name {
			return fmt.Errorf("%w: duplicate member name %q", ErrRebuild, m.Name)
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.snap.Load()
	version := prev.version + 1

	if len(sorted) == 0 {
		r.snap.Store(r.emptySnapshot(version))
		return nil
	}
	if sameNames(prev.members, sorted) {
		next := *prev
		next.members = sorted
		next.version = version
		r.snap.Store(&next)
		return nil
	}
	circ := r.buildCircle(sorted)
	owners := make([]int32, r.cfg.PartitionCount)
	if err := circ.assign(-1, owners, make([]int32, len(sorted))); err != nil {
		return fmt.Errorf("%w: %d members, PartitionCount %d, Load %v: %w",
			ErrRebuild, len(sorted), r.cfg.PartitionCount, r.cfg.Load, err)
	}
	r.snap.Store(&Snapshot{
		version:        version,
		partitionCount: uint64(r.cfg.PartitionCount),
		pmod:           newModulus(uint64(r.cfg.PartitionCount)),
		hash:           r.hash,
		members:        sorted,
		owners:         owners,
		digest:         digest(r.cfg.PartitionCount, sorted, owners),
		backups:        &backups{circ: circ, own: owners},
	})
	return nil
}

// emptySnapshot returns a Snapshot with no members and the given version.
func (r *Ring) emptySnapshot(version uint64) *Snapshot {
	return &Snapshot{
		version:        version,
		partitionCount: uint64(r.cfg.PartitionCount),
		pmod:           newModulus(uint64(r.cfg.PartitionCount)),
		hash:           r.hash,
		digest:         digest(r.cfg.PartitionCount, nil, nil),
	}
}

// sameNames reports whether a and b, both sorted by name, hold the same names.
func sameNames(a, b []Member) bool {
	return slices.EqualFunc(a, b, func(x, y Member) bool { return x.Name == y.Name })
}
