package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// keyWith returns a key that owner owns and backup backs up in n's ring.
func keyWith(t *testing.T, n, owner, backup *Node) string {
	t.Helper()
	for i := range 100_000 {
		k := fmt.Sprintf("key-%d", i)
		o, ok1 := n.Owner(k)
		b, ok2 := n.Backup(k)
		if ok1 && ok2 && o.Name == owner.Name() && b.Name == backup.Name() {
			return k
		}
	}
	t.Fatalf("no key owned by %s with backup %s", owner.Name(), backup.Name())
	return ""
}

// replica peeks the state n holds for key under l (its replica when n is the
// key's backup), without routing.
func replica(t *testing.T, n *Node, key string, l algo.Limit) algo.Decision {
	t.Helper()
	now := n.clock()
	d, err := n.owned.Take(n.owned.Hash(key), l, 0, now, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitBan polls (5 ms, 5 s deadline) until n holds a ban of key.
func waitBan(t *testing.T, n *Node, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if st, ok := n.bans.State(n.owned.Hash(key), key); ok && st.BanUntil > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds no ban of %s after 5 s", n.Name(), key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitReplica polls (10 ms, 5 s deadline) until n's replica of key has want
// hits remaining.
func waitReplica(t *testing.T, n *Node, key string, l algo.Limit, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := replica(t, n, key, l).Remaining
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's replica of %s: %d remaining, want %d", n.Name(), key, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every node computes the same backup for a key; it is never the owner, and it
// is the key's owner in the ring without the owner.
func TestBackupIsTheOwnerWithoutTheOwner(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 3, nil)
	for i := range 300 {
		k := fmt.Sprint("b:", i)
		o, _ := nodes[0].Owner(k)
		b, ok := nodes[0].Backup(k)
		if !ok || b.Name == o.Name {
			t.Fatalf("key %s: owner %s, backup %s (ok %v)", k, o.Name, b.Name, ok)
		}
		for _, n := range nodes[1:] {
			if b2, _ := n.Backup(k); b2.Name != b.Name {
				t.Fatalf("key %s: %s says backup %s, %s says %s", k, nodes[0].Name(), b.Name, n.Name(), b2.Name)
			}
		}
		// The ring without the owner: its owner of k is the backup.
		var rest []*Node
		for _, n := range nodes {
			if n.Name() != o.Name {
				rest = append(rest, n)
			}
		}
		var ms []ring.Member
		for _, n := range rest {
			ms = append(ms, ring.Member{Name: n.Name()})
		}
		r, err := ring.New(nodes[0].cfg.Ring)
		if err != nil || r.SetMembers(ms) != nil {
			t.Fatalf("ring without %s: %v", o.Name, err)
		}
		if m, _ := r.Owner(k); m.Name != b.Name {
			t.Fatalf("key %s: ring without %s gives %s, backup is %s", k, o.Name, m.Name, b.Name)
		}
	}
}

// The backup decides while the owner is unreachable, on the replica: the
// owner's admissions count. A backup that can still reach the owner asks it
// (the decision stays exact); one that cannot decides itself (RouteBackup).
func TestBackupDecidesWhileOwnerUnreachable(t *testing.T) {
	t.Parallel()
	mn, nodes := memCluster(t, 3, nil)
	sender, owner, backup := nodes[0], nodes[1], nodes[2]
	key := keyWith(t, sender, owner, backup)
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 4, Period: 24 * time.Hour}
	ctx := context.Background()

	if d, err := sender.AllowN(ctx, key, l, 2); err != nil || d.Route != RouteForwarded || d.Remaining != 2 {
		t.Fatalf("before the cut: %+v, %v", d, err)
	}
	waitReplica(t, backup, key, l, 2)

	// Sender cut off from a live owner: the backup asks the owner.
	mn.setCut(sender, owner, true)
	d, err := sender.Allow(ctx, key, l)
	if err != nil || d.Route != RouteForwarded || d.Owner != owner.Name() || d.Remaining != 1 {
		t.Fatalf("sender cut from the owner: got %+v, %v; want the owner's decision through the backup, 1 remaining", d, err)
	}
	waitReplica(t, backup, key, l, 1)

	// Nobody reaches the owner: the backup decides on its replica.
	mn.setCut(backup, owner, true)
	want := []bool{true, false, false}
	for i, w := range want {
		d, err := sender.Allow(ctx, key, l)
		if err != nil || d.Route != RouteBackup || d.Owner != backup.Name() || d.Allowed != w {
			t.Fatalf("check %d with the owner unreachable: got %+v, %v; want the backup's decision, allowed %v", i, d, err, w)
		}
	}
	// The backup deciding for itself goes straight to its replica too.
	if d, err := backup.Allow(ctx, key, l); err != nil || d.Route != RouteBackup || d.Allowed {
		t.Fatalf("backup's own check: %+v, %v; want denied by the backup", d, err)
	}
}

// After a failure to reach a member, checks of its keys go to the backup
// without trying the member again until BreakerCooldown has passed.
func TestBreakerSkipsUnreachableMember(t *testing.T) {
	t.Parallel()
	mn, nodes := memCluster(t, 3, func(c *Config) { c.BreakerCooldown = time.Hour })
	sender, owner, backup := nodes[0], nodes[1], nodes[2]
	key := keyWith(t, sender, owner, backup)
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 1000, Period: time.Hour}
	ctx := context.Background()
	mn.setCut(sender, owner, true)
	mn.setCut(backup, owner, true)
	if d, err := sender.Allow(ctx, key, l); err != nil || d.Route != RouteBackup {
		t.Fatalf("first check: %+v, %v", d, err)
	}
	// Forwards only: a handoff from the cluster's start that failed on the
	// cut link may be retried once it is restored, which is no check.
	tried := mn.forwarded(sender, owner) // 0: the link is cut, nothing is delivered
	toBackup := mn.forwarded(sender, backup)
	mn.setCut(sender, owner, false) // the sender could reach it now, but its breaker is open
	for i := range 20 {
		d, err := sender.Allow(ctx, key, l)
		if err != nil || d.Route != RouteBackup {
			t.Fatalf("check %d: %+v, %v; want the backup while the breaker is open", i, d, err)
		}
	}
	if got := mn.forwarded(sender, owner); got != tried {
		t.Fatalf("the sender forwarded %d checks to the owner while its breaker was open", got-tried)
	}
	if got := mn.forwarded(sender, backup) - toBackup; got != 20 {
		t.Fatalf("%d checks reached the backup, want 20", got)
	}
}

// Neither owner nor backup reachable: each node falls back on its share of
// the limit, so the members together admit about the limit, not N times it.
func TestLocalFallbackAdmitsShare(t *testing.T) {
	t.Parallel()
	// Each check waits ForwardTimeout for a ring without the two before the
	// fallback decides (see TestOwnerAndBackupDownWaitsForTheRing).
	mn, nodes := memCluster(t, 3, func(c *Config) { c.ForwardTimeout = 50 * time.Millisecond })
	sender, owner, backup := nodes[0], nodes[1], nodes[2]
	key := keyWith(t, sender, owner, backup)
	l := algo.Limit{Kind: algo.GCRA, Burst: 8, Limit: 9, Period: 24 * time.Hour} // capacity 9
	mn.setCut(sender, owner, true)
	mn.setCut(sender, backup, true)
	admitted := 0
	for range 20 {
		d, err := sender.Allow(context.Background(), key, l)
		if err != nil || d.Route != RouteFallback {
			t.Fatalf("%+v, %v; want a fallback decision", d, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 3 { // ceil(9/3)
		t.Fatalf("local fallback admitted %d, want this node's share 3 of capacity 9", admitted)
	}
}

// Under ReplicationSync a check returns only once the backup holds its state.
func TestSyncReplicationBeforeDecision(t *testing.T) {
	t.Parallel()
	for _, mode := range []Replication{ReplicationSync, ReplicationAsync} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			_, nodes := memCluster(t, 3, func(c *Config) {
				c.Replication = mode
				c.ReplicationLag = time.Hour // async: only a sync caller sends
			})
			sender, owner, backup := nodes[0], nodes[1], nodes[2]
			key := keyWith(t, sender, owner, backup)
			l := algo.Limit{Kind: algo.SlidingWindowLog, Limit: 10, Period: time.Hour}
			for i := range 5 {
				from := []*Node{sender, owner}[i%2] // forwarded and owner-local checks
				if _, err := from.Allow(context.Background(), key, l); err != nil {
					t.Fatal(err)
				}
				got := replica(t, backup, key, l).Remaining
				want := int64(10 - (i + 1))
				if mode == ReplicationAsync {
					want = 10 // nothing sent within the hour-long lag
				}
				if got != want {
					t.Fatalf("after check %d the backup's replica has %d remaining, want %d", i, got, want)
				}
			}
		})
	}
}

// A crash of the owner: the backup becomes the owner and starts from its
// replica, not from a full bucket.
func TestCrashKeepsReplicatedState(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 3, func(c *Config) { c.Replication = ReplicationSync })
	sender, owner, backup := nodes[0], nodes[1], nodes[2]
	key := keyWith(t, sender, owner, backup)
	l := algo.Limit{Kind: algo.TokenBucket, Burst: 5, Limit: 5, Period: 24 * time.Hour}
	ctx := context.Background()
	if d, err := sender.AllowN(ctx, key, l, 4); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("%+v, %v", d, err)
	}
	owner.Abort()
	admitted := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, _ := sender.Owner(key)
		if o.Name == backup.Name() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the crash was not detected within 10 s")
		}
		d, err := sender.Allow(ctx, key, l)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
			if d.Route != RouteBackup {
				t.Fatalf("admitted by %v", d.Route)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	for range 3 {
		d, err := sender.Allow(ctx, key, l)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 1 {
		t.Fatalf("after the crash the key admitted %d more hits, want exactly the 1 left", admitted)
	}
}

// A sliding-window log is replicated whole once, then by the entries appended
// since (O(new hits) per send, not O(Limit)); the replica stays equal to the
// owner's log; a replica that cannot apply a delta gets the whole log next.
func TestLogReplicationSendsDeltas(t *testing.T) {
	t.Parallel()
	owner := store.New(1000, func(k string) uint64 { return uint64(len(k)) * 0x9e3779b97f4a7c15 }, nil)
	owner.Track = true
	owner.Live.Store(true)
	backup := store.New(1000, owner.Hash, nil)
	l := algo.Limit{Kind: algo.SlidingWindowLog, Limit: 1000, Period: time.Hour}
	h := owner.Hash("k")
	now := int64(1_700_000_000_000_000_000)
	take := func(hits int64) {
		t.Helper()
		now += int64(time.Millisecond)
		if _, err := owner.Take(h, l, hits, now, now, nil); err != nil {
			t.Fatal(err)
		}
	}
	send := func(wantDelta bool, wantEntries, wantSent int) {
		t.Helper()
		ms := owner.TakeDirty(now)
		if len(ms) != 1 {
			t.Fatalf("takeDirty sent %d states, want 1", len(ms))
		}
		m := ms[0]
		if m.Delta != wantDelta {
			t.Fatalf("delta %v, want %v", m.Delta, wantDelta)
		}
		if tt, _ := m.St.LogTail(); tt == 0 && wantEntries > 0 {
			t.Fatal("empty log sent")
		}
		b, _ := m.St.MarshalBinary()
		var got algo.State
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if d, _ := got.Take(now, 0, l); 1000-d.Remaining != int64(wantSent) {
			t.Fatalf("%d log entries sent, want %d", 1000-d.Remaining, wantSent)
		}
		if m.Delta {
			if !backup.AppendLog(m.H, m.Limit, got, m.After, m.AfterN, m.LastNow, false, now) {
				t.Fatal("the backup could not apply the delta")
			}
		} else {
			backup.Install(m.H, m.Limit, got, m.LastNow, false, now, false)
		}
		for _, s := range []*store.Store{owner, backup} {
			d, err := s.Take(h, l, 0, now, now, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := int64(1000 - wantEntries); d.Remaining != want {
				t.Fatalf("remaining %d, want %d", d.Remaining, want)
			}
		}
	}
	take(1)
	take(3)
	send(false, 4, 4) // first send: whole
	take(2)
	take(1)
	send(true, 7, 3) // then the 3 new entries only
	ms := owner.TakeDirty(now)
	if len(ms) != 0 {
		t.Fatalf("nothing changed, but %d states were sent", len(ms))
	}
	take(5)
	// The backup lost its replica (say it restarted): it asks for the whole log.
	backup = store.New(1000, owner.Hash, nil)
	m := owner.TakeDirty(now)[0]
	if !m.Delta || backup.AppendLog(m.H, m.Limit, m.St, m.After, m.AfterN, m.LastNow, false, now) {
		t.Fatal("a delta applied to a missing replica")
	}
	owner.SendWhole(m.H, m.Limit.Kind)
	take(1)
	send(false, 13, 13)
}

// A key's ban (penalty) is replicated with its state: after the owner
// crashes, its backup, now the owner, still bans the key.
func TestCrashKeepsBan(t *testing.T) {
	t.Parallel()
	// No cached denials: the check after the crash must reach the backup.
	_, nodes := memCluster(t, 3, func(c *Config) { c.DeniedCacheSize = 0 })
	sender, owner, backup := nodes[0], nodes[1], nodes[2]
	key := keyWith(t, sender, owner, backup)
	l := algo.Limit{Kind: algo.GCRA, Burst: 0, Limit: 1, Period: 24 * time.Hour}
	pen := Penalty{Denials: 1, Within: time.Hour, Ban: time.Hour}
	ctx := context.Background()
	if d, err := sender.AllowPenalized(ctx, key, l, 1, pen); err != nil || !d.Allowed {
		t.Fatalf("first check: %+v, %v", d, err)
	}
	if d, err := sender.AllowPenalized(ctx, key, l, 1, pen); err != nil || !d.Banned {
		t.Fatalf("second check: %+v, %v; want banned", d, err)
	}
	waitBan(t, backup, key)
	owner.Abort()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if o, _ := sender.Owner(key); o.Name == backup.Name() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the crash was not detected within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	d, err := sender.AllowPenalized(ctx, key, l, 1, pen)
	if err != nil || !d.Banned || d.Owner != backup.Name() {
		t.Fatalf("after the crash: %+v, %v; want banned by %s", d, err, backup.Name())
	}
}

// TestReplicationResendsWhatTheBackupAsksFor: a backup that answers a send's
// state and ban state in need_full (it could not place them: the rings
// disagreed for a moment) gets both again, whole, with a later send, though
// the key does not change again.
func TestReplicationResendsWhatTheBackupAsksFor(t *testing.T) {
	t.Parallel()
	mn, nodes := memCluster(t, 3, nil)
	owner, backup := nodes[0], nodes[1]
	key := keyWith(t, owner, owner, backup)
	l := algo.Limit{Kind: algo.GCRA, Burst: 0, Limit: 1, Period: 24 * time.Hour}
	pen := Penalty{Denials: 1, Within: time.Hour, Ban: time.Hour}
	ctx := context.Background()
	if d, err := owner.AllowPenalized(ctx, key, l, 1, pen); err != nil || !d.Allowed {
		t.Fatalf("first check: %+v, %v", d, err)
	}
	waitReplica(t, backup, key, l, 0)
	mn.setAskAgain(owner, backup, 1)
	if d, err := owner.AllowPenalized(ctx, key, l, 1, pen); err != nil || !d.Banned {
		t.Fatalf("second check: %+v, %v; want banned", d, err)
	}
	waitBan(t, backup, key)
	left := mn.AskAgain(owner.Name(), backup.GRPCAddr())
	if left != 0 {
		t.Fatal("no send carried the ban state before it reached the backup")
	}
}

// TestReplicationResendsAfterFailedSend: states whose send to one backup failed
// are sent again once it is reachable, while the other backup's states of the
// same sends arrive at once. The keys of both backups are mixed in every send,
// so a send's part for one backup is not a prefix of its states.
func TestReplicationResendsAfterFailedSend(t *testing.T) {
	t.Parallel()
	mn, nodes := memCluster(t, 3, nil)
	owner, cutB, liveB := nodes[0], nodes[1], nodes[2]
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 10, Period: 24 * time.Hour}
	ctx := context.Background()
	var cutKeys, liveKeys []string
	for i := 0; len(cutKeys) < 20 || len(liveKeys) < 20; i++ {
		k := fmt.Sprintf("resend-%d", i)
		o, _ := owner.Owner(k)
		b, _ := owner.Backup(k)
		switch {
		case o.Name != owner.Name():
		case b.Name == cutB.Name() && len(cutKeys) < 20:
			cutKeys = append(cutKeys, k)
		case b.Name == liveB.Name() && len(liveKeys) < 20:
			liveKeys = append(liveKeys, k)
		}
	}
	mn.setCut(owner, cutB, true)
	for i := range cutKeys {
		for _, k := range []string{liveKeys[i], cutKeys[i]} {
			if d, err := owner.AllowN(ctx, k, l, 3); err != nil || !d.Allowed || d.Route != RouteOwner {
				t.Fatalf("%s: got %+v, %v; want admitted by the owner", k, d, err)
			}
		}
	}
	for _, k := range liveKeys {
		waitReplica(t, liveB, k, l, 7)
	}
	for _, k := range cutKeys {
		if got := replica(t, cutB, k, l).Remaining; got != 10 {
			t.Fatalf("%s reached its backup over a cut link: %d remaining", k, got)
		}
	}
	mn.setCut(owner, cutB, false)
	for _, k := range cutKeys {
		waitReplica(t, cutB, k, l, 7)
	}
}

// TestNoBackupListsNothing: a node without a backup (alone in its ring) lists
// no changed key: the list would only be cleared, touching every changed
// key's slot again.
func TestNoBackupListsNothing(t *testing.T) {
	t.Parallel()
	a := testNode(t, nil)
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: 24 * time.Hour, Burst: 9}
	for i := range 50 {
		if d, err := a.AllowN(ctx, fmt.Sprint("solo-", i), l, 4); err != nil || !d.Allowed {
			t.Fatalf("key %d: got %+v, %v; want admitted", i, d, err)
		}
	}
	if a.owned.AnyDirty() {
		t.Fatal("a node without a backup listed changed keys")
	}
}

