package topdenied

import (
	"fmt"
	"testing"
	"time"
)

// TestSpaceSavingBound: with more keys than counters, every reported count
// overestimates the true count by at most its Error, a key denied more than
// the total divided by K is always reported, and slots older than a minute
// are forgotten.
func TestSpaceSavingBound(t *testing.T) {
	tr := New(4)
	if New(0) != nil {
		t.Fatal("New(0) is not off")
	}
	now := int64(time.Hour)
	truth := map[string]int64{}
	note := func(k string, n int) {
		for range n {
			tr.Note(k, now)
			truth[k]++
		}
	}
	note("heavy", 50)
	for i := range 20 {
		note(fmt.Sprintf("light-%d", i), 1)
	}
	note("heavy", 10)
	top := tr.Top(10, now)
	if len(top) > tr.K() {
		t.Fatalf("Top returned %d entries from one slot of %d counters", len(top), tr.K())
	}
	if len(top) == 0 || top[0].Key != "heavy" {
		t.Fatalf("Top = %+v, want heavy first", top)
	}
	for _, e := range top {
		if e.Denials < truth[e.Key] || e.Denials-e.Error > truth[e.Key] {
			t.Errorf("%s: Denials %d Error %d, true count %d: outside space-saving's bound", e.Key, e.Denials, e.Error, truth[e.Key])
		}
	}
	if got := tr.Top(10, now+int64(time.Minute)); len(got) != 0 {
		t.Errorf("a minute later Top = %+v, want empty", got)
	}
}
