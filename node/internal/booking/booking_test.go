package booking

import (
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/store"
)

// At one hit a second, a booking waits for the next free slot when MaxWait
// reaches it and is denied when it does not; a cancel gives the slot back.
func TestDecide(t *testing.T) {
	t.Parallel()
	owned := store.New(10, xxhash.Sum64String, nil)
	bans := &store.Bans{}
	owns := func() bool { return true }
	within := func(algo.Limit) error { return nil }
	const now = int64(1_000_000_000_000)
	c := Check{H: 7, Key: "k", Limit: algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Second}, Hits: 1, MaxWait: 2 * time.Second}
	steps := []struct {
		allowed bool
		delay   time.Duration
	}{{true, 0}, {true, time.Second}, {true, 2 * time.Second}, {false, 0}}
	var last Result
	for i, want := range steps {
		r, err := Decide(owned, bans, &c, now, now, owns, within)
		if err != nil {
			t.Fatal(err)
		}
		if r.Decision.Allowed != want.allowed || r.Delay != want.delay || (want.allowed && r.At != now+int64(want.delay)) {
			t.Fatalf("booking %d: got allowed %v, delay %v, at %d, want %v, %v", i+1, r.Decision.Allowed, r.Delay, r.At, want.allowed, want.delay)
		}
		if want.allowed {
			last = r
		}
	}
	cancel := c
	cancel.MaxWait, cancel.CancelAt = 0, last.At
	if r, err := Decide(owned, bans, &cancel, now, now, owns, within); err != nil || !r.Decision.Allowed {
		t.Fatalf("cancel: got %+v, %v, want allowed", r, err)
	}
	if r, _ := Decide(owned, bans, &c, now, now, owns, within); !r.Decision.Allowed || r.Delay != 2*time.Second {
		t.Errorf("booking after the cancel: got allowed %v, delay %v, want true, 2s (the slot given back)", r.Decision.Allowed, r.Delay)
	}
}
