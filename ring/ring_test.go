package ring

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// members returns n members named fmt.Sprintf(format, i) for i in [0, n), with an
// Addr and ID derived from the name.
func members(format string, n int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		name := fmt.Sprintf(format, i)
		ms[i] = Member{Name: name, Addr: name + ":7000", ID: "id-" + name}
	}
	return ms
}

// newRing returns a Ring built with cfg and set to ms, failing the test on error.
func newRing(t testing.TB, cfg Config, ms []Member) *Ring {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): got error %v, want nil", cfg, err)
	}
	if ms != nil {
		if err := r.SetMembers(ms); err != nil {
			t.Fatalf("SetMembers(%d members): got error %v, want nil", len(ms), err)
		}
	}
	return r
}

// constHasher hashes everything to 0: a degenerate Hasher that puts every
// virtual node of every member on the same point.
type constHasher struct{}

func (constHasher) Sum64([]byte) uint64 { return 0 }

// fnvHasher is FNV-1a without a Sum64String method, to exercise the []byte path.
type fnvHasher struct{}

func (fnvHasher) Sum64(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}

func TestNewInvalidConfig(t *testing.T) {
	t.Parallel()
	with := func(f func(*Config)) Config {
		c := DefaultConfig()
		f(&c)
		return c
	}
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"zero config", Config{}, "PartitionCount"},
		{"PartitionCount 0", with(func(c *Config) { c.PartitionCount = 0 }), "PartitionCount"},
		{"PartitionCount -1", with(func(c *Config) { c.PartitionCount = -1 }), "PartitionCount"},
		{"ReplicationFactor 0", with(func(c *Config) { c.ReplicationFactor = 0 }), "ReplicationFactor"},
		{"ReplicationFactor 1", with(func(c *Config) { c.ReplicationFactor = 1 }), "ReplicationFactor"},
		{"Load 0", with(func(c *Config) { c.Load = 0 }), "Load"},
		{"Load 1", with(func(c *Config) { c.Load = 1 }), "Load"},
		{"Load 0.5", with(func(c *Config) { c.Load = 0.5 }), "Load"},
		{"Load NaN", with(func(c *Config) { c.Load = math.NaN() }), "Load"},
		{"Load +Inf", with(func(c *Config) { c.Load = math.Inf(1) }), "Load"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.cfg)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New: got error %v, want one wrapping ErrInvalidConfig", err)
			}
			if r != nil {
				t.Errorf("New: got Ring %p, want nil on error", r)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q: want it to name field %s", err, tt.field)
			}
		})
	}

	for _, cfg := range []Config{
		DefaultConfig(),
		{PartitionCount: 1, ReplicationFactor: 2, Load: 1.0001},
		{PartitionCount: 7, ReplicationFactor: 2, Load: 1e9, Hasher: fnvHasher{}},
	} {
		if _, err := New(cfg); err != nil {
			t.Errorf("New(%+v): got error %v, want nil", cfg, err)
		}
	}
}

func TestEmptyRing(t *testing.T) {
	t.Parallel()
	r := newRing(t, DefaultConfig(), nil)

	check := func(wantVersion uint64) {
		t.Helper()
		s := r.Snapshot()
		if s == nil {
			t.Fatal("Snapshot: got nil, want an empty Snapshot")
		}
		if got := s.Version(); got != wantVersion {
			t.Errorf("Version: got %d, want %d", got, wantVersion)
		}
		if got := s.Len(); got != 0 {
			t.Errorf("Len: got %d, want 0", got)
		}
		if got := s.Members(); len(got) != 0 {
			t.Errorf("Members: got %v, want empty", got)
		}
		if m, ok := r.Owner("k"); ok || m != (Member{}) {
			t.Errorf("Ring.Owner: got %v, %v, want zero Member, false", m, ok)
		}
		if m, ok := s.Owner("k"); ok || m != (Member{}) {
			t.Errorf("Snapshot.Owner: got %v, %v, want zero Member, false", m, ok)
		}
		if m := s.PartitionOwner(0); m != (Member{}) {
			t.Errorf("PartitionOwner(0): got %v, want zero Member", m)
		}
		if s.Has("node-0") {
			t.Errorf("Has(node-0): got true, want false")
		}
		if p := s.Partition("k"); p < 0 || p >= 4093 {
			t.Errorf("Partition: got %d, want in [0, 4093)", p)
		}
	}
	check(0)

	if err := r.SetMembers(members("node-%d", 3)); err != nil {
		t.Fatalf("SetMembers: got error %v, want nil", err)
	}
	if err := r.SetMembers(nil); err != nil {
		t.Fatalf("SetMembers(nil): got error %v, want nil", err)
	}
	check(2)

	other := newRing(t, DefaultConfig(), nil)
	if !r.Snapshot().Equal(other.Snapshot()) || r.Snapshot().Digest() != other.Snapshot().Digest() {
		t.Errorf("two empty Snapshots: got not equal, want equal")
	}
}

