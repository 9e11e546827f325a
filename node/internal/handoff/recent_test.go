package handoff

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// A member given a batch is marked again by the next handoffs within the
// window, even when it gains nothing in them; once the window has passed,
// it is not.
func TestRecentMarksRecentMembersAgain(t *testing.T) {
	members := []ring.Member{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}, {Name: "c", Addr: "c:1"}}
	var r Recent
	b1 := NewBatches()
	b1.Mark("a", "a:1")
	if n := r.Extend(b1, members, time.Hour); n != 0 || len(b1.States) != 1 {
		t.Fatalf("first handoff: %d markers added, batches for %d members; want none added", n, len(b1.States))
	}
	b2 := NewBatches()
	b2.Mark("b", "b:1")
	if n := r.Extend(b2, members, time.Hour); n != 1 {
		t.Fatalf("second handoff: %d markers added, want 1 (a)", n)
	}
	if _, ok := b2.States["a"]; !ok || b2.Addrs["a"] != "a:1" {
		t.Fatal("a, marked in the handoff before, got no marker")
	}
	if _, ok := b2.States["c"]; ok {
		t.Fatal("c, never marked, got a marker")
	}
	b3 := NewBatches()
	if n := r.Extend(b3, members, 0); n != 0 || len(b3.States) != 0 {
		t.Fatalf("past the window: %d markers added", n)
	}
	b4 := NewBatches()
	if n := r.Extend(b4, members, time.Hour); n != 0 {
		t.Fatalf("after the window forgot them: %d markers added", n)
	}
}
