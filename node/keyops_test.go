package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// Inspect reports the owner's state and whether the backup agrees; a reset
// from any member frees the key at once on every member, cached denials
// included.
func TestKeyOpsInspectResetInvalidates(t *testing.T) {
	t.Parallel()
	mn, nodes := memCluster(t, 3, nil)
	a, owner, backup := nodes[0], nodes[1], nodes[2]
	key := keyWith(t, a, owner, backup)
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 2, Period: time.Hour}
	ctx := context.Background()
	ki, err := backup.InspectKey(ctx, key, l)
	if err != nil || ki.Found || ki.Owner != owner.Name() || ki.Backup != backup.Name() {
		t.Fatalf("before any check: %+v, %v", ki, err)
	}
	for range 2 {
		if d, err := a.Allow(ctx, key, l); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	for i := range 2 {
		if d, err := a.Allow(ctx, key, l); err != nil || d.Allowed || d.Route != []Route{RouteForwarded, RouteCachedDenial}[i] {
			t.Fatalf("denial %d: %+v, %v", i, d, err)
		}
	}
	waitReplica(t, backup, key, l, 0)
	ki, err = a.InspectKey(ctx, key, l)
	if err != nil || !ki.Found || ki.Decision.Remaining != 0 || ki.Decision.Limit != 2 || !ki.ReplicaFound || !ki.ReplicaAgrees {
		t.Fatalf("after exhaustion: %+v, %v; want found, 0 remaining, replica agreeing", ki, err)
	}
	found, err := backup.ResetKey(ctx, key, l)
	if err != nil || !found {
		t.Fatalf("ResetKey: %v, %v", found, err)
	}
	fwd := mn.forwarded(a, owner)
	d, err := a.Allow(ctx, key, l)
	if err != nil || !d.Allowed || d.Route != RouteForwarded {
		t.Fatalf("after the reset: %+v, %v; want admitted by the owner (the cached denial invalidated)", d, err)
	}
	if mn.forwarded(a, owner) != fwd+1 {
		t.Errorf("the check after the reset was not forwarded")
	}
	ki, err = owner.InspectKey(ctx, key, l)
	if err != nil || !ki.Found || ki.Decision.Remaining != 1 {
		t.Fatalf("after the reset and one check: %+v, %v; want 1 remaining", ki, err)
	}
	if _, err := a.ResetKey(ctx, "", l); !errors.Is(err, ErrInvalid) {
		t.Errorf("ResetKey of an empty key: %v, want ErrInvalid", err)
	}
}

// Unban lifts a ban on every member: the owner's, the backup's replica and
// the cached denials.
func TestKeyOpsUnban(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 3, nil)
	a, owner, backup := nodes[0], nodes[1], nodes[2]
	key := keyWith(t, a, owner, backup)
	l := algo.Limit{Kind: algo.GCRA, Limit: 1000, Period: time.Second, Burst: 1000}
	pen := Penalty{Denials: 1, Within: time.Hour, Ban: time.Hour}
	ctx := context.Background()
	// 2000 hits are above the capacity: denied, which bans the key.
	if d, err := a.AllowPenalized(ctx, key, l, 1000, pen); err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	if d, err := a.AllowPenalized(ctx, key, l, 1000, pen); err != nil || !d.Banned {
		t.Fatalf("%+v, %v; want banned", d, err)
	}
	if d, err := a.AllowPenalized(ctx, key, l, 1, pen); err != nil || !d.Banned || d.Route != RouteCachedDenial {
		t.Fatalf("%+v, %v; want a cached ban", d, err)
	}
	ki, err := a.InspectKey(ctx, key, l)
	if err != nil || ki.BanRemaining <= 0 || ki.BanRemaining > time.Hour {
		t.Fatalf("inspect: %+v, %v; want banned", ki, err)
	}
	waitBan(t, backup, key)
	found, err := a.UnbanKey(ctx, key)
	if err != nil || !found {
		t.Fatalf("UnbanKey: %v, %v", found, err)
	}
	if until := backup.bans.BanUntil(backup.rs.Load().Snap.Hash(key), key, backup.clock()); until != 0 {
		t.Errorf("right after the unban, the backup still holds the ban (until %d)", until)
	}
	if d, err := a.AllowPenalized(ctx, key, l, 1, pen); err != nil || d.Banned || d.Route != RouteForwarded {
		t.Fatalf("after the unban: %+v, %v; want decided by the owner, not banned", d, err)
	}
	if ki, err := a.InspectKey(ctx, key, l); err != nil || ki.BanRemaining != 0 {
		t.Fatalf("inspect after the unban: %+v, %v", ki, err)
	}
	if until := backup.bans.BanUntil(backup.rs.Load().Snap.Hash(key), key, backup.clock()); until != 0 {
		t.Errorf("the backup still holds the ban (until %d)", until)
	}
}

