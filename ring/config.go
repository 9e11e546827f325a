package ring

import (
	"errors"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
)

// ErrInvalidConfig is returned by New, wrapped with the offending field and value,
// when a Config cannot build a ring (PartitionCount < 1, ReplicationFactor < 2,
// Load not a finite number above 1.0).
var ErrInvalidConfig = errors.New("ring: invalid config")

// Hasher maps bytes to a 64-bit hash. It is the shape github.com/buraksezer/consistent
// requires and is used for three things: placing each member's virtual nodes on the
// circle, placing the partitions on the circle, and mapping a key to its partition
// (hash % PartitionCount).
//
// Every node of a cluster must use the same Hasher, or their partition tables and
// key→partition mappings disagree (compare Snapshot.Digest to detect it). Sum64 may
// be called concurrently and must not modify or retain its argument.
//
// A Hasher that also has a method Sum64String(string) uint64, returning the same
// value as Sum64([]byte(s)), lets Owner and Partition hash a key without copying it
// to a []byte; the default xxhash Hasher has it, so lookups do not allocate. A Hasher
// without it costs one allocation per lookup.
type Hasher interface {
	Sum64(b []byte) uint64
}

// stringHasher is the optional fast path of a Hasher described in the Hasher doc.
type stringHasher interface {
	Sum64String(s string) uint64
}

// xxHasher is the default Hasher: xxhash.Sum64 / xxhash.Sum64String (XXH64, seed 0).
type xxHasher struct{}

func (xxHasher) Sum64(b []byte) uint64       { return xxhash.Sum64(b) }
func (xxHasher) Sum64String(s string) uint64 { return xxhash.Sum64String(s) }

// Config sets the shape of a Ring. It is read by New and never changed afterwards.
// Every node of a cluster must use the same Config: the partition table is a
// function of the member names and of all four fields.
type Config struct {
	// PartitionCount is the number of partitions keys are hashed into
	// (partition = hash(key) % PartitionCount); owners are assigned per partition.
	// Default 1021 (a prime spreads hashes evenly). More partitions give finer
	// balance and a smaller unit of hand-off, at the cost of a longer rebuild
	// (about PartitionCount binary searches) and a 4-byte table entry each. A
	// rebuild fails with more members than partitions. Must be >= 1.
	PartitionCount int

	// ReplicationFactor is the number of virtual nodes each member places on the
	// hash circle (this is not data replication: a key has exactly one owner).
	// Default 100. More virtual nodes give better balance and less skew from
	// unlucky names, at the cost of rebuild time and memory proportional to
	// members × ReplicationFactor. Must be >= 2: when a member's first choice is
	// full, consistent v0.10.0 scans every virtual node but the one just before
	// it, so with a single virtual node per member it can miss the only member
	// with room and fail (it does for 2 members at the other defaults).
	ReplicationFactor int

	// Load bounds how many partitions one member may own, as a multiple of the
	// average: at most ceil(floor(PartitionCount/members) × Load) each
	// (consistent hashing with bounded loads). Default 1.25. It caps the busiest
	// member only; the least loaded one is set by the hash and ReplicationFactor.
	// Lower values cap the busiest member tighter but push more partitions past
	// their first choice, so more of them move between existing members when
	// membership changes. Must be a finite number > 1.0, which (with
	// ReplicationFactor >= 2) leaves room for any member count up to
	// PartitionCount.
	Load float64

	// Hasher hashes member names, partition numbers and keys. nil means xxhash
	// (github.com/cespare/xxhash/v2 Sum64, seed 0). See Hasher for requirements.
	Hasher Hasher
}

// DefaultConfig returns the defaults measured for ringlimit: PartitionCount 1021,
// ReplicationFactor 100, Load 1.25, Hasher nil (xxhash). With these, no member owns
// more than 1.25× the mean number of partitions (Load guarantees it); the ratio of
// the busiest to the least loaded member was 1.14–1.56 for 3 to 10 members named
// node-0..node-9 (1.04–1.91 over 30 other name sets), and going from 3 to 4
// members moved 18–30% of keys.
func DefaultConfig() Config {
	return Config{
		PartitionCount:    1021,
		ReplicationFactor: 100,
		Load:              1.25,
	}
}

// validate reports the first invalid field of c as an error wrapping ErrInvalidConfig.
func (c Config) validate() error {
	switch {
	case c.PartitionCount < 1:
		return fmt.Errorf("%w: PartitionCount %d, want >= 1", ErrInvalidConfig, c.PartitionCount)
	case c.ReplicationFactor < 2:
		return fmt.Errorf("%w: ReplicationFactor %d, want >= 2", ErrInvalidConfig, c.ReplicationFactor)
	case math.IsNaN(c.Load) || math.IsInf(c.Load, 0) || c.Load <= 1.0:
		return fmt.Errorf("%w: Load %v, want a finite number > 1.0", ErrInvalidConfig, c.Load)
	}
	return nil
}
