package handoff

import (
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// Recent remembers the members this node sent a handoff marker to, and
// when, so that the next handoffs mark them again for a while (see
// Recent.Extend). The zero Recent is ready; it is safe for concurrent use.
type Recent struct {
	mu sync.Mutex
	at map[string]time.Time
}

// Extend records the members b marks (every member given a batch) as
// marked now, then gives a marker to every other member of members that
// was marked within window: members joining (or leaving) at once make one
// ring after another, each member through its own sequence, and a member
// that gained a partition in one of this node's rings may gate it on this
// node in a later ring of its own in which, as this node sees the change,
// it gains nothing; with no marker for that ring its gate waited out
// HandoffTimeout (hundreds of checks held about 1 s when 10 of 20 members
// joined at once). It returns the number of markers added.
func (r *Recent) Extend(b *Batches, members []ring.Member, window time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.at == nil {
		r.at = make(map[string]time.Time)
	}
	for name := range b.States {
		r.at[name] = now
	}
	added := 0
	for _, m := range members {
		if _, ok := b.States[m.Name]; ok {
			continue
		}
		if at, ok := r.at[m.Name]; ok && now.Sub(at) < window {
			b.Mark(m.Name, m.Addr)
			added++
		}
	}
	for name, at := range r.at {
		if now.Sub(at) >= window {
			delete(r.at, name)
		}
	}
	return added
}