// TestJoinedBackupGetsReplicas: when a member joins a node that is alone, the
// node's keys reach their new backup, even though the first replication send
// arrives before the joiner has a ring of its own (it asks for them again).
func TestJoinedBackupGetsReplicas(t *testing.T) {
	t.Parallel()
	_, nodes, base := memClusterBase(t, 1, nil)
	a := nodes[0]
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: 24 * time.Hour, Burst: 9}
	const keys = 50
	for i := range keys {
		if d, err := a.AllowN(ctx, fmt.Sprint("solo-", i), l, 4); err != nil || !d.Allowed {
			t.Fatalf("key %d: got %+v, %v; want admitted", i, d, err)
		}
	}
	cfg := base
	cfg.Name = "node-1"
	cfg.Join = []string{a.GossipAddr()}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Abort() })
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := waitConverged(wctx, a, b); err != nil {
		t.Fatal(err)
	}
	kept := 0
	for i := range keys {
		k := fmt.Sprint("solo-", i)
		if o, _ := a.Owner(k); o.Name == a.Name() {
			kept++
			waitReplica(t, b, k, l, 6) // capacity 10, 4 taken
		}
	}
	if kept == 0 {
		t.Fatal("the joiner took every key: nothing left to replicate")
	}
}

// TestReplicaNotPlacedIsAskedAgain: a replication batch whose keys the
// receiver neither owns nor backs up from that sender in its ring (the rings
// disagree) is not applied, and every state and ban state of it comes back in
// needFull, so that the sender sends them again, whole.
func TestReplicaNotPlacedIsAskedAgain(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 3, nil)
	x, y, z := nodes[0], nodes[1], nodes[2]
	key := keyWith(t, z, y, x) // owned by y, backed up by x: z is neither
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: 24 * time.Hour, Burst: 9}
	var st algo.State
	now := z.clock()
	if _, err := st.Take(now, 4, l); err != nil {
		t.Fatal(err)
	}
	bin, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	h := z.owned.Hash(key)
	b := transport.TransferBatch{
		From: x.Name(), Sender: x.Name(), Replica: true,
		States:    []transport.KeyState{{KeyHash: h, Limit: l, State: bin, LastNow: now}},
		Penalties: []transport.PenaltyState{{Key: key, BanUntil: now + int64(time.Hour), Expire: now + int64(time.Hour)}},
	}
	needFull, err := peerService{z}.Replicate(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if len(needFull) != 2 || needFull[0] != h || needFull[1] != h {
		t.Fatalf("got needFull %v, want the key's hash %d twice (its state and its ban)", needFull, h)
	}
	if got := replica(t, z, key, l).Remaining; got != 10 {
		t.Errorf("a state z cannot place was installed: %d remaining, want 10", got)
	}
	if _, banned := z.bans.State(h, key); banned {
		t.Error("a ban state z cannot place was installed")
	}
}

