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

// TestHeapKeepsTheMinimum: the entry a new key replaces is always one with
// the fewest denials (checked against a scan of the counters after every
// denial of a random stream), so the summary is space-saving's.
func TestHeapKeepsTheMinimum(t *testing.T) {
	tr := New(16)
	now := int64(time.Hour)
	r := uint64(1)
	for i := range 20000 {
		r = r*6364136223846793005 + 1442695040888963407
		k := fmt.Sprintf("k%d", (r>>33)%64)
		if i%3 == 0 {
			k = fmt.Sprintf("hot%d", (r>>33)%4)
		}
		tr.Note(k, now)
		s := &tr.slots[(now/int64(topSlotDur))%topSlots]
		least := s.h[0].Denials
		for _, e := range s.m {
			if e.Denials < least {
				t.Fatalf("after %d denials: heap top %q has %d, %q has fewer (%d)", i+1, s.h[0].Key, least, e.Key, e.Denials)
			}
			if s.h[e.i] != e {
				t.Fatalf("after %d denials: %q is not at its heap index %d", i+1, e.Key, e.i)
			}
		}
	}
	for _, e := range tr.Top(4, now) {
		if e.Key[:3] != "hot" {
			t.Errorf("Top(4) holds %q (%d, error %d), want the four hot keys", e.Key, e.Denials, e.Error)
		}
	}
}

// BenchmarkNoteOutsideTheCounters: denials cycling over 300 keys with the
// default 100 counters, most of them of a key outside the counters.
func BenchmarkNoteOutsideTheCounters(b *testing.B) {
	tr := New(100)
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprintf("fleet:%d", i)
	}
	now := int64(time.Hour)
	for i := 0; b.Loop(); i++ {
		tr.Note(keys[i%len(keys)], now)
	}
}
