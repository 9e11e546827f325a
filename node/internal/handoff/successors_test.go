package handoff

import (
	"slices"
	"testing"
	"time"
)

// "a" passes some partitions to "c" when c joins; in the next ring, where d
// joins too, some of those belong to d: a's marker to d must name c, which
// may still hold their states. Partitions a owns again are forgotten, and
// the memory ends with the window.
func TestSuccessorsNameWhomPartitionsWentTo(t *testing.T) {
	ab, abc, abcd := snapOf(t, "a", "b"), snapOf(t, "a", "b", "c"), snapOf(t, "a", "b", "c", "d")
	var s Successors
	s.Note(&Change{Self: "a", Old: ab, Cur: abc})
	after := s.After(abcd, "a", time.Hour)
	want := 0
	for p := range abcd.PartitionCount() {
		if ab.PartitionOwner(p).Name == "a" && abc.PartitionOwner(p).Name == "c" && abcd.PartitionOwner(p).Name == "d" {
			want++
		}
	}
	if want == 0 {
		t.Fatal("no partition went a -> c -> d; the test needs one")
	}
	if !slices.Equal(after["d"], []string{"c"}) {
		t.Fatalf("After for d = %v, want [c] (%d partitions went a -> c -> d)", after["d"], want)
	}
	if got := after["c"]; got != nil {
		t.Fatalf("After for c = %v, want none: c holds what a passed it", got)
	}
	if got := s.After(abcd, "a", 0); got != nil {
		t.Fatalf("After past the window = %v, want none", got)
	}
	// a owns everything again: nothing passed on is remembered.
	s.Note(&Change{Self: "a", Old: abc, Cur: snapOf(t, "a")})
	if got := s.After(abcd, "a", time.Hour); got != nil {
		t.Fatalf("After once a owns every partition again = %v, want none", got)
	}
	var first Successors
	first.Note(&Change{Self: "a", Old: nil, Cur: abc})
	if got := first.After(abcd, "a", time.Hour); got != nil {
		t.Fatalf("After a first ring = %v, want none", got)
	}
}
