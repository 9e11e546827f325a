package lease

import (
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/store"
)

// Holds is the owner's side of GCRA and token-bucket leases: the slices it
// lent of each key, held back from every admission of the key until the
// lease has ended and the slice is recorded in the key's state.
//
// Why not take the slice from the state at the grant. A GCRA or
// token-bucket state forgets admitted hits at the limit's rate: a slice
// taken at the grant and admitted by the lessee later would be forgotten
// before its admissions are, and the owner could then admit a full burst on
// top of them. So the owner does not record a slice when it lends it: it
// decides every check of the key as if the slices still out had been
// admitted at that instant (the state must be able to take the check's hits
// plus the held hits; only the check's are taken), and records a slice in
// the state, as admitted then, at the first decision after its lease ended
// (its lessee admits nothing after that). A slice the state cannot take yet
// stays held until it can. Over any interval, the admissions of the owner
// and of every lessee together then stay within the algorithm's bound: the
// last decision of the owner in the interval was made with every slice
// still out counted in full, and every slice that ended in the interval is
// recorded in it.
//
// The methods of a Shard are called with its lock held (Lock); Holds' own
// methods lock for themselves. The owner's decisions over the holds (Grant,
// TakeInto, Sweep, HandOff, Reset; grant.go) need the fields below, set
// once when the node starts; a zero Holds is only a table of slices.
type Holds struct {
	// Store is the owner's key states. A concrete store, not an interface:
	// TakeInto passes the owner's check's ownership test on to it, which an
	// interface call would move to the heap (an allocation per check).
	Store *store.Store
	// Clock returns the node clock (ns).
	Clock func() int64
	// Period is the longest a lease lives (Config.Lease.Period, > 0); a
	// check denied for held hits is told to retry after it.
	Period time.Duration
	// MaxShare bounds one grant to MaxShare × the key's capacity divided by
	// the number of other members (Config.Lease.MaxShare, in (0, 1]).
	MaxShare float64
	// Owns returns, for a sweep, the ownership test of the key with ring
	// hash h under the node's current ring (see store.Take's owns), nil when
	// the node does not own the key now.
	Owns func(h uint64) func() bool
	// Log receives a DEBUG line for each grant its backup did not take.
	Log *slog.Logger

	n      atomic.Int64 // slices held, in all shards
	ids    atomic.Uint64
	shards [holdShards]Shard
}

const holdShards = 64

// Shard is the slices of the keys whose ring hash falls in it.
type Shard struct {
	mu sync.Mutex
	s  *Holds
	m  map[holdKey][]hold
}

type holdKey struct {
	h    uint64
	kind algo.Kind
}

// hold is one lent slice: n hits under limit, usable by the lessee until
// end (owner clock, ns).
type hold struct {
	id    uint64
	n     int64
	end   int64
	limit algo.Limit
}

// Any reports whether any slice is held (one atomic load).
func (s *Holds) Any() bool { return s != nil && s.n.Load() > 0 }

// Lock locks and returns the shard of the key with ring hash h.
func (s *Holds) Lock(h uint64) *Shard {
	sh := &s.shards[h%holdShards]
	sh.mu.Lock()
	sh.s = s
	return sh
}

// Unlock unlocks sh.
func (sh *Shard) Unlock() { sh.mu.Unlock() }

// Held returns the hits held back from admissions of the key with ring hash
// h under algorithm k.
func (sh *Shard) Held(h uint64, k algo.Kind) int64 {
	var x int64
	for _, e := range sh.m[holdKey{h, k}] {
		x += e.n
	}
	return min(x, algo.MaxHits)
}

// Add holds a slice of n hits of the key with ring hash h under l, usable
// until end (owner clock, ns), and returns its id.
func (sh *Shard) Add(h uint64, l algo.Limit, n, end int64) uint64 {
	if sh.m == nil {
		sh.m = make(map[holdKey][]hold)
	}
	k := holdKey{h, l.Kind}
	id := sh.s.nextID()
	sh.m[k] = append(sh.m[k], hold{id: id, n: n, end: end, limit: l})
	sh.s.n.Add(1)
	return id
}