// A sender that can reach neither a key's owner nor its backup waits for its
// ring to change (up to ForwardTimeout) before the fallback decides: when
// members leave together
// (an autoscaler's scale-down), a sender's ring can still hold an owner and
// a backup that have both stopped, and the key's state is with the member
// that owns it once both are gone. Deciding by the fallback at once admitted
// exhausted keys again (1 to 4 admissions over per run with 10 of 20 members
// leaving at once, see docs/fleet-size.md).
func TestOwnerAndBackupDownWaitsForTheRing(t *testing.T) {
	t.Parallel()
	mn, nodes := memCluster(t, 4, func(c *Config) {
		// Rings here change only when the test publishes one: a gossip round
		// long enough that the sender's wait (two rounds) outlasts the
		// test's reaction under -race on a loaded machine.
		c.Gossip.GossipInterval = 500 * time.Millisecond
		c.ForwardTimeout = 5 * time.Second
	})
	sender := nodes[0]
	var owner, backup, next *Node
	var key string
	for i := 0; i < 100_000 && key == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		o, _ := sender.Owner(k)
		b, _ := sender.Backup(k)
		if o.Name == sender.Name() || b.Name == sender.Name() {
			continue
		}
		for _, n := range nodes[1:] {
			switch n.Name() {
			case o.Name:
				owner = n
			case b.Name:
				backup = n
			default:
				next = n
			}
		}
		rest, err := ring.SnapshotOf(sender.cfg.Ring, []ring.Member{member(sender), member(next)})
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := rest.Owner(k); m.Name == next.Name() {
			key = k
		}
	}
	if key == "" {
		t.Fatal("no key whose owner and backup are not the sender and whose owner without them is the fourth member")
	}
	mn.setCut(sender, owner, true)
	mn.setCut(sender, backup, true)
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 10, Period: time.Hour}
	type result struct {
		d   Decision
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := sender.Allow(context.Background(), key, l)
		done <- result{d, err}
	}()
	// Once the backup has failed too, the ring moves on without both, as
	// when their leave reaches the sender.
	deadline := time.Now().Add(10 * time.Second)
	for !sender.breakers.Refusing(backup.Name()) {
		select {
		case r := <-done:
			t.Fatalf("with the owner and the backup unreachable and the ring unchanged: %+v, %v; want the check to wait for the ring", r.d, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the sender never tried the backup")
		}
		time.Sleep(time.Millisecond) // poll, bounded by deadline
	}
	snap, err := ring.SnapshotOf(sender.cfg.Ring, []ring.Member{member(sender), member(next)})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*Node{next, sender} { // the key's new owner first
		n.rebuildMu.Lock()
		n.publish(&ringState{Snap: snap, Backups: n.computeBackups(snap)}, n.rs.Load())
		n.rebuildMu.Unlock()
	}
	r := <-done
	if r.err != nil || r.d.Route != RouteForwarded || r.d.Owner != next.Name() {
		t.Fatalf("got %+v, %v; want the decision of %s, the key's owner without the two members", r.d, r.err, next.Name())
	}
}

// member is n as a ring member.
func member(n *Node) ring.Member {
	for _, m := range n.rs.Load().Snap.Members() {
		if m.Name == n.Name() {
			return m
		}
	}
	return ring.Member{Name: n.Name(), Addr: n.GRPCAddr()}
}
