package handoff

import (
	"sync"
	"time"
)

// Strays lists the ring hashes of handed-off states this node installed for
// keys it does not own (the sender's ring was older than this node's), for
// the loop that passes them on to their owners. Use NewStrays; it is safe
// for concurrent use.
type Strays struct {
	mu  sync.Mutex
	set map[uint64]bool
	sig chan struct{}
}

// NewStrays returns an empty Strays.
func NewStrays() *Strays { return &Strays{sig: make(chan struct{}, 1)} }

// Add lists the hashes of hs for which stray reports true and, if it listed
// any, signals Sig (once per pending pass).
func (s *Strays) Add(hs []uint64, stray func(h uint64) bool) {
	added := false
	for _, h := range hs {
		if !stray(h) {
			continue
		}
		s.mu.Lock()
		if s.set == nil {
			s.set = make(map[uint64]bool)
		}
		s.set[h] = true
		s.mu.Unlock()
		added = true
	}
	if added {
		select {
		case s.sig <- struct{}{}:
		default: // a pass is pending already
		}
	}
}

// Sig receives a value when hashes were listed since the last receive.
func (s *Strays) Sig() <-chan struct{} { return s.sig }

// Take returns the listed hashes and empties the list; nil when empty.
func (s *Strays) Take() map[uint64]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.set
	s.set = nil
	return set
}

// Len returns the number of hashes listed.
func (s *Strays) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.set)
}

// Run calls pass once per signal (Sig), debounce after it (rings that
// disagree settle first, so a state is not sent back and forth), until
// stop is closed.
func (s *Strays) Run(stop <-chan struct{}, debounce time.Duration, pass func()) {
	for {
		select {
		case <-stop:
			return
		case <-s.sig:
		}
		if debounce > 0 {
			t := time.NewTimer(debounce)
			select {
			case <-stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		pass()
	}
}
