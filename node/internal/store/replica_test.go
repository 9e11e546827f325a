package store

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// A log delta can reach a replica that is packed (the backup got the log whole
// while it had at most two entries) from an owner whose log is boxed: the
// replica is unpacked, extended, and packed again or boxed when it outgrows
// two entries, and answers as the owner does at every step.
func TestLogDeltaOntoPackedReplica(t *testing.T) {
	t.Parallel()
	owner := New(1000, func(k string) uint64 { return uint64(len(k)) * 0x9e3779b97f4a7c15 }, nil)
	owner.Track = true
	owner.Live.Store(true)
	backup := New(1000, owner.Hash, nil)
	l := algo.Limit{Kind: algo.SlidingWindowLog, Limit: 10, Period: 100 * time.Millisecond}
	h := owner.Hash("k")
	now := int64(1_700_000_000_000_000_000)
	take := func(hits int64) {
		t.Helper()
		if _, err := owner.Take(h, l, hits, now, now, nil); err != nil {
			t.Fatal(err)
		}
	}
	boxed := func(s *Store) bool {
		sh := &s.shards[ShardOf(fold(h))]
		i := sh.swl.find(fold(h))
		if i < 0 {
			t.Fatal("key not held")
		}
		return sh.swl.slots[i].words()[0] < 0
	}
	send := func(wantDelta, wantBackupBoxed bool) {
		t.Helper()
		ms := owner.TakeDirty(now)
		if len(ms) != 1 || ms[0].Delta != wantDelta {
			t.Fatalf("sent %+v, want one state, delta %v", ms, wantDelta)
		}
		m := ms[0]
		if m.Delta {
			if !backup.AppendLog(m.H, m.Limit, m.St, m.After, m.AfterN, m.LastNow, false, now) {
				t.Fatal("the backup could not apply the delta")
			}
		} else {
			backup.Install(m.H, m.Limit, m.St, m.LastNow, false, now, false)
		}
		if got := boxed(backup); got != wantBackupBoxed {
			t.Fatalf("replica boxed %v, want %v", got, wantBackupBoxed)
		}
		for _, at := range []int64{now, now + int64(50*time.Millisecond), now + int64(99*time.Millisecond)} {
			want, _ := owner.Take(h, l, 0, at, at, nil)
			if got, _ := backup.Take(h, l, 0, at, at, nil); got != want {
				t.Fatalf("at +%v: replica %+v, owner %+v", time.Duration(at-now), got, want)
			}
		}
	}
	take(3) // three entries: boxed on the owner
	if !boxed(owner) {
		t.Fatal("a log of three entries is not boxed")
	}
	send(false, true)
	now += int64(200 * time.Millisecond) // all three expire
	take(1)                              // one entry, still boxed on the owner
	backup = New(1000, owner.Hash, nil)
	owner.SendWhole(h, l.Kind) // the restarted backup asks for the whole log
	send(false, false)         // one entry: packed on the backup
	now += int64(time.Millisecond)
	take(1)
	send(true, false) // a delta onto the packed replica: two entries, packed
	now += int64(time.Millisecond)
	take(1)
	send(true, true) // three entries: the replica moves to a box
}
