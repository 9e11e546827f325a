package node

import "testing"

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
	n.markHandoffDone(from, cur, nil)
	_, kept := n.marks.Kept(from)
	if kept {
		t.Errorf("marker for the current ring %x: kept, want used and dropped", cur)
	}
	n.markHandoffDone(from, cur+1, nil)
	mk, kept := n.marks.Kept(from)
	if !kept || mk.Digest != cur+1 || mk.At.IsZero() {
		t.Errorf("marker for another ring: %+v (kept %v), want it kept with its time", mk, kept)
	}
}
