package store

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// TestTakeDirtySendsCurrentState holds the dirty lists to what a send must
// carry: every key changed since the last send, once, with its state as it is
// now (the copy in its entry kept up to date by later checks, merges and
// clock changes), nothing of a key removed since, and nothing at all after a
// send or ClearDirty, though the slots keep their stale marks.
func TestTakeDirtySendsCurrentState(t *testing.T) {
	t.Parallel()
	hash := func(k string) uint64 { return uint64(len(k)) * 0x9e3779b97f4a7c15 }
	now := int64(1_700_000_000_000_000_000)
	gcra := algo.Limit{Kind: algo.GCRA, Burst: 10, Limit: 10, Period: time.Second}
	tb := algo.Limit{Kind: algo.TokenBucket, Burst: 10, Limit: 10, Period: time.Second}
	newStore := func() *Store {
		s := New(1000, hash, nil)
		s.Track = true
		s.Live.Store(true)
		return s
	}
	take := func(s *Store, key string, l algo.Limit, hits, at, wall int64) algo.Decision {
		t.Helper()
		d, err := s.Take(s.Hash(key), l, hits, at, wall, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// sent returns the states sent, by hash and algorithm, failing on a key
	// sent twice.
	type hk struct {
		h uint64
		k algo.Kind
	}
	sent := func(s *Store, wall int64) map[hk]Moved {
		t.Helper()
		out := make(map[hk]Moved)
		for _, m := range s.TakeDirty(wall) {
			if _, dup := out[hk{m.H, m.Limit.Kind}]; dup {
				t.Fatalf("key %#x sent twice", m.H)
			}
			out[hk{m.H, m.Limit.Kind}] = m
		}
		return out
	}
	// sameAsOwner checks that m, installed on a fresh store, answers as s.
	sameAsOwner := func(s *Store, key string, m Moved, wall int64) {
		t.Helper()
		b := New(1000, hash, nil)
		b.Install(m.H, m.Limit, m.St, m.LastNow, m.CallerClock, wall, false)
		for _, at := range []int64{wall, wall + int64(50*time.Millisecond), wall + int64(time.Second)} {
			want := take(s, key, m.Limit, 0, at, at)
			if got := take(b, key, m.Limit, 0, at, at); got != want {
				t.Fatalf("%s at +%v: replica %+v, owner %+v", key, time.Duration(at-wall), got, want)
			}
		}
	}

	s := newStore()
	for range 3 {
		take(s, "a", gcra, 1, now, now)
		take(s, "bb", tb, 2, now, now)
		take(s, "bb", gcra, 1, now, now) // same hash, another algorithm: another key
	}
	got := sent(s, now)
	if len(got) != 3 {
		t.Fatalf("sent %d states, want 3", len(got))
	}
	sameAsOwner(s, "a", got[hk{fold(hash("a")), algo.GCRA}], now)
	sameAsOwner(s, "bb", got[hk{fold(hash("bb")), algo.TokenBucket}], now)
	if got := sent(s, now); len(got) != 0 {
		t.Fatalf("a second send carries %d states, want none", len(got))
	}

	// Checked again after the send: listed again (the stale mark in its slot
	// does not hide it), with the state of its last check, not its first.
	now += int64(time.Millisecond)
	take(s, "a", gcra, 1, now, now)
	take(s, "a", gcra, 4, now, now)
	got = sent(s, now)
	if len(got) != 1 {
		t.Fatalf("sent %d states, want 1", len(got))
	}
	sameAsOwner(s, "a", got[hk{fold(hash("a")), algo.GCRA}], now)

	// A denied check changes nothing to send; a merge from a peer without
	// tracking is no change either, but a listed key's copy must follow it.
	take(s, "a", gcra, 100, now, now) // hits above the capacity: denied
	if got := sent(s, now); len(got) != 0 {
		t.Fatalf("a denied check sent %d states, want none", len(got))
	}
	take(s, "a", gcra, 1, now, now)
	var tighter algo.State
	if _, err := tighter.Take(now, 11, gcra); err != nil {
		t.Fatal(err)
	}
	s.Install(hash("a"), gcra, tighter, now, false, now, false)
	got = sent(s, now)
	sameAsOwner(s, "a", got[hk{fold(hash("a")), algo.GCRA}], now)

	// A listed key that is removed and checked afresh is sent once, with its
	// new state.
	take(s, "a", gcra, 1, now, now)
	if !s.Remove(hash("a"), algo.GCRA) {
		t.Fatal("Remove found no key")
	}
	take(s, "a", gcra, 1, now, now)
	got = sent(s, now)
	if len(got) != 1 {
		t.Fatalf("sent %d states, want 1", len(got))
	}
	sameAsOwner(s, "a", got[hk{fold(hash("a")), algo.GCRA}], now)
	take(s, "a", gcra, 1, now, now)
	s.Remove(hash("a"), algo.GCRA)
	if got := sent(s, now); len(got) != 0 {
		t.Fatalf("a removed key was sent: %+v", got)
	}

	// A listed key whose later check carries a caller's timestamp (t !=
	// wall), even a denied one, is sent with that time, as its slot has it.
	take(s, "a", gcra, 1, now, now)
	callerAt := now - int64(time.Millisecond)
	if d := take(s, "a", gcra, 100, callerAt, now); d.Allowed {
		t.Fatal("a check of 100 hits at capacity 11 was allowed")
	}
	got = sent(s, now)
	if m := got[hk{fold(hash("a")), algo.GCRA}]; !m.CallerClock || m.LastNow != callerAt {
		t.Fatalf("sent %+v, want CallerClock and LastNow %d", m, callerAt)
	}

	// ClearDirty forgets every change; later ones are listed again.
	take(s, "a", gcra, 1, now, now)
	s.ClearDirty()
	if s.AnyDirty() || len(sent(s, now)) != 0 {
		t.Fatal("changes listed after ClearDirty")
	}
	take(s, "a", gcra, 1, now, now)
	if got := sent(s, now); len(got) != 1 {
		t.Fatalf("sent %d states after ClearDirty and a check, want 1", len(got))
	}
}
