package membership

import (
	"testing"
	"time"
)

// Settle coalesces a burst: while changes keep coming it keeps waiting (up to
// 10 × MembershipDebounce; a stream of changes sent back to back holds it past
// 3 debounces, unless the sender is starved for a whole debounce); with no
// further change it waits one debounce (timers never fire early); it gives up
// when the node stops.
func TestSettleCoalescesBurst(t *testing.T) {
	t.Parallel()
	const d = 50 * time.Millisecond
	type loop struct{ sig, stop chan struct{} }
	mk := func() loop { return loop{make(chan struct{}, 1), make(chan struct{})} }

	n := mk()
	done := make(chan struct{})
	sig := n.sig
	go func() {
		for {
			select {
			case sig <- struct{}{}:
			case <-done:
				return
			}
		}
	}()
	start := time.Now()
	ok := Settle(d, n.sig, n.stop)
	took := time.Since(start)
	close(done)
	if !ok || took < 3*d {
		t.Errorf("Settle under a steady stream of changes: %v after %v, want true after >= %v", ok, took, 3*d)
	}

	n = mk()
	start = time.Now()
	if ok, took := Settle(d, n.sig, n.stop), time.Since(start); !ok || took < d {
		t.Errorf("Settle with no further change: %v after %v, want true after >= %v", ok, took, d)
	}

	n = mk()
	close(n.stop)
	if Settle(d, n.sig, n.stop) {
		t.Errorf("Settle on a stopped node: true, want false")
	}
	n = mk()
	if !Settle(0, n.sig, n.stop) {
		t.Errorf("Settle with MembershipDebounce 0: false, want true at once")
	}
}
