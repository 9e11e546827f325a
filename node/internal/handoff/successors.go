package handoff

import (
	"slices"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// Successors remembers, per partition, the member this node's ring changes
// last passed the partition on to, and when: members joining at once make
// each member's rings differ, and a partition this node passed to one member
// in one ring may belong to another in the next, while the first may still
// hold its states. The next handoffs' markers name that member (After) to
// the partition's owner, which then waits for its marker too. The zero
// Successors is ready; it is safe for concurrent use.
type Successors struct {
	mu sync.Mutex
	to []successor // by partition
}

type successor struct {
	name string
	at   time.Time
}

// Note records change c: a partition c.Self owned in c.Old and does not own
// in c.Cur was passed to its owner in c.Cur; one c.Self owns in c.Cur is
// forgotten. A change without an old ring (the first) records nothing.
func (s *Successors) Note(c *Change) {
	if c.Old == nil || c.Old.Len() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := c.Cur.PartitionCount()
	if len(s.to) != n {
		s.to = make([]successor, n)
	}
	now := time.Now()
	for p := range n {
		owner := c.Cur.PartitionOwner(p).Name
		switch {
		case owner == c.Self:
			s.to[p] = successor{}
		case p < c.Old.PartitionCount() && c.Old.PartitionOwner(p).Name == c.Self && owner != "":
			s.to[p] = successor{name: owner, at: now}
		}
	}
}

// After returns, by member name, the members (sorted, no repeats) that
// partitions the member owns in cur were passed to within window, other
// than the member itself, self, and members not in cur; members with none
// are absent.
func (s *Successors) After(cur *ring.Snapshot, self string, window time.Duration) map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.to) != cur.PartitionCount() {
		return nil
	}
	var out map[string][]string
	now := time.Now()
	for p, sc := range s.to {
		if sc.name == "" || now.Sub(sc.at) >= window || sc.name == self {
			continue
		}
		owner := cur.PartitionOwner(p).Name
		if owner == sc.name || owner == self || !cur.Has(sc.name) {
			continue
		}
		if out == nil {
			out = make(map[string][]string)
		}
		if !slices.Contains(out[owner], sc.name) {
			out[owner] = append(out[owner], sc.name)
		}
	}
	for _, names := range out {
		slices.Sort(names)
	}
	return out
}