// Over real gRPC between members: inspect, reset and the invalidation.
func TestKeyOpsOverGRPC(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := startCluster(ctx, 3, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nodes := c.Nodes()
	var a *Node
	key := "grpc-key"
	o, _ := nodes[0].Owner(key)
	for _, n := range nodes {
		if n.Name() != o.Name {
			a = n
		}
	}
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	if d, err := a.Allow(ctx, key, l); err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	for i := range 2 {
		if d, err := a.Allow(ctx, key, l); err != nil || d.Allowed || d.Route != []Route{RouteForwarded, RouteCachedDenial}[i] {
			t.Fatalf("denial %d: %+v, %v", i, d, err)
		}
	}
	ki, err := a.InspectKey(ctx, key, l)
	if err != nil || !ki.Found || ki.Owner != o.Name || ki.Decision.Remaining != 0 {
		t.Fatalf("inspect: %+v, %v", ki, err)
	}
	if found, err := a.ResetKey(ctx, key, l); err != nil || !found {
		t.Fatalf("reset: %v, %v", found, err)
	}
	if d, err := a.Allow(ctx, key, l); err != nil || !d.Allowed || d.Route != RouteForwarded {
		t.Fatalf("after the reset: %+v, %v", d, err)
	}
}

// DeleteKey drops every algorithm's state and the ban, as Redis's DEL.
func TestKeyOpsDelete(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 3, nil)
	a, owner, backup := nodes[0], nodes[1], nodes[2]
	key := keyWith(t, a, owner, backup)
	ctx := context.Background()
	l1 := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	l2 := algo.Limit{Kind: algo.FixedWindow, Limit: 1, Period: time.Hour}
	for _, l := range []algo.Limit{l1, l2} {
		for i, want := range []bool{true, false} {
			if d, err := a.Allow(ctx, key, l); err != nil || d.Allowed != want {
				t.Fatalf("%v check %d: %+v, %v", l.Kind, i, d, err)
			}
		}
	}
	if found, err := backup.DeleteKey(ctx, key); err != nil || !found {
		t.Fatalf("DeleteKey: %v, %v", found, err)
	}
	for _, l := range []algo.Limit{l1, l2} {
		if d, err := a.Allow(ctx, key, l); err != nil || !d.Allowed {
			t.Fatalf("%v after DEL: %+v, %v; want admitted", l.Kind, d, err)
		}
	}
	if found, err := a.DeleteKey(ctx, "never-seen"); err != nil || found {
		t.Errorf("DeleteKey of an unknown key: %v, %v; want false, nil", found, err)
	}
}

// TopDenied lists the most-denied keys of this node's callers, bounded.
func TestTopDenied(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 2, func(c *Config) { c.TopDeniedKeys = 3 })
	a := nodes[0]
	ctx := context.Background()
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 1, Period: time.Hour}
	for i, key := range []string{"a", "b", "c"} {
		for range 2 + 3*i { // a: 1 denial, b: 4, c: 7
			if _, err := a.Allow(ctx, key, l); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := a.TopDenied(2)
	if len(got) != 2 || got[0].Key != "c" || got[1].Key != "b" || got[0].Denials < 7 || got[1].Denials < 4 {
		t.Fatalf("TopDenied(2) = %+v; want c (7), b (4)", got)
	}
	for range 5 { // a fourth key in a summary of 3 replaces the least denied
		_, _ = a.Allow(ctx, "d", l)
	}
	if got := a.TopDenied(10); len(got) != 3 || got[0].Key != "c" {
		t.Errorf("TopDenied(10) = %+v; want 3 keys (the bound), c first", got)
	}
}
