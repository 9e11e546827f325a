package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/transport"
)

// keysWith returns n keys that owner owns and backup backs up in in's ring,
// none of them in skip.
func keysWith(t *testing.T, in, owner, backup *Node, n int, skip string) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n && i < 1_000_000; i++ {
		k := fmt.Sprintf("other-%d", i)
		o, ok1 := in.Owner(k)
		b, ok2 := in.Backup(k)
		if k != skip && ok1 && ok2 && o.Name == owner.Name() && b.Name == backup.Name() {
			out = append(out, k)
		}
	}
	if len(out) < n {
		t.Fatalf("only %d keys owned by %s with backup %s", len(out), owner.Name(), backup.Name())
	}
	return out
}

// The limit-change poisoning: a live key whose limit changes from 100/day to
// 10/min (the state its earlier, longer limit left denies it under the new
// one) and back, and to 10/min again, then its backup restarts (the owner
// sends every key to the new backup, then back) and its owner crashes. Every
// other key of that owner keeps its replicated state: none admits again after
// the crash. No state is refused anywhere, and no log line repeats within a
// second. (Before, the owner sent the key's state under its latest limit, the
// backup found it implausible and refused the whole batch, and the owner
// resent it forever, with every other key's.)
func TestLimitChangeKeepsReplicationFlowing(t *testing.T) {
	t.Parallel()
	lb := &logBuffer{}
	_, nodes, base := memClusterBase(t, 3, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	owner, backup, other := nodes[0], nodes[1], nodes[2]
	ctx := context.Background()
	daily := algo.Limit{Kind: algo.GCRA, Limit: 100, Period: 24 * time.Hour, Burst: 9}
	perMin := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Minute, Burst: 9}
	poisoned := keyWith(t, owner, owner, backup)
	step := func(l algo.Limit, want bool) {
		t.Helper()
		d, err := owner.Allow(ctx, poisoned, l)
		if err != nil || d.Allowed != want {
			t.Fatalf("%s under %v per %v: got %+v, %v; want allowed %v", poisoned, l.Limit, l.Period, d, err, want)
		}
	}
	step(daily, true)   // TAT 864 s ahead
	step(perMin, false) // owes 804 s more than 10/min allows
	step(daily, true)
	step(perMin, false)

	// The backup restarts: the owner sends its keys to the member that
	// backs them up meanwhile, then to the restarted one.
	name := backup.Name()
	if err := backup.Close(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := waitConverged(wctx, owner, other); err != nil {
		t.Fatal(err)
	}
	cfg := base
	cfg.Name = name
	cfg.Join = []string{owner.GossipAddr()}
	restarted, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restarted.Abort() })
	if err := waitConverged(wctx, owner, other, restarted); err != nil {
		t.Fatal(err)
	}

	// Every other key of the owner that the restarted node backs up takes
	// all it may, and reaches its backup.
	l := algo.Limit{Kind: algo.TokenBucket, Limit: 5, Period: 24 * time.Hour, Burst: 5}
	keys := keysWith(t, owner, owner, restarted, 20, poisoned)
	for _, k := range keys {
		if d, err := owner.AllowN(ctx, k, l, 5); err != nil || !d.Allowed {
			t.Fatalf("%s: got %+v, %v; want admitted", k, d, err)
		}
	}
	for _, k := range keys {
		waitReplica(t, restarted, k, l, 0)
	}
	// The poisoned key's replica is the owner's state.
	if got, want := replica(t, restarted, poisoned, daily).Remaining, replica(t, owner, poisoned, daily).Remaining; got != want {
		t.Errorf("replica of %s: %d remaining, owner %d", poisoned, got, want)
	}

	owner.Abort()
	eventually(t, 10*time.Second, "the crash is seen", func() bool {
		o, ok := other.Owner(keys[0])
		return ok && o.Name == restarted.Name()
	})
	readmitted := 0
	for _, k := range keys {
		d, err := other.Allow(ctx, k, l)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			readmitted++
		}
	}
	if readmitted != 0 {
		t.Errorf("after the owner's crash %d of %d keys admitted again, want 0", readmitted, len(keys))
	}
	for _, n := range []*Node{other, restarted} {
		if got := n.Stats().RefusedStates; got != 0 {
			t.Errorf("%s refused %d states, want 0", n.Name(), got)
		}
	}
	assertNoRepeatWithinSecond(t, lb.String())
}

// assertNoRepeatWithinSecond fails if one WARN or ERROR message of one node
// appears twice within a second in log (slog's text format).
func assertNoRepeatWithinSecond(t *testing.T, log string) {
	t.Helper()
	re := regexp.MustCompile(`^time=(\S+) level=(?:WARN|ERROR) msg=("(?:[^"\\]|\\.)*"|\S+).* node=(\S+)`)
	last := map[string]time.Time{}
	for _, line := range strings.Split(log, "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		k := m[3] + " " + m[2]
		if prev, ok := last[k]; ok && at.Sub(prev) < time.Second {
			t.Errorf("log line repeated within %v: %s", at.Sub(prev), line)
			return
		}
		last[k] = at
	}
}