func TestSetMembersErrorKeepsPrevious(t *testing.T) {
	t.Parallel()
	small := Config{PartitionCount: 7, ReplicationFactor: 10, Load: 1.25}
	tests := []struct {
		name    string
		cfg     Config
		good    []Member
		bad     []Member
		wantMsg string
	}{
		{
			name:    "duplicate name",
			cfg:     DefaultConfig(),
			good:    members("node-%d", 3),
			bad:     append(members("node-%d", 3), Member{Name: "node-1", Addr: "other:1"}),
			wantMsg: `duplicate member name "node-1"`,
		},
		{
			name:    "empty name",
			cfg:     DefaultConfig(),
			good:    members("node-%d", 3),
			bad:     append(members("node-%d", 2), Member{Addr: "x:1"}),
			wantMsg: "empty Name",
		},
		{
			// consistent gives each member floor(7/10) = 0 partitions of room
			// and panics; SetMembers recovers.
			name:    "more members than partitions",
			cfg:     small,
			good:    members("node-%d", 7),
			bad:     members("node-%d", 10),
			wantMsg: "not enough room to distribute partitions",
		},
		{
			// Every virtual node hashes to 0 and points at the last member
			// added, which cannot take all partitions: consistent panics.
			name:    "degenerate hasher",
			cfg:     Config{PartitionCount: 1021, ReplicationFactor: 10, Load: 1.25, Hasher: constHasher{}},
			good:    members("node-%d", 1),
			bad:     members("node-%d", 2),
			wantMsg: "not enough room to distribute partitions",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRing(t, tt.cfg, tt.good)
			prev := r.Snapshot()
			err := r.SetMembers(tt.bad)
			if !errors.Is(err, ErrRebuild) {
				t.Fatalf("SetMembers: got error %v, want one wrapping ErrRebuild", err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q: want it to contain %q", err, tt.wantMsg)
			}
			if got := r.Snapshot(); got != prev {
				t.Errorf("Snapshot after error: got version %d (%p), want the previous %d (%p)",
					got.Version(), got, prev.Version(), prev)
			}
			if _, ok := r.Owner("k"); !ok {
				t.Errorf("Owner after error: got false, want the previous ring to answer")
			}
			// The ring still accepts a valid set afterwards.
			if err := r.SetMembers(tt.good[:1]); err != nil {
				t.Errorf("SetMembers(valid) after error: got %v, want nil", err)
			}
			if got, want := r.Snapshot().Version(), prev.Version()+1; got != want {
				t.Errorf("Version: got %d, want %d", got, want)
			}
		})
	}
}

// TestSameSetSameTable checks the property every node relies on: the table depends
// only on the set of names, not on the order or on which Ring built it.
func TestSameSetSameTable(t *testing.T) {
	t.Parallel()
	sets := map[string][]Member{
		"10 nodes": members("node-%d", 10),
		// "n1"+"11" and "n11"+"1" are the same virtual-node key in consistent,
		// so the member added last wins that point: order must not matter.
		"colliding names": {{Name: "n1"}, {Name: "n11"}, {Name: "n111"}, {Name: "n2"}, {Name: "n21"}},
	}
	rng := rand.New(rand.NewPCG(42, 7))
	for name, set := range sets {
		t.Run(name, func(t *testing.T) {
			want := newRing(t, DefaultConfig(), set).Snapshot()
			if got := want.PartitionCount(); got != 4093 {
				t.Fatalf("PartitionCount: got %d, want 4093", got)
			}
			for trial := range 5 {
				shuffled := slices.Clone(set)
				rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				got := newRing(t, DefaultConfig(), shuffled).Snapshot()
				for p := range 4093 {
					if g, w := got.PartitionOwner(p).Name, want.PartitionOwner(p).Name; g != w {
						t.Fatalf("trial %d, partition %d: got owner %q, want %q", trial, p, g, w)
					}
				}
				if !got.Equal(want) {
					t.Errorf("trial %d: Equal: got false, want true", trial)
				}
				if got.Digest() != want.Digest() {
					t.Errorf("trial %d: Digest: got %#x, want %#x", trial, got.Digest(), want.Digest())
				}
				if !slices.Equal(got.Members(), want.Members()) {
					t.Errorf("trial %d: Members: got %v, want %v", trial, got.Members(), want.Members())
				}
			}
		})
	}
}

