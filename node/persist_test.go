package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/persist"
	"github.com/ringlimit/ringlimit/node/internal/snapshot"
	"github.com/ringlimit/ringlimit/node/internal/store"
)

// dailyLimits are a quota of one hit per day under each algorithm.
var dailyLimits = []algo.Limit{
	{Kind: algo.SlidingWindowLog, Limit: 1, Period: 24 * time.Hour},
	{Kind: algo.FixedWindow, Limit: 1, Period: 24 * time.Hour},
	{Kind: algo.GCRA, Limit: 1, Period: 24 * time.Hour, Burst: 0},
	{Kind: algo.TokenBucket, Limit: 1, Period: 24 * time.Hour, Burst: 1},
	{Kind: algo.SlidingWindowCounter, Limit: 1, Period: 24 * time.Hour},
	{Kind: algo.BucketedSlidingWindow, Limit: 1, Period: 24 * time.Hour},
}

// startNamed starts one node per name from base, each joining the first's
// gossip address (the first joins nobody), with StateDir dirs[i] when dirs is
// not nil, and waits until they agree on the ring. The nodes after the first
// start concurrently, as the members of a fleet restarted at once do.
func startNamed(t *testing.T, ctx context.Context, base Config, names, dirs []string) []*Node {
	t.Helper()
	nodes := make([]*Node, len(names))
	cfgOf := func(i int) Config {
		cfg := base
		cfg.Name = names[i]
		if dirs != nil {
			cfg.StateDir = dirs[i]
		}
		if i > 0 {
			cfg.Join = []string{nodes[0].GossipAddr()}
		}
		return cfg
	}
	var err error
	if nodes[0], err = New(cfgOf(0)); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i := 1; i < len(names); i++ {
		cfg := cfgOf(i)
		wg.Go(func() { nodes[i], errs[i] = New(cfg) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, n := range nodes {
			if n != nil {
				n.Abort()
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := waitConverged(ctx, nodes...); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "every node ready", func() bool {
		for _, n := range nodes {
			if !n.Ready() {
				return false
			}
		}
		return true
	})
	waitNoStrays(t, nodes)
	return nodes
}

// waitNoStrays waits until no node has handed-off states listed to pass on
// to their owner (a handoff that reached a member whose ring had moved on,
// see strayLoop), and the owner of every key a node holds without owning or
// backing it up (a copy it kept when it passed the state on) holds that key
// too, at two polls 50 ms apart: a state being passed on is in flight
// between two stores for a round trip.
func waitNoStrays(t *testing.T, nodes []*Node) {
	t.Helper()
	clean := 0
	eventually(t, 10*time.Second, "every stray state passed on to its owner", func() bool {
		byName := make(map[string]*Node, len(nodes))
		held := make(map[string]map[uint64]bool, len(nodes))
		for _, n := range nodes {
			byName[n.Name()] = n
			hs := make(map[uint64]bool)
			n.owned.Count(func(h uint64) bool { hs[h] = true; return false })
			held[n.Name()] = hs
		}
		for _, n := range nodes {
			pending := n.strays.Len()
			missing := 0
			rs := n.rs.Load()
			n.owned.Count(func(h uint64) bool {
				if rs.Snap.Len() == 0 || n.changeFrom(rs, rs, nil).Move(h, store.MoveSend) != store.MoveSend {
					return false
				}
				if o, ok := rs.Snap.OwnerOfHash(h); ok && byName[o.Name] != nil && !held[o.Name][h] {
					missing++
				}
				return false
			})
			if pending > 0 || missing > 0 {
				clean = 0
				return false
			}
		}
		if clean++; clean < 2 {
			time.Sleep(50 * time.Millisecond)
			return false
		}
		return true
	})
}

// closeAll closes every node at once, as a whole-fleet stop does.
func closeAll(t *testing.T, nodes []*Node) {
	t.Helper()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = n.Close() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s Close: got %v, want nil", nodes[i].Name(), err)
		}
	}
}

// fullRestart uses up a one-per-day quota of keys under every algorithm
// through various members of a 3-node cluster, closes all three at once,
// starts them again under the same names (and, with persist, the same
// StateDirs), and returns how many keys the restarted cluster admits again,
// out of how many.
func fullRestart(t *testing.T, persist bool) (readmitted, keys int, nodes []*Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := testConfig()
	names := []string{"node-0", "node-1", "node-2"}
	var dirs []string
	if persist {
		dirs = []string{t.TempDir(), t.TempDir(), t.TempDir()}
	}
	first := startNamed(t, ctx, base, names, dirs)
	type used struct {
		key string
		l   algo.Limit
	}
	var all []used
	for i := range 20 {
		for _, l := range dailyLimits {
			all = append(all, used{fmt.Sprintf("user-%d/%v", i, l.Kind), l})
		}
	}
	for i, u := range all {
		d, err := first[i%3].Allow(ctx, u.key, u.l)
		if err != nil || !d.Allowed {
			t.Fatalf("%s first hit through %s: got %+v, %v; want allowed", u.key, first[i%3].Name(), d, err)
		}
		if d, err := first[(i+1)%3].Allow(ctx, u.key, u.l); err != nil || d.Allowed {
			t.Fatalf("%s second hit through %s: got %+v, %v; want denied", u.key, first[(i+1)%3].Name(), d, err)
		}
	}
	closeAll(t, first)

	again := startNamed(t, ctx, base, names, dirs)
	for i, u := range all {
		n := again[(i+2)%3]
		d, err := n.Allow(ctx, u.key, u.l)
		if err != nil {
			t.Fatalf("%s through %s after the restart: %v", u.key, n.Name(), err)
		}
		if d.Allowed {
			readmitted++
			if persist {
				owner, _ := n.Owner(u.key)
				t.Errorf("%s admitted again after the restart (through %s, owner %s, route %v)", u.key, n.Name(), owner.Name, d.Route)
			}
		}
	}
	return readmitted, len(all), again
}

// TestFullRestartKeepsQuota: with StateDir, a cluster whose members all stop
// at once and start again admits none of the keys whose daily quota was used
// up before, under any algorithm.
func TestFullRestartKeepsQuota(t *testing.T) {
	t.Parallel()
	readmitted, keys, nodes := fullRestart(t, true)
	if readmitted != 0 {
		t.Errorf("keys admitted again after a full restart: got %d of %d, want 0", readmitted, keys)
	}
	restored := uint64(0)
	for _, n := range nodes {
		s := n.Stats()
		restored += s.RestoredStates
		// Replicas sent while the members' rings disagreed during the
		// restart are asked for again, not refused.
		if s.RefusedStates != 0 {
			t.Errorf("%s: refused states: got %d, want 0", n.Name(), s.RefusedStates)
		}
		if s.SnapshotFailures != 0 {
			t.Errorf("%s: snapshot failures: got %d, want 0", n.Name(), s.SnapshotFailures)
		}
	}
	// Every key is saved by its owner and its backup.
	if restored < uint64(keys) {
		t.Errorf("states restored: got %d, want at least %d", restored, keys)
	}
}

// TestFullRestartWithoutStateDir is the control: without StateDir the same
// restart forgets every quota, which is what StateDir is for.
func TestFullRestartWithoutStateDir(t *testing.T) {
	t.Parallel()
	readmitted, keys, _ := fullRestart(t, false)
	if readmitted != keys {
		t.Errorf("keys admitted again after a full restart without StateDir: got %d of %d, want all", readmitted, keys)
	}
}

// singleNode starts a node named "solo" alone with StateDir dir.
func singleNode(t *testing.T, base Config, dir string) *Node {
	t.Helper()
	cfg := base
	cfg.Name = "solo"
	cfg.StateDir = dir
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Abort() })
	return n
}