// gcraState is the encoded state of a GCRA key after hits at now under l.
func gcraState(t *testing.T, now int64, l algo.Limit, hits int64) []byte {
	t.Helper()
	var st algo.State
	if _, err := st.Take(now, hits, l); err != nil {
		t.Fatal(err)
	}
	b, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A Transfer is judged per state and by this node's maxima: a state made
// plausible by a lying limit (1 per 100 years) for a key whose real limit is
// 10/min is refused (its Period is above MaxPeriod) and the key is not locked,
// while the other state of the same batch is installed; a lie within
// MaxPeriod holds the key no longer than MaxPeriod; a check above the maxima
// is refused.
func TestTransferLyingLimit(t *testing.T) {
	t.Parallel()
	m := &secMetrics{}
	_, nodes, ca := secureCluster(t, 2, m, nil)
	n := nodes[0]
	victim := keyOwnedBy(t, n, n)
	ctx := context.Background()
	real := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Minute}
	century := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: 100 * 365 * 24 * time.Hour}
	daily := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: 24 * time.Hour, Burst: 9}
	member := memberPool(t, ca, "node-1", false) // a member's certificate
	now := time.Now().UnixNano()
	err := member.Handoff(ctx, n.PeerAddr(), transport.TransferBatch{From: "node-1", States: []transport.KeyState{
		{Key: victim, Limit: century, State: gcraState(t, now, century, 1), LastNow: now},
		{Key: "bystander", Limit: daily, State: gcraState(t, now, daily, 4), LastNow: now},
	}})
	if err != nil {
		t.Fatalf("Transfer: %v; want the lying state refused alone", err)
	}
	if got := m.count("state"); got != 1 {
		t.Errorf("PeerRefused(state) = %d, want 1", got)
	}
	if d, err := n.Allow(ctx, victim, real); err != nil || !d.Allowed {
		t.Errorf("victim under its real limit after the lying Transfer: %+v, %v; want allowed", d, err)
	}
	if d := replica(t, n, "bystander", daily); d.Remaining != 6 {
		t.Errorf("bystander: %d remaining, want 6 (its state of the same batch installed)", d.Remaining)
	}
	if _, err := n.Allow(ctx, "k", century); !errors.Is(err, ErrLimitAboveMax) || Classify(err) != ClassInvalid {
		t.Errorf("a check at 1 per 100 years: got %v, want ErrLimitAboveMax", err)
	}

	// A lie within the maxima: at most MaxPeriod.
	short := testNode(t, func(c *Config) { c.MaxPeriod = 31 * 24 * time.Hour })
	month := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: 30 * 24 * time.Hour}
	now = short.clock()
	if err := (peerService{short}).Transfer(ctx, transport.TransferBatch{From: "solo", Sender: "solo", States: []transport.KeyState{
		{Key: "victim", Limit: month, State: gcraState(t, now, month, 1), LastNow: now},
		{Key: "victim2", Limit: century, State: gcraState(t, now, century, 1), LastNow: now},
	}}); err != nil {
		t.Fatal(err)
	}
	d, err := short.Allow(ctx, "victim", real)
	if err != nil || d.Allowed || d.RetryAfter > short.cfg.MaxPeriod {
		t.Errorf("victim after a lie of 1 per 30 days: %+v, %v; want denied for at most MaxPeriod", d, err)
	}
	if d, err := short.Allow(ctx, "victim2", real); err != nil || !d.Allowed {
		t.Errorf("victim2 after a lie above MaxPeriod: %+v, %v; want allowed", d, err)
	}
	if got := short.Stats().RefusedStates; got != 1 {
		t.Errorf("RefusedStates = %d, want 1", got)
	}
	big := testNode(t, func(c *Config) { c.MaxLimit = 1000 })
	for _, l := range []algo.Limit{
		{Kind: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 1001},
		{Kind: algo.FixedWindow, Limit: 1001, Period: time.Hour},
	} {
		if _, err := big.Allow(ctx, "k", l); !errors.Is(err, ErrLimitAboveMax) {
			t.Errorf("%+v under MaxLimit 1000: got %v, want ErrLimitAboveMax", l, err)
		}
	}
}

