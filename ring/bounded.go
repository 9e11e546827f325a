package ring

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
)

// Consistent hashing with bounded loads, as github.com/buraksezer/consistent
// v0.10.0 computes it, without its cost per rebuild.
//
// consistent places ReplicationFactor virtual nodes per member on a circle of
// 64-bit hashes (the hash of the member's name followed by the decimal index,
// 0..ReplicationFactor-1), then assigns the partitions in order 0, 1, ...: the
// partition's point is the hash of its number (8 bytes, little endian), and it
// goes to the member of the first virtual node at or after that point
// (clockwise, wrapping) whose member owns fewer than
// ceil(floor(PartitionCount/members) × Load) partitions so far. Two virtual
// nodes on the same point (two names whose keys are the same string, such as
// "n1"+"11" and "n11"+"1") both belong to the member added last, in name
// order. consistent gives up ("not enough room") after visiting as many
// virtual nodes as the circle holds, less one.
//
// consistent rebuilds the circle by re-sorting it once per member added, in a
// map: a rebuild cost 170 ms at 100 members, and the node built one ring per
// member to find its backups. Here the virtual-node hashes of a name are
// computed once and kept while the name is a member, the circle is sorted
// once per rebuild, and the assignment is a loop over slices. The tables are
// the same as consistent's (TestBoundedMatchesConsistent compares them over
// many member sets, including colliding names), so nodes of a cluster that
// run different versions of this package still agree on every owner.
//
// The backup of a partition is its owner in the ring of the same members
// without the partition's owner. Removing a member changes every member's
// room (the bound is per member count) and so can move partitions between
// the others too: the backup is not simply the next member on the circle,
// and it takes one assignment pass per member, with that member's virtual
// nodes skipped. A pass costs about PartitionCount short scans and reuses the
// circle (no sort, no hashing), so all backups cost O(members ×
// PartitionCount) and no allocation per pass.

// errNoRoom is consistent's "not enough room to distribute partitions": the
// scan visited as many virtual nodes as the circle holds, less one, without
// finding a member with room.
var errNoRoom = errors.New("not enough room to distribute partitions")

// circle is the sorted hash circle of one member set (members sorted by name;
// a member is its index in that order).
type circle struct {
	hashes []uint64 // virtual-node points, ascending
	// adder[e] is the member that placed point e; owner[e] the member the
	// point belongs to (the last adder of its hash); alt[e] the last adder of
	// its hash other than owner[e], or -1: the point's member when owner[e]
	// is taken out.
	adder, owner, alt []int32
	// start[p] is the first point at or after partition p's hash (wrapping).
	start []int32
	// count[m] is the number of points member m placed.
	count   []int32
	members int
	load    float64
}

// vnodeHashes returns the ReplicationFactor virtual-node hashes of name,
// exactly as consistent computes them: Hasher(name + decimal(i)).
func (r *Ring) vnodeHashes(name string) []uint64 {
	out := make([]uint64, r.cfg.ReplicationFactor)
	buf := make([]byte, 0, len(name)+8)
	buf = append(buf, name...)
	for i := range out {
		out[i] = r.cfg.Hasher.Sum64(strconv.AppendInt(buf, int64(i), 10))
	}
	return out
}

// partitionHashes returns the point of each partition: Hasher of its number
// as 8 little-endian bytes.
func partitionHashes(h Hasher, partitions int) []uint64 {
	out := make([]uint64, partitions)
	var b [8]byte
	for p := range out {
		binary.LittleEndian.PutUint64(b[:], uint64(p))
		out[p] = h.Sum64(b[:])
	}
	return out
}

