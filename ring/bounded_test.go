package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/buraksezer/consistent"
)

// consistentOwners builds github.com/buraksezer/consistent v0.10.0 over ms (in
// name order, as SetMembers used to) and returns each partition's owner name:
// the reference this package's tables must equal.
func consistentOwners(t testing.TB, cfg Config, ms []Member) (owners []string, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	sorted := slices.Clone(ms)
	slices.SortFunc(sorted, func(a, b Member) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	names := make([]consistent.Member, len(sorted))
	for i, m := range sorted {
		names[i] = ringName(m.Name)
	}
	h := cfg.Hasher
	if h == nil {
		h = xxHasher{}
	}
	c := consistent.New(names, consistent.Config{Hasher: h, PartitionCount: cfg.PartitionCount, ReplicationFactor: cfg.ReplicationFactor, Load: cfg.Load})
	owners = make([]string, cfg.PartitionCount)
	for p := range owners {
		owners[p] = c.GetPartitionOwner(p).String()
	}
	return owners, nil
}

// ringName is how a member name is handed to consistent, which identifies
// members by String().
type ringName string

func (n ringName) String() string { return string(n) }

// boundedCases are member sets and shapes to compare with consistent: the
// defaults, small and odd shapes, names whose virtual-node keys collide
// ("node-1"+"10" is "node-11"+"0"), and seeded random names.
func boundedCases() []struct {
	cfg Config
	ms  []Member
} {
	type tc = struct {
		cfg Config
		ms  []Member
	}
	var out []tc
	rng := rand.New(rand.NewPCG(7, 26))
	shapes := []Config{
		DefaultConfig(),
		{PartitionCount: 1021, ReplicationFactor: 100, Load: 1.25},
		{PartitionCount: 271, ReplicationFactor: 20, Load: 1.25},
		{PartitionCount: 97, ReplicationFactor: 3, Load: 1.01},
	}
	for _, cfg := range shapes {
		for _, n := range []int{1, 2, 3, 5, 10, 13, 31} {
			out = append(out, tc{cfg, members("node-%d", n)}, tc{cfg, members("n%d", n)})
			ms := make([]Member, n)
			for i := range ms {
				ms[i] = Member{Name: fmt.Sprintf("pod-%x", rng.Uint32())}
			}
			out = append(out, tc{cfg, ms})
		}
	}
	out = append(out, tc{DefaultConfig(), []Member{{Name: "n1"}, {Name: "n11"}, {Name: "n111"}, {Name: "n2"}, {Name: "n21"}}})
	return out
}

// TestBoundedMatchesConsistent: the partition table is consistent's, partition
// by partition, for every case (so members running the version that built
// rings with consistent agree with this one), and a set consistent cannot
// place fails here too.
func TestBoundedMatchesConsistent(t *testing.T) {
	t.Parallel()
	for _, c := range boundedCases() {
		want, werr := consistentOwners(t, c.cfg, c.ms)
		r := newRing(t, c.cfg, nil)
		err := r.SetMembers(c.ms)
		if (err != nil) != (werr != nil) {
			t.Fatalf("%+v, %d members: error %v, consistent's %v", c.cfg, len(c.ms), err, werr)
		}
		if err != nil {
			continue
		}
		s := r.Snapshot()
		for p, w := range want {
			if got := s.PartitionOwner(p).Name; got != w {
				t.Fatalf("%+v, members %v: partition %d owned by %s, consistent says %s", c.cfg, c.ms[:min(len(c.ms), 3)], p, got, w)
			}
		}
	}
}

// TestBackupIsOwnerWithoutOwner: each partition's backup is its owner in
// consistent's table of the members without the partition's owner (the
// owner it gets when its owner goes), and never its owner.
func TestBackupIsOwnerWithoutOwner(t *testing.T) {
	t.Parallel()
	for _, c := range boundedCases() {
		r := newRing(t, c.cfg, nil)
		if r.SetMembers(c.ms) != nil {
			continue
		}
		s := r.Snapshot()
		if len(c.ms) < 2 {
			if b, ok := s.PartitionBackup(0); ok {
				t.Fatalf("one member: backup %s, want none", b.Name)
			}
			continue
		}
		without := map[string][]string{}
		for p := range s.PartitionCount() {
			o := s.PartitionOwner(p).Name
			if without[o] == nil {
				var rest []Member
				for _, m := range c.ms {
					if m.Name != o {
						rest = append(rest, m)
					}
				}
				w, err := consistentOwners(t, c.cfg, rest)
				if err != nil {
					w = make([]string, s.PartitionCount()) // no table: no backup
				}
				without[o] = w
			}
			b, ok := s.PartitionBackup(p)
			want := without[o][p]
			if ok != (want != "") || b.Name != want || b.Name == o {
				t.Fatalf("%+v, %d members: partition %d (owner %s): backup %q %v, want %q", c.cfg, len(c.ms), p, o, b.Name, ok, want)
			}
		}
	}
}
