// Package topdenied counts the denials a node's callers got per key, to
// name the most-limited keys over the last minute in bounded memory: a
// space-saving summary (Metwally, Agrawal and El Abbadi, "Efficient
// Computation of Frequent and Top-k Elements in Data Streams", 2005) of at
// most K counters per 10-second slot, six slots. Keys are callers' strings:
// show them to operators, never as metric labels.
package topdenied

import (
	"slices"
	"strings"
	"sync"
	"time"
)

const (
	topSlots   = 6
	topSlotDur = 10 * time.Second
)

// Entry is one counted key: Denials over the summed slots, an overestimate
// by at most Error (space-saving's bound: a key that entered the summary
// late inherits the count of the key it replaced).
type Entry struct {
	Key     string
	Denials int64
	Error   int64
}

// Tracker is the summary; its methods are safe for concurrent use. Memory
// is at most 6·K entries, each holding its key.
type Tracker struct {
	mu    sync.Mutex
	k     int
	slots [topSlots]topSlot
}

type topSlot struct {
	start int64 // node clock (ns) the slot began; 0 = empty
	m     map[string]*Entry
}

// New returns a Tracker of k counters per slot, or nil when k <= 0 (off).
func New(k int) *Tracker {
	if k <= 0 {
		return nil
	}
	return &Tracker{k: k}
}

// Note counts one denial of key at now (a monotonic clock, ns).
func (t *Tracker) Note(key string, now int64) {
	start := now - now%int64(topSlotDur)
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.slots[(start/int64(topSlotDur))%topSlots]
	if s.start != start || s.m == nil {
		s.start = start
		s.m = make(map[string]*Entry, t.k)
	}
	if e := s.m[key]; e != nil {
		e.Denials++
		return
	}
	key = strings.Clone(key) // a forwarded batch's keys share a reused buffer
	if len(s.m) < t.k {
		s.m[key] = &Entry{Key: key, Denials: 1}
		return
	}
	var minE *Entry
	for _, e := range s.m {
		if minE == nil || e.Denials < minE.Denials {
			minE = e
		}
	}
	delete(s.m, minE.Key)
	s.m[key] = &Entry{Key: key, Denials: minE.Denials + 1, Error: minE.Denials}
}

// K returns the counters per slot, the most Top can return.
func (t *Tracker) K() int { return t.k }

// Top returns up to n keys by denials over the minute before now (the
// clock of Note), most denied first, ties by key.
func (t *Tracker) Top(n int, now int64) []Entry {
	sum := map[string]*Entry{}
	t.mu.Lock()
	for i := range t.slots {
		s := &t.slots[i]
		if s.m == nil || now-s.start >= topSlots*int64(topSlotDur) {
			continue
		}
		for k, e := range s.m {
			a := sum[k]
			if a == nil {
				a = &Entry{Key: k}
				sum[k] = a
			}
			a.Denials += e.Denials
			a.Error += e.Error
		}
	}
	t.mu.Unlock()
	out := make([]Entry, 0, len(sum))
	for _, e := range sum {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if a.Denials != b.Denials {
			return int(b.Denials - a.Denials)
		}
		if a.Key < b.Key {
			return -1
		}
		return 1
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