// buildCircle sorts the virtual nodes of sorted (whose hashes vnodes gives)
// into a circle and finds each partition's first point. Called under r.mu.
func (r *Ring) buildCircle(sorted []Member) *circle {
	type point struct {
		h uint64
		m int32
	}
	pts := make([]point, 0, len(sorted)*r.cfg.ReplicationFactor)
	keep := make(map[string][]uint64, len(sorted))
	for i, m := range sorted {
		hs := r.vnodes[m.Name]
		if hs == nil {
			hs = r.vnodeHashes(m.Name)
		}
		keep[m.Name] = hs
		for _, h := range hs {
			pts = append(pts, point{h, int32(i)})
		}
	}
	r.vnodes = keep // names that left are forgotten
	slices.SortFunc(pts, func(a, b point) int {
		switch {
		case a.h < b.h:
			return -1
		case a.h > b.h:
			return 1
		}
		return int(a.m - b.m)
	})
	c := &circle{
		hashes:  make([]uint64, len(pts)),
		adder:   make([]int32, len(pts)),
		owner:   make([]int32, len(pts)),
		alt:     make([]int32, len(pts)),
		start:   make([]int32, len(r.parts)),
		count:   make([]int32, len(sorted)),
		members: len(sorted),
		load:    r.cfg.Load,
	}
	for e := 0; e < len(pts); {
		end := e + 1
		for end < len(pts) && pts[end].h == pts[e].h {
			end++
		}
		owner, alt := pts[end-1].m, int32(-1)
		for j := end - 2; j >= e; j-- {
			if pts[j].m != owner {
				alt = pts[j].m
				break
			}
		}
		for j := e; j < end; j++ {
			c.hashes[j], c.adder[j], c.owner[j], c.alt[j] = pts[j].h, pts[j].m, owner, alt
			c.count[pts[j].m]++
		}
		e = end
	}
	for p, h := range r.parts {
		i, _ := slices.BinarySearch(c.hashes, h) // first point >= h
		if i == len(c.hashes) {
			i = 0
		}
		c.start[p] = int32(i)
	}
	return c
}

// assign runs the bounded-load assignment over c without member skip (-1:
// with every member) and writes each partition's owner (a member index) into
// out. loads is scratch, one entry per member. It returns errNoRoom where
// consistent would panic.
func (c *circle) assign(skip int32, out, loads []int32) error {
	members, points := c.members, len(c.hashes)
	if skip >= 0 {
		members--
		points -= int(c.count[skip])
	}
	if members < 1 || points < 1 {
		return errNoRoom
	}
	// consistent: math.Ceil(float64(PartitionCount/members) * Load).
	room := int32(math.Ceil(float64(len(c.start)/members) * c.load))
	clear(loads)
	for p, idx := range c.start {
		for seen := 0; ; {
			if c.adder[idx] != skip {
				o := c.owner[idx]
				if o == skip {
					o = c.alt[idx]
				}
				seen++
				if seen >= points {
					return errNoRoom
				}
				if loads[o] < room {
					out[p] = o
					loads[o]++
					break
				}
			}
			idx++
			if int(idx) == len(c.hashes) {
				idx = 0
			}
		}
	}
	return nil
}

// backups is the lazily computed backup table of a Snapshot, shared by the
// Snapshots that have the same member names (SetMembers with only new
// addresses or ids).
type backups struct {
	once sync.Once
	circ *circle // dropped once idx is computed
	own  []int32 // the Snapshot's owners
	idx  []int32 // per partition: the backup's member index, -1 for none
}

// compute fills b.idx: for each member m, one assignment without m, whose
// owners of m's partitions are their backups. A pass that fails leaves the
// partitions of that member without a backup (-1).
func (b *backups) compute() {
	c := b.circ
	b.idx = make([]int32, len(b.own))
	for p := range b.idx {
		b.idx[p] = -1
	}
	if c == nil || c.members < 2 {
		return
	}
	has := make([]bool, c.members)
	for _, o := range b.own {
		has[o] = true
	}
	out := make([]int32, len(b.own))
	loads := make([]int32, c.members)
	for m := range c.members {
		if !has[m] {
			continue // owns nothing: no pass needed
		}
		if c.assign(int32(m), out, loads) != nil {
			continue
		}
		for p, o := range b.own {
			if o == int32(m) {
				b.idx[p] = out[p]
			}
		}
	}
	b.circ = nil
}
