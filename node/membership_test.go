package node

import (
	"testing"
	"time"
)

// settle coalesces a burst: while changes keep coming it keeps waiting (up to
// 10 × MembershipDebounce; a stream of changes sent back to back holds it past
// 3 debounces, unless the sender is starved for a whole debounce); with no
// further change it waits one debounce (timers never fire early); it gives up
// when the node stops.
func TestSettleCoalescesBurst(t *testing.T) {
	t.Parallel()
	const d = 50 * time.Millisecond
	mk := func() *Node {
		return &Node{cfg: Config{MembershipDebounce: d}, memberSig: make(chan struct{}, 1), stop: make(chan struct{})}
	}

	n := mk()
	done := make(chan struct{})
	sig := n.memberSig
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
	ok := n.settle()
	took := time.Since(start)
	close(done)
	if !ok || took < 3*d {
		t.Errorf("settle under a steady stream of changes: %v after %v, want true after >= %v", ok, took, 3*d)
	}

	n = mk()
	start = time.Now()
	if ok, took := n.settle(), time.Since(start); !ok || took < d {
		t.Errorf("settle with no further change: %v after %v, want true after >= %v", ok, took, d)
	}

	n = mk()
	close(n.stop)
	if n.settle() {
		t.Errorf("settle on a stopped node: true, want false")
	}
	n = &Node{memberSig: make(chan struct{}, 1), stop: make(chan struct{})}
	if !n.settle() {
		t.Errorf("settle with MembershipDebounce 0: false, want true at once")
	}
}

// A handoff marker for the ring a node has now opens that ring's gate and is
// not kept: a ring's digest depends only on the member names, so after a
// member restarts under its name the same digest is published again, and a
// marker kept from the first time would open the gate of the second change
// before its handoff arrived (its new owner then decided on no state: keys
// over their limit in TestFleetRollingRestart). A marker for another ring is
// kept, with when it came, for the rebuild that publishes that ring.
func TestHandoffMarkerForCurrentRingIsNotKept(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 2, nil)
	n, from := nodes[0], nodes[1].Name()
	cur := n.RingDigest()
	n.markHandoffDone(from, cur)
	n.marksMu.Lock()
	_, kept := n.marks[from]
	n.marksMu.Unlock()
	if kept {
		t.Errorf("marker for the current ring %x: kept, want used and dropped", cur)
	}
	n.markHandoffDone(from, cur+1)
	n.marksMu.Lock()
	mk, kept := n.marks[from]
	n.marksMu.Unlock()
	if !kept || mk.digest != cur+1 || mk.at.IsZero() {
		t.Errorf("marker for another ring: %+v (kept %v), want it kept with its time", mk, kept)
	}
}
