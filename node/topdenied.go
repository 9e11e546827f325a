package node

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// This file is the most-limited keys: each node counts the denials its own
// callers got (owner-decided, forwarded and cached denials alike) per key
// in a space-saving summary (Metwally et al.) of a bounded number of
// counters, one per 10-second slot over the last minute. Memory is bounded
// by Config.TopDeniedKeys counters per slot, each holding its key; the
// counts are never metric labels (keys are unbounded).

const (
	topSlots   = 6
	topSlotDur = 10 * time.Second
)

// DeniedKey is one of the most-limited keys: Denials counted over the last
// minute on this node (an overestimate by at most Error, space-saving's
// bound: a key that entered the summary late inherits the count of the key
// it replaced).
type DeniedKey struct {
	Key     string
	Denials int64
	Error   int64
}

type topDenied struct {
	mu    sync.Mutex
	k     int
	slots [topSlots]topSlot
}

type topSlot struct {
	start int64 // node clock (ns) the slot began; 0 = empty
	m     map[string]*DeniedKey
}

func newTopDenied(k int) *topDenied {
	if k <= 0 {
		return nil
	}
	return &topDenied{k: k}
}

// note counts one denial of key at now (node clock ns).
func (t *topDenied) note(key string, now int64) {
	start := now - now%int64(topSlotDur)
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.slots[(start/int64(topSlotDur))%topSlots]
	if s.start != start || s.m == nil {
		s.start = start
		s.m = make(map[string]*DeniedKey, t.k)
	}
	if e := s.m[key]; e != nil {
		e.Denials++
		return
	}
	key = strings.Clone(key) // a forwarded batch's keys share a reused buffer
	if len(s.m) < t.k {
		s.m[key] = &DeniedKey{Key: key, Denials: 1}
		return
	}
	var minE *DeniedKey
	for _, e := range s.m {
		if minE == nil || e.Denials < minE.Denials {
			minE = e
		}
	}
	delete(s.m, minE.Key)
	s.m[key] = &DeniedKey{Key: key, Denials: minE.Denials + 1, Error: minE.Denials}
}

// top returns up to n keys by denials over the minute before now.
func (t *topDenied) top(n int, now int64) []DeniedKey {
	sum := map[string]*DeniedKey{}
	t.mu.Lock()
	for i := range t.slots {
		s := &t.slots[i]
		if s.m == nil || now-s.start >= topSlots*int64(topSlotDur) {
			continue
		}
		for k, e := range s.m {
			a := sum[k]
			if a == nil {
				a = &DeniedKey{Key: k}
				sum[k] = a
			}
			a.Denials += e.Denials
			a.Error += e.Error
		}
	}
	t.mu.Unlock()
	out := make([]DeniedKey, 0, len(sum))
	for _, e := range sum {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b DeniedKey) int {
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

// TopDenied returns up to n (1..Config.TopDeniedKeys) of the keys this
// node's callers were denied most over the last minute, most denied first
// (ties by key). Empty when Config.TopDeniedKeys is 0. Keys are the callers'
// own strings: show them to operators, never as metric labels.
func (n *Node) TopDenied(count int) []DeniedKey {
	if n.top == nil || count <= 0 {
		return nil
	}
	return n.top.top(min(count, n.top.k), n.clock())
}

// noteDenied counts a denied check of c for TopDenied (not peeks: a
// denial of 0 hits is a full key looked at, not a caller limited).
func (n *Node) noteDenied(c *Check) {
	if n.top != nil && c.Hits > 0 {
		n.top.note(c.Key, n.clock())
	}
}
