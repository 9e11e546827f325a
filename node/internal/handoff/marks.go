package handoff

import (
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// Marks gates the partitions a ring change gives this node until their
// previous owners' handoff-complete markers arrive, and keeps the markers
// that come before this node published the ring they are for (their sender
// rebuilt first). A marker may name members (its After) whose own markers
// for the same ring must also have come before its sender's gate opens. The
// zero Marks is ready; it is safe for concurrent use.
type Marks struct {
	mu sync.Mutex
	m  map[string]Mark // kept, by sender: markers for a ring not published yet
	// got holds, by sender, the After of each marker for the published ring
	// (digest cur) that has come; self is the member this node is.
	cur  uint64
	got  map[string][]string
	self string
	// last holds when each member's latest marker came, for any ring.
	last map[string]time.Time
}

// Mark is a kept handoff-complete marker: the digest of the ring it is for,
// when it came, and the members it names in After.
type Mark struct {
	Digest uint64
	At     time.Time
	After  []string
}

// Everyone is the Pending name of the gate on partitions gained from a
// member gone from the ring: it opens once every other member has sent its
// marker for the ring.
const Everyone = "*"

// Gated is what Publish gives a new ring: Gates[p] is the channel of
// partition p, closed when its handoff arrives (a nil Gates, or a nil
// entry, means the partition is open); Pending holds each awaited previous
// owner's channel.
type Gated struct {
	Gates   []chan struct{}
	Pending map[string]chan struct{}
}

// Publish computes the gates of cur for the member self: a partition self
// owns in cur and prev's owner of it (still a member of cur) does not, waits
// for that owner's marker, unless a marker for cur came from it within
// timeout (and from every member it names in After, see Done). A nil or
// empty prev gates nothing. A gate of the ring before (carry, the gates prev
// was published with; a zero Gated when none or when they are too old to
// honour) that is still closed on a partition self still owns in cur stays
// closed, on the same channel, until the same member's marker for cur:
// members joining at once make one ring after another, and a partition
// gained in the first is not gained again in the next, so without it the
// next ring decided the partition on a state whose handoff had not arrived.
// A partition gained from a member gone from cur that left (a marker of its
// came within timeout, its leave's handoff) waits for every other member's
// marker for cur (the gate Everyone): members leaving at once hand their
// states to members whose rings still hold other leavers, which pass them on
// again, and the new owner cannot tell which of them still holds one. That
// wait, still closed, is carried as the others are, and then waits for
// everyone's markers for cur (their handoffs for it passed on what they
// held). One
// gone without a marker crashed and handed nothing: its partitions open at
// once (the backup decides on its replica).
// publish is called with the result while the markers are locked, so that a
// marker arriving meanwhile (Done) is either seen here or opens a published
// gate. The markers for cur are used up: used here, or too old to be for
// this change.
func (m *Marks) Publish(prev, cur *ring.Snapshot, self string, timeout time.Duration, carry Gated, publish func(Gated)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	digest := cur.Digest()
	m.self, m.cur, m.got = self, digest, make(map[string][]string)
	for from, mk := range m.m {
		if mk.Digest == digest {
			if time.Since(mk.At) < timeout {
				m.got[from] = mk.After
			}
			delete(m.m, from)
		}
	}
	// Whether each member's gate may open, and the wait for everyone's,
	// worked out once per member, not once per partition.
	open := make(map[string]bool)
	satisfied := func(from string) bool {
		ok, seen := open[from]
		if !seen {
			ok = m.satisfied(from, cur, nil)
			open[from] = ok
		}
		return ok
	}
	everyone := func() bool {
		ok, seen := open[Everyone]
		if !seen {
			ok = m.everyone(cur)
			open[Everyone] = ok
		}
		return ok
	}
	var g Gated
	gate := func(p int, from string, c chan struct{}) {
		if g.Gates == nil {
			g.Gates = make([]chan struct{}, cur.PartitionCount())
			g.Pending = make(map[string]chan struct{})
		}
		if have := g.Pending[from]; have != nil {
			c = have
		} else if c == nil {
			c = make(chan struct{})
		}
		g.Pending[from] = c
		g.Gates[p] = c
	}
	// The still-closed gates first, so that a new gate on the same member
	// shares their channel and its marker opens both.
	for from, c := range carry.Pending {
		if isClosed(c) {
			continue
		}
		if from == Everyone {
			// Leavers' states may still be on their way through other
			// members: the wait goes on for everyone's markers for cur.
			if everyone() {
				continue
			}
		} else if !cur.Has(from) || satisfied(from) {
			continue
		}
		for p, pc := range carry.Gates {
			if pc == c && p < cur.PartitionCount() && cur.PartitionOwner(p).Name == self {
				gate(p, from, c)
			}
		}
	}
	for p := 0; prev != nil && prev.Len() > 0 && p < cur.PartitionCount(); p++ {
		from := prev.PartitionOwner(p).Name
		if cur.PartitionOwner(p).Name != self || from == self || from == "" {
			continue // not gained
		}
		if !cur.Has(from) {
			// Gone. One that left (its leave's handoff sent a marker
			// lately) may have handed states to members that passed them
			// on; one that crashed handed nothing, and its backup decides
			// at once.
			if at, ok := m.last[from]; ok && time.Since(at) < timeout && !everyone() {
				gate(p, Everyone, nil)
			}
			continue
		}
		if satisfied(from) {
			continue // its handoff for this ring already arrived
		}
		gate(p, from, nil)
	}
	publish(g)
}

// everyone reports whether every member of cur but this node has sent its
// marker for cur (m.mu held).
func (m *Marks) everyone(cur *ring.Snapshot) bool {
	for _, mb := range cur.Members() {
		if mb.Name != m.self && !m.satisfied(mb.Name, cur, nil) {
			return false
		}
	}
	return true
}

// satisfied reports whether the gate on from may open in the published ring
// cur: from's marker for it came, and so did the marker of every member its
// After names that is still in cur (this node and members gone from cur
// excepted; a cycle counts as satisfied). m.mu is held; seen is nil on the
// first call.
func (m *Marks) satisfied(from string, cur *ring.Snapshot, seen map[string]bool) bool {
	after, ok := m.got[from]
	if !ok {
		return false
	}
	if len(after) == 0 {
		return true
	}
	if seen == nil {
		seen = make(map[string]bool)
	}
	seen[from] = true
	for _, a := range after {
		if a == m.self || seen[a] || !cur.Has(a) {
			continue // seen: satisfied, or on the path (a cycle)
		}
		if !m.satisfied(a, cur, seen) {
			return false
		}
	}
	return true
}

// Done records that from finished handing off for the ring with the given
// digest, and that the members named in after may still hold states of the
// partitions it passed on (see transport.TransferBatch.After). cur returns
// the published ring and its pending gates. A marker for the published ring
// opens every pending gate it completes: from's when after is empty or
// every member it names has sent its own marker for this ring, and any
// gate that was waiting for from's marker through another member's After;
// opened reports that from's gate opened now. A marker for another ring is
// kept, with its time, for the Publish of that ring. A ring's digest is a
// function of the member names alone, so the same digest comes back
// whenever a member restarts under its name: a marker kept for good would
// open the gate of a later change whose handoff has not arrived.
func (m *Marks) Done(from string, digest uint64, after []string, cur func() (*ring.Snapshot, map[string]chan struct{})) (opened bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	snap, pending := cur()
	d := snap.Digest()
	if m.last == nil {
		m.last = make(map[string]time.Time)
	}
	m.last[from] = time.Now()
	if len(m.last) > 2*snap.Len()+64 { // members that took new names
		for name, at := range m.last {
			if time.Since(at) > time.Hour {
				delete(m.last, name)
			}
		}
	}
	if d != digest {
		if m.m == nil {
			m.m = make(map[string]Mark)
		}
		m.m[from] = Mark{Digest: digest, At: time.Now(), After: after}
		return false
	}
	delete(m.m, from)
	if m.cur != d || m.got == nil {
		m.cur, m.got = d, make(map[string][]string)
	}
	m.got[from] = after
	for name, c := range pending {
		if isClosed(c) {
			continue
		}
		if name == Everyone {
			if m.everyone(snap) {
				close(c)
			}
			continue
		}
		if !m.satisfied(name, snap, nil) {
			continue
		}
		close(c)
		if name == from {
			opened = true
		}
	}
	return opened
}

// Kept returns the marker kept from from, if any.
func (m *Marks) Kept(from string) (Mark, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mk, ok := m.m[from]
	return mk, ok
}

// isClosed reports whether c is closed.
func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