// useDaily uses up one key per algorithm on n and returns their names.
func useDaily(t *testing.T, n *Node) []string {
	t.Helper()
	var keys []string
	for _, l := range dailyLimits {
		k := "k/" + l.Kind.String()
		if d, err := n.Allow(context.Background(), k, l); err != nil || !d.Allowed {
			t.Fatalf("%s: got %+v, %v; want allowed", k, d, err)
		}
		keys = append(keys, k)
	}
	return keys
}

// TestSnapshotRefused: a torn snapshot, one altered, one of another cluster
// and a file that is no snapshot are refused, logged and counted, moved aside,
// and the node starts empty; a node whose Close wrote a snapshot restores it.
func TestSnapshotRefused(t *testing.T) {
	t.Parallel()
	base := testConfig()
	dir := t.TempDir()
	n := singleNode(t, base, dir)
	keys := useDaily(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	path := persist.FileName(dir, "solo")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no snapshot after Close: %v", err)
	}
	if _, recs, err := snapshot.Check(good); err != nil || recs != uint64(len(keys)) {
		t.Fatalf("snapshot after Close: got %d records, %v; want %d, nil", recs, err, len(keys))
	}

	altered := bytes.Clone(good)
	altered[len(altered)/2] ^= 1
	otherCluster := base
	otherCluster.ClusterLabel = "another"
	for _, tc := range []struct {
		name string
		file []byte
		cfg  Config
	}{
		{"torn", good[:len(good)-7], base},
		{"altered", altered, base},
		{"foreign", []byte("name,count\nalice,1\n"), base},
		{"empty", nil, base},
		{"other cluster", good, otherCluster},
	} {
		if err := os.WriteFile(path, tc.file, 0o600); err != nil {
			t.Fatal(err)
		}
		m := singleNode(t, tc.cfg, dir)
		s := m.Stats()
		if s.SnapshotFailures != 1 || s.RestoredStates != 0 || s.Keys != 0 {
			t.Errorf("%s: got failures %d, restored %d, keys %d; want 1, 0, 0", tc.name, s.SnapshotFailures, s.RestoredStates, s.Keys)
		}
		if _, err := os.Stat(path + ".refused"); err != nil {
			t.Errorf("%s: the refused file was not moved aside: %v", tc.name, err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the refused file is still in place: %v", tc.name, err)
		}
		m.Abort()
		os.Remove(path) // Abort wrote an empty snapshot
	}

	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	m := singleNode(t, base, dir)
	if s := m.Stats(); s.RestoredStates != uint64(len(keys)) || s.SnapshotFailures != 0 {
		t.Errorf("good snapshot: got restored %d, failures %d; want %d, 0", s.RestoredStates, s.SnapshotFailures, len(keys))
	}
	for i, k := range keys {
		if d, err := m.Allow(context.Background(), k, dailyLimits[i]); err != nil || d.Allowed {
			t.Errorf("%s after the restore: got %+v, %v; want denied", k, d, err)
		}
	}
}

// TestSnapshotJudgedAsHandoff: restored states are judged by this node's own
// bounds, as a peer's handoff is: a state under a Period above MaxPeriod is
// refused (Stats.RefusedStates), the others are restored, and MaxKeys bounds
// the new keys.
func TestSnapshotJudgedAsHandoff(t *testing.T) {
	t.Parallel()
	base := testConfig()
	dir := t.TempDir()
	n := singleNode(t, base, dir)
	ctx := context.Background()
	hour := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	for i := range 5 {
		if _, err := n.Allow(ctx, fmt.Sprintf("hourly-%d", i), hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Allow(ctx, "daily", dailyLimits[2]); err != nil {
		t.Fatal(err)
	}
	if err := n.Abort(); err != nil { // Abort writes the snapshot too
		t.Fatal(err)
	}

	tight := base
	tight.MaxPeriod = 2 * time.Hour
	m := singleNode(t, tight, dir)
	if s := m.Stats(); s.RefusedStates != 1 || s.RestoredStates != 5 || s.Keys != 5 {
		t.Errorf("MaxPeriod 2h: got refused %d, restored %d, keys %d; want 1, 5, 5", s.RefusedStates, s.RestoredStates, s.Keys)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	small := base
	small.MaxKeys = 3
	k := singleNode(t, small, dir)
	if s := k.Stats(); s.Keys != 3 {
		t.Errorf("MaxKeys 3: got %d keys, want 3", s.Keys)
	}
}

// TestSnapshotPeriodic: a node writes its snapshot every SnapshotInterval,
// and one that crashes (no Close, no Abort) restores the last one.
func TestSnapshotPeriodic(t *testing.T) {
	t.Parallel()
	base := testConfig()
	base.SnapshotInterval = 50 * time.Millisecond
	dir := t.TempDir()
	n := singleNode(t, base, dir)
	keys := useDaily(t, n)
	path := persist.FileName(dir, "solo")
	eventually(t, 10*time.Second, "a periodic snapshot holding every key", func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		_, recs, err := snapshot.Check(b)
		return err == nil && recs == uint64(len(keys))
	})
	// A copy of the file as a crash would leave it, restored by a second
	// node (the first keeps running: its later writes would race the copy).
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dir2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir2, filepath.Base(path)), b, 0o600); err != nil {
		t.Fatal(err)
	}
	crashed := base
	crashed.SnapshotInterval = 0
	m := singleNode(t, crashed, dir2)
	if s := m.Stats(); s.RestoredStates != uint64(len(keys)) {
		t.Errorf("restored: got %d, want %d", s.RestoredStates, len(keys))
	}
	if s := n.Stats(); s.SnapshotWrites == 0 || s.SnapshotFailures != 0 {
		t.Errorf("writer: got writes %d, failures %d; want > 0, 0", s.SnapshotWrites, s.SnapshotFailures)
	}
}

// TestStateDirConfig: a negative SnapshotInterval and a StateDir where no
// file can be created are ErrInvalidConfig.
func TestStateDirConfig(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Name = "x"
	cfg.StateDir = t.TempDir()
	cfg.SnapshotInterval = -time.Second
	if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("SnapshotInterval -1s: got %v, want ErrInvalidConfig", err)
	}
	cfg.SnapshotInterval = time.Second
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = file
	if n, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
		if n != nil {
			n.Abort()
		}
		t.Errorf("StateDir a file: got %v, want ErrInvalidConfig", err)
	}
}

