package replication

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/transport"
)

func TestBackoffDoublesToMax(t *testing.T) {
	var b Backoff
	now := time.Unix(0, 0)
	lag := 5 * time.Millisecond
	for i, want := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond} {
		b.Failed(now, lag)
		if got := b.Until.Sub(now); got != want {
			t.Fatalf("fail %d: wait %v, want %v", i+1, got, want)
		}
	}
	for range 40 {
		b.Failed(now, lag)
	}
	if got := b.Until.Sub(now); got != MaxBackoff {
		t.Fatalf("after many fails: wait %v, want %v", got, MaxBackoff)
	}
	b.Succeeded()
	if b.Fails != 0 || !b.Until.IsZero() {
		t.Fatalf("after a success: %+v, want the zero Backoff", b)
	}
}

func TestScratchResetForgetsIdleDests(t *testing.T) {
	var sc Scratch
	sc.Reset()
	d := sc.Dest("a", "addr-a")
	d.Idx = append(d.Idx, 0)
	d.States = append(d.States, transport.KeyState{KeyHash: 1})
	sc.Dest("b", "addr-b")
	sc.Reset()
	if _, ok := sc.Dests["b"]; ok {
		t.Fatal("a backup that got nothing is kept")
	}
	if got := sc.Dests["a"]; got == nil || len(got.Idx) != 0 || len(got.States) != 0 {
		t.Fatalf("dest a after Reset: %+v, want kept and empty", got)
	}
}
