package handoff

import (
	"sync"
	"time"
)

// Hellos records, per member name, the instance of that member that last
// said Hello to this node (an admission handshake or a probe) and when it
// first did: a member says Hello to this node's instance only once its own
// gossip holds that instance, and only then can it put this node in its ring
// and hand it the partitions it gains. Wait uses it to tell a previous owner
// that is slow to hand off (its gate expires after HandoffTimeout) from one
// that has not heard of this node yet (its gate waits for it). The zero
// Hellos is ready; it is safe for concurrent use.
type Hellos struct {
	mu   sync.Mutex
	seen map[string]helloSeen
	// sig is closed (and set to nil) when a member is first heard; nil
	// while nobody waits.
	sig chan struct{}
}

type helloSeen struct {
	id string
	at time.Time
}

// Note records a Hello from instance id of member name at time.Now.
func (h *Hellos) Note(name, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.seen[name]; ok && s.id == id {
		return
	}
	if h.seen == nil {
		h.seen = make(map[string]helloSeen)
	}
	h.seen[name] = helloSeen{id: id, at: time.Now()}
	if h.sig != nil {
		close(h.sig)
		h.sig = nil
	}
}

// Heard returns when instance id of member name first said Hello, or false
// and a channel closed when any member is next heard.
func (h *Hellos) Heard(name, id string) (time.Time, bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.seen[name]; ok && s.id == id {
		return s.at, true, nil
	}
	if h.sig == nil {
		h.sig = make(chan struct{})
	}
	return time.Time{}, false, h.sig
}

// Len returns the number of members recorded.
func (h *Hellos) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// Latest returns the latest first Hello recorded (the zero time when none).
func (h *Hellos) Latest() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var at time.Time
	for _, s := range h.seen {
		if s.at.After(at) {
			at = s.at
		}
	}
	return at
}

// Keep forgets the members whose names live does not hold (gossip's
// members): a fleet whose members take new names on every deploy would
// otherwise grow it forever.
func (h *Hellos) Keep(live []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) <= len(live) {
		return
	}
	in := make(map[string]bool, len(live))
	for _, name := range live {
		in[name] = true
	}
	for name := range h.seen {
		if !in[name] {
			delete(h.seen, name)
		}
	}
}