// TestRestoreMovesStatesToOwners: the saved states of a 3-member cluster,
// restored by a 4-member cluster whose members have other names (so every
// key has another owner, and one member restores nothing), reach each key's
// new owner through the handoffs of the restart: no key is admitted again.
func TestRestoreMovesStatesToOwners(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := testConfig()
	var logBuf syncBuf
	base.Logger = slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defer func() {
		if t.Failed() {
			t.Log(logBuf.String())
		}
	}()
	old := []string{"node-0", "node-1", "node-2"}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	first := startNamed(t, ctx, base, old, dirs)
	var keys []string
	for i := range 30 {
		l := dailyLimits[i%len(dailyLimits)]
		k := fmt.Sprintf("user-%d", i)
		if d, err := first[i%3].Allow(ctx, k, l); err != nil || !d.Allowed {
			t.Fatalf("%s: got %+v, %v; want allowed", k, d, err)
		}
		keys = append(keys, k)
	}
	closeAll(t, first)

	names := []string{"m-0", "m-1", "m-2", "m-3"}
	newDirs := []string{t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()}
	for i := range old {
		b, err := os.ReadFile(persist.FileName(dirs[i], old[i]))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(persist.FileName(newDirs[i], names[i]), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	again := startNamed(t, ctx, base, names, newDirs)
	moved := 0
	for i, k := range keys {
		n := again[i%4]
		owner, _ := n.Owner(k)
		if owner.Name != "m-0" {
			moved++
		}
		d, err := n.Allow(ctx, k, dailyLimits[i%len(dailyLimits)])
		if err != nil || d.Allowed {
			t.Errorf("%s through %s (owner %s) after the restart: got %+v, %v; want denied", k, n.Name(), owner.Name, d, err)
			for _, m := range again {
				t.Logf("%s holds %d strays", m.Name(), strays(m))
			}

		}
	}
	if moved == 0 {
		t.Errorf("no key is owned by a member other than the first: the handoff was not exercised")
	}
}

// TestRestoreAloneThenMerge: after a full stop, two members start alone
// (neither can reach a seed) and decide on what they restored, then a third
// joins both and the three form one cluster: every key's state is at its
// owner, none is admitted again.
func TestRestoreAloneThenMerge(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := testConfig()
	names := []string{"node-0", "node-1", "node-2"}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	first := startNamed(t, ctx, base, names, dirs)
	var keys []string
	for i := range 60 {
		k := fmt.Sprintf("user-%d", i)
		if d, err := first[i%3].Allow(ctx, k, dailyLimits[i%len(dailyLimits)]); err != nil || !d.Allowed {
			t.Fatalf("%s: got %+v, %v; want allowed", k, d, err)
		}
		keys = append(keys, k)
	}
	closeAll(t, first)

	var again []*Node
	t.Cleanup(func() {
		for _, n := range again {
			n.Abort()
		}
	})
	for i, name := range names {
		cfg := base
		cfg.Name, cfg.StateDir = name, dirs[i]
		if i == 2 {
			cfg.Join = []string{again[0].GossipAddr(), again[1].GossipAddr()}
		}
		n, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		again = append(again, n)
	}
	if err := waitConverged(ctx, again...); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "every node ready", func() bool {
		return again[0].Ready() && again[1].Ready() && again[2].Ready()
	})
	waitNoStrays(t, again)
	for i, k := range keys {
		n := again[(i+1)%3]
		d, err := n.Allow(ctx, k, dailyLimits[i%len(dailyLimits)])
		if err != nil || d.Allowed {
			owner, _ := n.Owner(k)
			t.Errorf("%s through %s (owner %s) after the merge: got %+v, %v; want denied", k, n.Name(), owner.Name, d, err)
		}
	}
}

// TestRestoredStatesGateJoiner: a member restarts alone with its snapshot and
// owns every key; a member with no saved state joins it, and checks through
// the joiner right after its New returns are not decided on an empty state:
// the joiner holds the partitions it gains until the restored member's
// handoff arrives (the gate of a ring change), so every key stays denied.
func TestRestoredStatesGateJoiner(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := testConfig()
	dir := t.TempDir()
	solo := singleNode(t, base, dir)
	var keys []string
	for i := range 60 {
		k := fmt.Sprintf("user-%d", i)
		if d, err := solo.Allow(ctx, k, dailyLimits[i%len(dailyLimits)]); err != nil || !d.Allowed {
			t.Fatalf("%s: got %+v, %v; want allowed", k, d, err)
		}
		keys = append(keys, k)
	}
	if err := solo.Close(); err != nil {
		t.Fatal(err)
	}
	restored := singleNode(t, base, dir)
	cfg := base
	cfg.Name = "joiner"
	cfg.Join = []string{restored.GossipAddr()}
	joiner, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer joiner.Abort()
	owned := 0
	for i, k := range keys {
		if o, _ := joiner.Owner(k); o.Name == "joiner" {
			owned++
		}
		if d, err := joiner.Allow(ctx, k, dailyLimits[i%len(dailyLimits)]); err != nil || d.Allowed {
			o, _ := joiner.Owner(k)
			t.Errorf("%s through the joiner (owner %s): got %+v, %v; want denied", k, o.Name, d, err)
		}
	}
	if owned == 0 {
		t.Errorf("the joiner owns none of the %d keys: the gate was not exercised", len(keys))
	}
}

// TestSnapshotKeepsBans: a key banned under a penalty stays banned after a
// restart from the snapshot, even for a check whose own limit would pass.
func TestSnapshotKeepsBans(t *testing.T) {
	t.Parallel()
	base := testConfig()
	dir := t.TempDir()
	n := singleNode(t, base, dir)
	ctx := context.Background()
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 1, Period: time.Minute}
	p := Penalty{Denials: 2, Within: time.Minute, Ban: time.Hour}
	var d Decision
	var err error
	for range 3 {
		if d, err = n.AllowPenalized(ctx, "abuser", l, 1, p); err != nil {
			t.Fatal(err)
		}
	}
	if !d.Banned {
		t.Fatalf("third hit: got %+v, want banned", d)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	m := singleNode(t, base, dir)
	loose := algo.Limit{Kind: algo.GCRA, Limit: 1000, Period: time.Second, Burst: 1000}
	if d, err := m.AllowPenalized(ctx, "abuser", loose, 1, p); err != nil || d.Allowed || !d.Banned || d.RetryAfter < 59*time.Minute {
		t.Errorf("after the restart: got %+v, %v; want banned for about an hour", d, err)
	}
}

// strays counts the states n holds of keys it neither owns nor backs up in
// its current ring.
func strays(n *Node) int {
	rs := n.rs.Load()
	return n.owned.Count(func(h uint64) bool {
		return rs.Snap.Len() > 0 && n.changeFrom(rs, rs, nil).Move(h, store.MoveSend) == store.MoveSend
	})
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFullRestartFleet is TestFullRestartKeepsQuota at fleet size: 10
// members (peer traffic on the in-memory network) stop at once and start
// again, nine of them together, and no used quota is handed out again.
func TestFullRestartFleet(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	base := testConfig()
	base.peerNet = newMemNet()
	var names, dirs []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("member-%02d", i))
		dirs = append(dirs, t.TempDir())
	}
	first := startNamed(t, ctx, base, names, dirs)
	var keys []string
	for i := range 300 {
		k := fmt.Sprintf("user-%d", i)
		if d, err := first[i%10].Allow(ctx, k, dailyLimits[i%len(dailyLimits)]); err != nil || !d.Allowed {
			t.Fatalf("%s: got %+v, %v; want allowed", k, d, err)
		}
		keys = append(keys, k)
	}
	closeAll(t, first)

	base.peerNet = newMemNet()
	again := startNamed(t, ctx, base, names, dirs)
	readmitted := 0
	for i, k := range keys {
		n := again[(i+3)%10]
		d, err := n.Allow(ctx, k, dailyLimits[i%len(dailyLimits)])
		if err != nil {
			t.Fatalf("%s through %s: %v", k, n.Name(), err)
		}
		if d.Allowed {
			readmitted++
			owner, _ := n.Owner(k)
			t.Errorf("%s admitted again after the restart (through %s, owner %s, route %v)", k, n.Name(), owner.Name, d.Route)
		}
	}
	if readmitted > 0 {
		t.Errorf("keys admitted again after a full restart of 10 members: got %d of %d, want 0", readmitted, len(keys))
	}
}
