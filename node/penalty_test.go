package node

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

// TestPenaltyBansAfterDenials: 2 per hour, banned for 2h after 3 denials within
// a minute. The ban outlasts the window: the algorithm would admit again after
// the hour, the ban still denies, with RetryAfter the ban's remaining time.
func TestPenaltyBansAfterDenials(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	now.Store(t0.UnixNano())
	n := testNode(t, func(c *Config) { c.Clock = now.Load })
	ctx := context.Background()
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 2, Period: time.Hour}
	pen := Penalty{Denials: 3, Within: time.Minute, Ban: 2 * time.Hour}
	at := func(d time.Duration) { now.Store(t0.Add(d).UnixNano()) }
	check := func(step string) Decision {
		t.Helper()
		d, err := n.AllowPenalized(ctx, "abuser", l, 1, pen)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return d
	}
	for i := 0; i < 2; i++ {
		if d := check("admit"); !d.Allowed || d.Banned {
			t.Fatalf("check %d: got %+v, want allowed", i, d)
		}
	}
	at(10 * time.Second)
	for i := 0; i < 2; i++ {
		if d := check("deny"); d.Allowed || d.Banned {
			t.Fatalf("denial %d: got %+v, want denied by the algorithm, not banned", i, d)
		}
	}
	at(20 * time.Second)
	d := check("third denial")
	if d.Allowed || !d.Banned || d.RetryAfter != 2*time.Hour {
		t.Fatalf("third denial: got %+v, want banned with RetryAfter 2h", d)
	}
	at(time.Hour + time.Minute) // a new window: the algorithm alone would admit
	d = check("in ban")
	if d.Allowed || !d.Banned || d.Remaining != 0 {
		t.Fatalf("in ban after the window: got %+v, want denied by the ban", d)
	}
	if want := 2*time.Hour + 20*time.Second - (time.Hour + time.Minute); d.RetryAfter != want {
		t.Fatalf("RetryAfter in ban: got %v, want %v", d.RetryAfter, want)
	}
	at(2*time.Hour + 21*time.Second)
	for i := 0; i < 2; i++ {
		if d := check("after ban"); !d.Allowed || d.Banned {
			t.Fatalf("after the ban, check %d: got %+v, want allowed (the ban consumed nothing)", i, d)
		}
	}
	// Denials spread wider than Within never ban.
	for i := 0; i < 5; i++ {
		at(2*time.Hour + 30*time.Second + time.Duration(i)*40*time.Second)
		if d := check("spread"); d.Banned {
			t.Fatalf("spread denial %d: got banned, want only denied (2 per %v at most)", i, pen.Within)
		}
	}
	// Without a penalty the same key and limit is never banned.
	if d, _ := n.AllowN(ctx, "abuser-2", l, 1); d.Banned {
		t.Fatal("no penalty: got banned")
	}
}

// TestPenaltyStateMovesWithHandoff: extracting the ban state from one node
// and installing it on another (what a handoff does) keeps the key banned.
func TestPenaltyStateMovesWithHandoff(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	a := testNode(t, func(c *Config) { c.Clock = now.Load })
	b := testNode(t, func(c *Config) { c.Clock = now.Load; c.Name = "other" })
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Minute}
	pen := Penalty{Denials: 1, Within: time.Minute, Ban: time.Hour}
	a.AllowPenalized(ctx, "k", l, 1, pen)
	if d, _ := a.AllowPenalized(ctx, "k", l, 1, pen); !d.Banned {
		t.Fatalf("got %+v, want banned", d)
	}
	moved := a.bans.Extract(func(string) store.MoveAction { return store.MoveSend })
	if len(moved) != 1 || moved[0].Key != "k" {
		t.Fatalf("extracted %+v, want the state of k", moved)
	}
	if err := (peerService{b}).Transfer(ctx, transport.TransferBatch{From: "solo", Sender: "solo", Penalties: []transport.PenaltyState{transport.PenaltyState(moved[0])}}); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(10 * time.Minute)) // the GCRA alone would admit again
	d, err := b.AllowPenalized(ctx, "k", l, 1, pen)
	if err != nil || d.Allowed || !d.Banned || d.RetryAfter != 50*time.Minute {
		t.Fatalf("on the new owner: got %+v, %v; want banned for 50m more", d, err)
	}
}

func TestPenaltyValidated(t *testing.T) {
	t.Parallel()
	n := testNode(t, nil)
	for _, p := range []Penalty{{Denials: 0, Within: 1, Ban: 1}, {Denials: MaxPenaltyDenials + 1, Within: 1, Ban: 1}, {Denials: 1, Ban: 1}, {Denials: 1, Within: 1}} {
		if _, err := n.AllowPenalized(context.Background(), "k", hourly, 1, p); !errors.Is(err, ErrInvalid) {
			t.Errorf("penalty %+v: got %v, want ErrInvalid", p, err)
		}
	}
}

// TestHandedOffBanNeverOutlastsTheRule: a ban state handed off by a peer that
// claims a ban far longer than the rule's is capped to the rule's Ban at the
// next check; a ban state with denials in the future is refused whole.
func TestHandedOffBanNeverOutlastsTheRule(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	n := testNode(t, func(c *Config) { c.Clock = now.Load })
	ctx := context.Background()
	year := int64(365 * 24 * time.Hour)
	forged := transport.PenaltyState{Key: "victim", BanUntil: now.Load() + year, Expire: now.Load() + year}
	if err := (peerService{n}).Transfer(ctx, transport.TransferBatch{From: "solo", Sender: "solo", Penalties: []transport.PenaltyState{forged}}); err != nil {
		t.Fatal(err)
	}
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Minute}
	pen := Penalty{Denials: 3, Within: time.Minute, Ban: time.Minute}
	d, err := n.AllowPenalized(ctx, "victim", l, 1, pen)
	if err != nil || !d.Banned || d.RetryAfter > time.Minute {
		t.Fatalf("right after the forged handoff: got %+v, %v; want banned for at most the rule's 1m", d, err)
	}
	now.Add(int64(time.Minute + time.Second))
	if d, err := n.AllowPenalized(ctx, "victim", l, 1, pen); err != nil || d.Banned || !d.Allowed {
		t.Errorf("after the rule's ban: got %+v, %v; want allowed (a forged year-long ban must not hold)", d, err)
	}
	future := transport.PenaltyState{Key: "other", Denials: []int64{now.Load() + int64(time.Hour)}}
	if err := (peerService{n}).Transfer(ctx, transport.TransferBatch{From: "solo", Sender: "solo", Penalties: []transport.PenaltyState{future}}); err != nil {
		t.Fatal(err)
	}
	if got := n.Stats().RefusedStates; got != 1 {
		t.Errorf("denials in the future: %d states refused, want 1", got)
	}
	if _, held := n.bans.State(n.owned.Hash("other"), "other"); held {
		t.Error("a ban state with denials in the future was installed")
	}
}