// Replicas come only from the key's owner in the receiver's ring: a replica
// of a key the receiver owns is never installed, and is asked for again as
// any the rings disagree on, not counted as refused (members see many while
// a large fleet's rings differ); one from a sender that is not the key's
// owner is not installed (it is asked for again, whole, from the owner); the
// owner's own replica is installed.
func TestReplicaOnlyFromOwner(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 3, nil)
	x, y, z := nodes[0], nodes[1], nodes[2]
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: 24 * time.Hour, Burst: 9}
	now := x.clock()
	st := gcraState(t, now, l, 10) // denies the key for a day
	send := func(to, from *Node, key string) []uint64 {
		t.Helper()
		need, err := peerService{to}.Replicate(ctx, transport.TransferBatch{From: from.Name(), Sender: from.Name(), Replica: true,
			States: []transport.KeyState{{KeyHash: to.owned.Hash(key), Limit: l, State: st, LastNow: now}}})
		if err != nil {
			t.Fatal(err)
		}
		return need
	}
	owned := keyOwnedBy(t, x, x)
	// Not installed, but asked for again whole: the rings may disagree for
	// a moment after a restart, and the sender drops the key from its sends
	// once its own ring agrees that it is not the owner.
	if need := send(x, y, owned); len(need) != 1 {
		t.Errorf("a replica of a key the receiver owns: needFull %v, want it asked again", need)
	}
	if got := x.Stats().RefusedStates; got != 0 {
		t.Errorf("RefusedStates = %d, want 0 (the rings disagree: not a refusal)", got)
	}
	if d, err := x.Allow(ctx, owned, l); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Errorf("the owned key after a forged replica: %+v, %v; want allowed with 9 remaining", d, err)
	}
	backedUp := keyWith(t, x, y, x) // owned by y, backed up by x
	if need := send(x, z, backedUp); len(need) != 1 {
		t.Errorf("a replica from a member that does not own the key: needFull %v, want it asked again", need)
	}
	if d := replica(t, x, backedUp, l); d.Remaining != 10 {
		t.Errorf("a replica from a non-owner was installed: %d remaining, want 10", d.Remaining)
	}
	if need := send(x, y, backedUp); len(need) != 0 {
		t.Errorf("the owner's replica: needFull %v, want none", need)
	}
	if d := replica(t, x, backedUp, l); d.Remaining != 0 {
		t.Errorf("the owner's replica: %d remaining, want 0", d.Remaining)
	}
}

// A check sent as_backup with a created_at a year ahead is refused by a node
// that does not accept caller timestamps, whether it owns the key or is its
// backup deciding on its replica (the owner unreachable from it): the key is
// not moved a year ahead.
func TestAsBackupCreatedAtRefused(t *testing.T) {
	t.Parallel()
	mn, nodes := memCluster(t, 3, nil)
	owner, backup := nodes[0], nodes[1]
	ctx := context.Background()
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 1, Period: time.Hour}
	yearAhead := owner.clock() + int64(365*24*time.Hour)
	keys := keysWith(t, owner, owner, backup, 2, "")
	for i, tc := range []struct {
		name string
		to   *Node
	}{{"owner", owner}, {"backup", backup}} {
		key := keys[i]
		mn.setCut(backup, owner, tc.to == backup)
		out := make([]transport.Result, 1)
		peerService{tc.to}.Forward(ctx, []transport.Check{{Key: key, Limit: l, Hits: 1, CreatedAt: yearAhead, AsBackup: true}}, out)
		if out[0].Code != transport.CodeInvalidArgument {
			t.Errorf("%s: as_backup with created_at a year ahead: got %+v, want CodeInvalidArgument", tc.name, out[0])
		}
		mn.setCut(backup, owner, false)
		if d, err := nodes[2].Allow(ctx, key, l); err != nil || !d.Allowed {
			t.Errorf("%s: the key after the forged check: %+v, %v; want allowed", tc.name, d, err)
		}
	}
}

