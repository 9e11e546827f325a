package denycache

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

func TestCacheRules(t *testing.T) {
	t.Parallel()
	lim := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	ban := Rule{Denials: 1, Within: time.Second, Ban: time.Minute}
	c := New(3, 10*time.Second)
	if len(c.slots) != 4 {
		t.Fatalf("size 3 gave %d slots, want 4", len(c.slots))
	}
	const h, sent = 42, int64(1000)
	d := Denial{Limit: 1, RetryAfter: time.Hour, ResetAfter: time.Hour, Owner: "node-a"}

	// An invalidation while the forward was in flight keeps its answer out.
	e := c.Epoch()
	c.Invalidate(7)
	c.Store(h, lim, Rule{}, 2, sent, e, d)
	var got Denial
	if c.Answer(h, lim, Rule{}, 2, sent+1, &got) {
		t.Fatal("a denial stored across an invalidation answered")
	}

	c.Store(h, lim, Rule{}, 2, sent, c.Epoch(), d)
	ok := c.Answer(h, lim, Rule{}, 3, sent+int64(time.Second), &got)
	if !ok || got.RetryAfter != time.Hour-time.Second || got.Owner != "node-a" {
		t.Fatalf("Answer = %+v, %v; want the hour counted down by 1 s", got, ok)
	}
	// A denial of 2 hits says nothing of 1; another limit or rule misses.
	for _, tc := range []struct {
		lim  algo.Limit
		pen  Rule
		hits int64
	}{{lim, Rule{}, 1}, {algo.Limit{Kind: algo.GCRA, Limit: 2, Period: time.Hour}, Rule{}, 2}, {lim, ban, 2}} {
		if c.Answer(h, tc.lim, tc.pen, tc.hits, sent+1, &got) {
			t.Errorf("Answer(%+v, %+v, hits %d) answered from a denial of 2 hits", tc.lim, tc.pen, tc.hits)
		}
	}
	// The entry is used no longer than maxTTL after the send, whatever its RetryAfter.
	if c.Answer(h, lim, Rule{}, 2, sent+int64(10*time.Second), &got) {
		t.Error("an entry answered past maxTTL")
	}
	// A ban denies every check of at least one hit; Invalidate drops it.
	c.Store(h, lim, ban, 5, sent, c.Epoch(), Denial{RetryAfter: time.Minute, Banned: true})
	if ok := c.Answer(h, lim, ban, 1, sent+1, &got); !ok || !got.Banned {
		t.Fatalf("a ban did not answer a check of 1 hit: %+v, %v", got, ok)
	}
	c.Invalidate(h)
	if c.Answer(h, lim, ban, 1, sent+1, &got) {
		t.Error("an invalidated ban answered")
	}
	if c.Hits() != 2 {
		t.Errorf("Hits = %d, want 2", c.Hits())
	}
	if New(0, time.Second) != nil {
		t.Error("New(0) is not off")
	}
}

// An expired entry gives its key one flight: the first Join leads, the
// others get the same flight; a flight that admitted the last hit (more)
// keeps the entry for the next round's leader, any other drops it; Land
// twice is a no-op; an entry that has not expired, or fewer hits than it
// denied, starts no flight.
func TestJoinAndLand(t *testing.T) {
	t.Parallel()
	lim := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second}
	c := New(4, 10*time.Second)
	const h, sent = 9, int64(1000)
	c.Store(h, lim, Rule{}, 2, sent, c.Epoch(), Denial{RetryAfter: 100})
	if f, _ := c.Join(h, lim, Rule{}, 2, sent+50); f != nil {
		t.Fatal("a flight before the entry expired")
	}
	if f, _ := c.Join(h, lim, Rule{}, 1, sent+100); f != nil {
		t.Fatal("a flight for fewer hits than denied")
	}
	f, lead := c.Join(h, lim, Rule{}, 2, sent+100)
	if f == nil || !lead {
		t.Fatalf("first Join: %v %v, want to lead", f, lead)
	}
	if g, lead := c.Join(h, lim, Rule{}, 3, sent+101); g != f || lead {
		t.Fatalf("second Join: %v %v, want the same flight, not leading", g, lead)
	}
	c.Land(h, f, true)
	c.Land(h, f, false) // no-op
	if !c.Wait(f, nil) {
		t.Fatal("Wait on a landed flight")
	}
	g, lead := c.Join(h, lim, Rule{}, 2, sent+102)
	if g == nil || g == f || !lead {
		t.Fatalf("after a flight that took the last hit: %v %v, want a new flight to lead", g, lead)
	}
	c.Land(h, g, false)
	if f, _ := c.Join(h, lim, Rule{}, 2, sent+103); f != nil {
		t.Fatal("a flight after one that left capacity: want the entry dropped")
	}
}