func TestSnapshotAccessors(t *testing.T) {
	t.Parallel()
	in := members("node-%d", 5)
	slices.Reverse(in)
	r := newRing(t, DefaultConfig(), in)
	in[0].Name = "mutated" // SetMembers must not retain its argument
	s := r.Snapshot()

	if got := s.Version(); got != 1 {
		t.Errorf("Version: got %d, want 1", got)
	}
	if got := s.Len(); got != 5 {
		t.Errorf("Len: got %d, want 5", got)
	}
	ms := s.Members()
	if !slices.Equal(ms, members("node-%d", 5)) {
		t.Errorf("Members: got %v, want %v", ms, members("node-%d", 5))
	}
	ms[0].Name = "mutated" // Members returns a copy
	if s.Members()[0].Name != "node-0" || !s.Has("node-0") || s.Has("mutated") {
		t.Errorf("Snapshot changed through Members() or SetMembers' argument")
	}
	for _, name := range []string{"node-0", "node-2", "node-4"} {
		if !s.Has(name) {
			t.Errorf("Has(%q): got false, want true", name)
		}
	}
	for _, name := range []string{"", "node-5", "node"} {
		if s.Has(name) {
			t.Errorf("Has(%q): got true, want false", name)
		}
	}

	for i := range 1000 {
		key := fmt.Sprintf("key-%d", i)
		p := s.Partition(key)
		if want := int(xxhash.Sum64String(key) % 4093); p != want {
			t.Fatalf("Partition(%q): got %d, want %d", key, p, want)
		}
		m, ok := s.Owner(key)
		if !ok || m != s.PartitionOwner(p) {
			t.Fatalf("Owner(%q): got %v, %v, want %v, true", key, m, ok, s.PartitionOwner(p))
		}
		if rm, _ := r.Owner(key); rm != m {
			t.Fatalf("Ring.Owner(%q): got %v, want %v", key, rm, m)
		}
	}

	for _, p := range []int{-1, 4093} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("PartitionOwner(%d): got no panic, want a panic", p)
				}
			}()
			s.PartitionOwner(p)
		}()
	}
}

// TestAddrChangeKeepsTable: a restart changes ID (and maybe Addr) but not the name,
// so the table must stay and lookups must return the new details.
func TestAddrChangeKeepsTable(t *testing.T) {
	t.Parallel()
	ms := members("node-%d", 4)
	r := newRing(t, DefaultConfig(), ms)
	before := r.Snapshot()
	ms[2].Addr, ms[2].ID = "10.9.9.9:7000", "id-restarted"
	if err := r.SetMembers(ms); err != nil {
		t.Fatalf("SetMembers: got error %v, want nil", err)
	}
	after := r.Snapshot()
	if got, want := after.Version(), before.Version()+1; got != want {
		t.Errorf("Version: got %d, want %d", got, want)
	}
	if !after.Equal(before) || after.Digest() != before.Digest() {
		t.Errorf("table changed on an Addr/ID change: want the same table")
	}
	for p := range after.PartitionCount() {
		if before.PartitionOwner(p).Name == "node-2" {
			if got := after.PartitionOwner(p); got != ms[2] {
				t.Fatalf("partition %d: got owner %v, want %v", p, got, ms[2])
			}
		}
	}
	if got := before.Members()[2].Addr; got != "node-2:7000" {
		t.Errorf("old Snapshot changed: got Addr %q, want %q", got, "node-2:7000")
	}

	other := newRing(t, DefaultConfig(), members("node-%d", 5)).Snapshot()
	if other.Equal(after) || other.Digest() == after.Digest() {
		t.Errorf("4 and 5 members: got equal tables, want different")
	}
	if other.Equal(nil) {
		t.Errorf("Equal(nil): got true, want false")
	}
}

