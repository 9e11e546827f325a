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
	// Default 4093 (a prime spreads hashes evenly). More partitions give finer
	// balance and a smaller unit of hand-off, at the cost of a longer rebuild
	// (about PartitionCount binary searches) and a 4-byte table entry each. A
	// rebuild fails with more members than partitions. Must be >= 1.
	PartitionCount int

	// ReplicationFactor is the number of virtual nodes each member places on the
	// hash circle (this is not data replication: a key has exactly one owner).
	// Default 200. More virtual nodes give better balance and less skew from
	// unlucky names, at the cost of rebuild time and memory proportional to
	// members × ReplicationFactor. Must be >= 2: when a member's first choice is
	// full, consistent v0.10.0 scans every virtual node but the one just before
	// it, so with a single virtual node per member it can miss the only member
	// with room and fail (it does for 2 members at the other defaults).
	ReplicationFactor int

	// Load bounds how many partitions one member may own, as a multiple of the
	// average: at most ceil(floor(PartitionCount/members) × Load) each
	// (consistent hashing with bounded loads). Default 1.02. It caps the busiest
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

// DefaultConfig returns the defaults measured for ringlimit: PartitionCount 4093
// (prime), ReplicationFactor 200, Load 1.02, Hasher nil (xxhash).
//
// Chosen from BenchmarkBalance (go test -run XXX -bench Balance -benchtime 1x
// ./ring/), which builds rings for 3 to 10 members under 33 name sets each and
// counts the owners of 100,000 keys. With these defaults the busiest member owns
// at most ceil(floor(4093/n) × 1.02) partitions, and the ratio of the busiest to
// the least loaded member was 1.09 at the median, 1.23 at p99 and 1.26 at worst
// (the earlier defaults 1021/100/1.25 gave 1.37, 1.82 and 2.23: 30/31/38% shares
// on three daemons). The price is movement on a join: 1.08× the ideal 1/(n+1) of
// keys at the median (1.26× worst) instead of 1.00×, because a tighter cap
// pushes more partitions past their first choice; and a rebuild takes 2.6 ms for 3
// members and 45 ms for 50 (1.5 and 33 ms before).
func DefaultConfig() Config {
	return Config{
		PartitionCount:    4093,
		ReplicationFactor: 200,
		Load:              1.02,
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