// nextID returns a new slice id: unique on this owner, and, starting from
// a random point, unlikely to be one another owner (or this member before a
// restart) gave, so that a renewal sent to a key's new owner names none of
// its slices. Never 0, always a positive int64.
func (s *Holds) nextID() uint64 {
	for {
		if s.ids.Load() == 0 {
			s.ids.CompareAndSwap(0, rand.Uint64()>>2|1)
		}
		if id := s.ids.Add(1) & (1<<63 - 1); id != 0 {
			return id
		}
	}
}

// Hits returns the hits of slice id of the key with ring hash h under k,
// false when the owner no longer holds it (recorded, dropped, or never
// lent here).
func (sh *Shard) Hits(h uint64, k algo.Kind, id uint64) (int64, bool) {
	for _, e := range sh.m[holdKey{h, k}] {
		if e.id == id {
			return e.n, true
		}
	}
	return 0, false
}

// Set makes slice id of the key with ring hash h under k hold n hits
// (a renewal: the rest was recorded as used).
func (sh *Shard) Set(h uint64, k algo.Kind, id uint64, n int64) {
	hs := sh.m[holdKey{h, k}]
	for i := range hs {
		if hs[i].id == id {
			hs[i].n = n
			return
		}
	}
}

// Remove forgets the slice id of the key with ring hash h under k (a grant
// that was not answered).
func (sh *Shard) Remove(h uint64, k algo.Kind, id uint64) {
	key := holdKey{h, k}
	hs := sh.m[key]
	for i := range hs {
		if hs[i].id == id {
			hs[i] = hs[len(hs)-1]
			hs = hs[:len(hs)-1]
			sh.s.n.Add(-1)
			break
		}
	}
	if len(hs) == 0 {
		delete(sh.m, key)
	} else {
		sh.m[key] = hs
	}
}

// Record records in the state the slices of the key with ring hash h under
// k whose lease ended before now: take(hits, l) takes them as admitted now
// and reports whether the state took them; a slice it refused stays held.
func (sh *Shard) Record(h uint64, k algo.Kind, now int64, take func(hits int64, l algo.Limit) bool) {
	key := holdKey{h, k}
	hs := sh.m[key]
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].end >= now || !take(hs[i].n, hs[i].limit) {
			continue
		}
		hs[i] = hs[len(hs)-1]
		hs = hs[:len(hs)-1]
		sh.s.n.Add(-1)
	}
	if len(hs) == 0 {
		delete(sh.m, key)
	} else {
		sh.m[key] = hs
	}
}

// Drop forgets the slices of the key with ring hash h under k (a reset that
// every member acknowledged: no lessee holds any of them any more).
func (sh *Shard) Drop(h uint64, k algo.Kind) {
	key := holdKey{h, k}
	sh.s.n.Add(-int64(len(sh.m[key])))
	delete(sh.m, key)
}

// Key names the slices of one key under one algorithm.
type Key struct {
	H    uint64 // ring hash
	Kind algo.Kind
}

// Ended returns the keys with a slice whose lease ended before now (owner
// clock, ns): the keys no decision has touched since, whose slices the
// owner records (or forgets) in a sweep.
func (s *Holds) Ended(now int64) []Key {
	if !s.Any() {
		return nil
	}
	var out []Key
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, hs := range sh.m {
			for _, e := range hs {
				if e.end < now {
					out = append(out, Key{k.h, k.kind})
					break
				}
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// Keys returns every key with a slice held.
func (s *Holds) Keys() []Key {
	if !s.Any() {
		return nil
	}
	var out []Key
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k := range sh.m {
			out = append(out, Key{k.h, k.kind})
		}
		sh.mu.Unlock()
	}
	return out
}