// Installed states count against MaxKeys: 300 Transfers of 100 new keys each
// (every one denied for an hour: none idle) leave the node at its bound.
func TestTransfersBoundedByMaxKeys(t *testing.T) {
	t.Parallel()
	evicted := &secMetrics{}
	n := testNode(t, func(c *Config) { c.MaxKeys = 2_000; c.Metrics = evicted })
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	now := n.clock()
	st := gcraState(t, now, l, 1)
	for i := range 300 {
		b := transport.TransferBatch{From: "solo", Sender: "solo", States: make([]transport.KeyState, 100)}
		for j := range b.States {
			b.States[j] = transport.KeyState{Key: fmt.Sprintf("t%d-%d", i, j), Limit: l, State: st, LastNow: now}
		}
		if err := (peerService{n}).Transfer(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.Stats().Keys; got > n.cfg.MaxKeys {
		t.Errorf("after 300 Transfers of 100 keys: %d keys, MaxKeys %d", got, n.cfg.MaxKeys)
	}
	if got := evicted.evictions("refused"); got != 30_000-n.cfg.MaxKeys {
		t.Errorf("Eviction(refused) = %d, want %d", got, 30_000-n.cfg.MaxKeys)
	}
}

// A GCRA or TokenBucket burst that takes longer than MaxPeriod to drain is
// refused as input (field "burst", the largest allowed burst named) on every
// path: a client's check, a peer's forwarded check, a handed-off state and a
// replica; bursts that drain within MaxPeriod pass.
func TestBurstLongerThanMaxPeriodRefused(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	n := testNode(t, func(c *Config) { c.MaxPeriod = 31 * day })
	ctx := context.Background()
	for _, tc := range []struct {
		l    algo.Limit
		most string // "" allowed, else the largest burst the error names
	}{
		{algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Minute, Burst: 100}, ""},
		{algo.Limit{Kind: algo.GCRA, Limit: 1, Period: 15 * day, Burst: 1}, ""},           // tau 30 days
		{algo.Limit{Kind: algo.GCRA, Limit: 1, Period: 30 * day, Burst: 1}, "0"},          // tau 60 days
		{algo.Limit{Kind: algo.GCRA, Limit: 2, Period: day, Burst: 61}, ""},               // tau 31 days
		{algo.Limit{Kind: algo.GCRA, Limit: 2, Period: day, Burst: 62}, "61"},             // tau 31.5 days
		{algo.Limit{Kind: algo.TokenBucket, Limit: 1, Period: day, Burst: 31}, ""},        // refill 31 days
		{algo.Limit{Kind: algo.TokenBucket, Limit: 1, Period: day, Burst: 32}, "31"},      // refill 32 days
		{algo.Limit{Kind: algo.TokenBucket, Limit: 3, Period: 30 * day, Burst: 4}, "3"},   // refill 40 days
		{algo.Limit{Kind: algo.FixedWindow, Limit: 1, Period: 30 * day, Burst: 1000}, ""}, // windows ignore Burst
	} {
		_, err := n.Allow(ctx, "client", tc.l)
		var ie *InputError
		switch {
		case tc.most == "" && err != nil:
			t.Errorf("client check under %+v: got %v, want allowed", tc.l, err)
		case tc.most != "" && (!errors.As(err, &ie) || ie.Field != "burst" || !errors.Is(err, ErrLimitAboveMax) || Classify(err) != ClassInvalid ||
			!strings.HasPrefix(ie.Allowed, "must be at most "+tc.most+" at limit") || !strings.Contains(ie.Allowed, "MaxPeriod, 744h0m0s")):
			t.Errorf("client check under %+v: got %v, want field burst refused with at most %s", tc.l, err, tc.most)
		}
		out := make([]transport.Result, 1)
		(peerService{n}).Forward(ctx, []transport.Check{{Key: "fwd", Limit: tc.l, Hits: 1}}, out)
		if want := tc.most != ""; (out[0].Code == transport.CodeInvalidArgument) != want || want && !strings.Contains(out[0].Message, "field burst") {
			t.Errorf("forwarded check under %+v: got %v %q, want refused %v", tc.l, out[0].Code, out[0].Message, want)
		}
	}

	long := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: 30 * day, Burst: 1}
	fine := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: 15 * day, Burst: 1}
	now := n.clock()
	batch := transport.TransferBatch{From: "solo", Sender: "solo", States: []transport.KeyState{
		{Key: "held-long", Limit: long, State: gcraState(t, now, long, 2), LastNow: now},
		{Key: "held-fine", Limit: fine, State: gcraState(t, now, fine, 2), LastNow: now},
	}}
	if err := (peerService{n}).Transfer(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if got := n.Stats().RefusedStates; got != 1 {
		t.Errorf("RefusedStates after a handoff: got %d, want 1 (the long burst's state)", got)
	}
	if d, err := n.Allow(ctx, "held-long", algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Minute}); err != nil || !d.Allowed {
		t.Errorf("held-long after the handoff: %+v, %v; want allowed (its state refused)", d, err)
	}
	if d := replica(t, n, "held-fine", fine); d.Remaining != 0 {
		t.Errorf("held-fine after the handoff: %d remaining, want 0 (its state installed)", d.Remaining)
	}

	// A replica batch is judged by the same rule: the long burst's state is
	// refused as implausible, so not asked for again, while the other one is
	// not installed only because this node owns its key, and asked for whole.
	batch.Replica = true
	again, err := (peerService{n}).Replicate(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	asked := map[uint64]bool{}
	for _, h := range again {
		asked[h] = true
	}
	if asked[n.owned.Hash("held-long")] || !asked[n.owned.Hash("held-fine")] {
		t.Errorf("Replicate asks again for %v; want held-fine's hash, not held-long's (refused for its burst)", again)
	}
}