func TestCustomHasher(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Hasher = fnvHasher{}
	s := newRing(t, cfg, members("node-%d", 3)).Snapshot()
	def := newRing(t, DefaultConfig(), members("node-%d", 3)).Snapshot()
	for i := range 100 {
		key := fmt.Sprintf("key-%d", i)
		if got, want := s.Partition(key), int(fnvHasher{}.Sum64([]byte(key))%4093); got != want {
			t.Fatalf("Partition(%q): got %d, want %d", key, got, want)
		}
	}
	if s.Equal(def) {
		t.Errorf("FNV and xxhash tables: got equal, want different")
	}
}

func TestOwnerAllocs(t *testing.T) {
	r := newRing(t, DefaultConfig(), members("node-%d", 3))
	key := strings.Repeat("k", 64)
	if n := testing.AllocsPerRun(1000, func() { r.Owner(key) }); n != 0 {
		t.Errorf("Ring.Owner: got %v allocs, want 0", n)
	}
	s := r.Snapshot()
	if n := testing.AllocsPerRun(1000, func() { s.Owner(key); s.Partition(key) }); n != 0 {
		t.Errorf("Snapshot.Owner+Partition: got %v allocs, want 0", n)
	}
}

// TestConcurrentOwnerDuringSetMembers runs lookups while the member set flips
// between 3 and 4 members; run with -race.
func TestConcurrentOwnerDuringSetMembers(t *testing.T) {
	t.Parallel()
	three, four := members("node-%d", 3), members("node-%d", 4)
	r := newRing(t, DefaultConfig(), three)

	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 4)
	for g := range 3 {
		wg.Go(func() {
			var last uint64
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				key := fmt.Sprintf("g%d-key-%d", g, i)
				m, ok := r.Owner(key)
				if !ok || !slices.Contains(four, m) {
					errs <- fmt.Errorf("Ring.Owner(%q): got %v, %v, want one of the members", key, m, ok)
					return
				}
				s := r.Snapshot()
				if v := s.Version(); v < last {
					errs <- fmt.Errorf("Version went backwards: got %d after %d", v, last)
					return
				}
				last = s.Version()
				if sm, ok := s.Owner(key); !ok || !s.Has(sm.Name) {
					errs <- fmt.Errorf("Snapshot.Owner(%q): got %v, %v, want a member of that Snapshot", key, sm, ok)
					return
				}
			}
		})
	}
	for i := range 200 {
		set := three
		if i%2 == 0 {
			set = four
		}
		if err := r.SetMembers(set); err != nil {
			t.Errorf("SetMembers: got error %v, want nil", err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := r.Snapshot().Version(); got != 201 {
		t.Errorf("Version: got %d, want 201", got)
	}
}

// TestBalance measures partitions per member at the defaults. Load caps the
// busiest member at ceil(floor(4093/n)*1.02); nothing bounds the least loaded one
// but ReplicationFactor, so max/min depends on the names.
func TestBalance(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	for n := 3; n <= 10; n++ {
		for _, format := range []string{"node-%d", "ringlimit-%d"} {
			s := newRing(t, cfg, members(format, n)).Snapshot()
			count := map[string]int{}
			for p := range s.PartitionCount() {
				count[s.PartitionOwner(p).Name]++
			}
			if len(count) != n {
				t.Errorf("%d members: got %d owning partitions, want all %d", n, len(count), n)
			}
			hi, lo := 0, math.MaxInt
			for _, c := range count {
				hi, lo = max(hi, c), min(lo, c)
			}
			limit := int(math.Ceil(float64(cfg.PartitionCount/n) * cfg.Load))
			ratio := float64(hi) / float64(lo)
			t.Logf("%2d members %-13q: partitions max %d min %d (cap %d, mean %.1f), max/min %.3f",
				n, format, hi, lo, limit, float64(cfg.PartitionCount)/float64(n), ratio)
			if hi > limit {
				t.Errorf("%d members: got max %d partitions, want <= %d", n, hi, limit)
			}
			// BenchmarkBalance measured at most 1.26 over 264 name sets.
			if ratio > 1.3 {
				t.Errorf("%d members %q: got max/min %.3f, want <= 1.3", n, format, ratio)
			}
		}
	}
}

// moved compares the owners of keys "key-0".."key-(n-1)" in two Snapshots and
// returns how many changed owner, and how many of those went to newName.
func moved(before, after *Snapshot, n int, newName string) (changed, toNew int) {
	for i := range n {
		key := fmt.Sprintf("key-%d", i)
		a, _ := before.Owner(key)
		b, _ := after.Owner(key)
		if a.Name != b.Name {
			changed++
			if b.Name == newName {
				toNew++
			}
		}
	}
	return changed, toNew
}

func TestMovementThreeToFour(t *testing.T) {
	t.Parallel()
	const keys = 100_000
	r := newRing(t, DefaultConfig(), members("node-%d", 3))
	before := r.Snapshot()
	if err := r.SetMembers(members("node-%d", 4)); err != nil {
		t.Fatalf("SetMembers: got error %v, want nil", err)
	}
	changed, toNew := moved(before, r.Snapshot(), keys, "node-3")
	frac := float64(changed) / keys
	t.Logf("3->4 members: %d of %d keys moved (%.1f%%), %d to the new member", changed, keys, 100*frac, toNew)
	if frac < 0.15 || frac > 0.35 {
		t.Errorf("moved fraction: got %.3f, want in [0.15, 0.35]", frac)
	}
	// With Load 1.02 the new member lowers every cap, so a few partitions spill
	// between old members (BenchmarkBalance: 1.08x the ideal movement at the
	// median); bound it at 2% of keys.
	if between := changed - toNew; between > keys/50 {
		t.Errorf("keys moved between old members: got %d, want <= %d", between, keys/50)
	}
}

// TestMovementBetweenOldMembersCanHappen pins down a counter-example: with bounded
// loads, adding a member lowers everyone's cap, so a partition can spill from one
// old member to another. Hand-off must compare owners partition by partition
// rather than assume keys only move to the newcomer.
func TestMovementBetweenOldMembersCanHappen(t *testing.T) {
	t.Parallel()
	all := members("10.0.19.%d:7946", 4)
	before := newRing(t, DefaultConfig(), all[:3]).Snapshot()
	after := newRing(t, DefaultConfig(), all).Snapshot()
	changed, toNew := moved(before, after, 100_000, all[3].Name)
	t.Logf("3->4 members %v: %d keys moved, %d of them between old members", all[3].Name, changed, changed-toNew)
	if changed == toNew {
		t.Errorf("keys moved between old members: got 0, want > 0 for this member set")
	}
}

func TestHashLookupsAgreeWithKeyLookups(t *testing.T) {
	t.Parallel()
	r, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetMembers([]Member{{Name: "a"}, {Name: "b"}, {Name: "c"}}); err != nil {
		t.Fatal(err)
	}
	s := r.Snapshot()
	for i := 0; i < 10_000; i++ {
		key := fmt.Sprintf("key-%d", i)
		h := s.Hash(key)
		m1, ok1 := s.Owner(key)
		m2, ok2 := s.OwnerOfHash(h)
		if m1 != m2 || ok1 != ok2 || s.Partition(key) != s.PartitionOfHash(h) {
			t.Fatalf("%s: Owner %v/%v, OwnerOfHash %v/%v; Partition %d, PartitionOfHash %d", key, m1, ok1, m2, ok2, s.Partition(key), s.PartitionOfHash(h))
		}
	}
}

func TestSnapshotOf(t *testing.T) {
	s, err := SnapshotOf(DefaultConfig(), []Member{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}})
	if err != nil || s.Len() != 2 || !s.Has("a") || !s.Has("b") {
		t.Fatalf("SnapshotOf(a, b) = %v members, err %v", s, err)
	}
	r, _ := New(DefaultConfig())
	_ = r.SetMembers([]Member{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}})
	for p := range s.PartitionCount() {
		if s.PartitionOwner(p).Name != r.Snapshot().PartitionOwner(p).Name {
			t.Fatalf("partition %d: SnapshotOf gives %s, New+SetMembers %s", p, s.PartitionOwner(p).Name, r.Snapshot().PartitionOwner(p).Name)
		}
	}
	bad := DefaultConfig()
	bad.PartitionCount = 0
	if _, err := SnapshotOf(bad, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("invalid config: err %v, want ErrInvalidConfig", err)
	}
}
