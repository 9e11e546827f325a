package node

import (
	"sync"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/algo"
)

// numShards is the number of independently locked shards of a store (a power of
// two). 256 keeps lock contention negligible at 64 concurrent callers while a
// whole-shard scan stays short (4k keys per shard at 1M keys).
const numShards = 256

// numKinds sizes the per-algorithm maps of a shard, indexed by algo.Kind (index 0,
// the invalid Kind, stays unused).
const numKinds = int(algo.TokenBucket) + 1

// entry is one key's state on its owner.
type entry struct {
	st    algo.State
	limit algo.Limit // the Limit of the last check, used to judge idleness
	// lastNow is the `now` of the last check (owner clock or caller timestamp) and
	// lastWall the owner clock at that moment; idleness is judged at
	// lastNow + (wall - lastWall) so keys replayed with old caller timestamps age
	// at the wall-clock rate instead of expiring at once.
	lastNow, lastWall int64
	// callerClock is set when the last check carried the caller's timestamp.
	// Caller clocks may step back (a replayed log does), and a state that is full at
	// lastNow+elapsed may not be full at an earlier caller time, so such a key is
	// dropped only once it is idle and has also gone unchecked for a whole Period
	// of owner-clock time.
	callerClock bool
}

// idle reports whether dropping e changes no future decision, at owner time wall.
func (e *entry) idle(wall int64) bool {
	elapsed := wall - e.lastWall
	if e.callerClock && elapsed < int64(e.limit.Period) {
		return false
	}
	return e.st.Idle(e.lastNow+elapsed, e.limit)
}

// shard is a lock and the states whose key hashes to it. Checks for one key always
// take the same shard's lock, which serializes them: this is what makes every
// decision atomic. (A goroutine per shard was benchmarked against the lock and
// lost: see BenchmarkShardExecutors.) There is one map per algorithm, so the same
// key checked with two algorithms is two independent limiters (switching
// algorithm never resets or corrupts a state), and lookups take the runtime's
// fast path for string keys.
type shard struct {
	mu sync.Mutex
	m  [numKinds]map[string]*entry
	_  [64 - 8 - 8*numKinds%64]byte // one shard per 64-byte cache line
}

// store is the owner-side key space of a node (or its local fallback space).
type store struct {
	hash    func(string) uint64 // the ring's key hash: callers pass it to take
	shards  [numShards]shard
	keys    atomic.Int64
	maxKeys int64
}

func newStore(maxKeys int, hash func(string) uint64) *store {
	s := &store{maxKeys: int64(maxKeys), hash: hash}
	for i := range s.shards {
		for k := range s.shards[i].m {
			s.shards[i].m[k] = make(map[string]*entry)
		}
	}
	return s
}

// shardOf picks the shard of a key from its hash (s.hash(key)).
func shardOf(h uint64) uint64 { return h & (numShards - 1) }

// take applies one check of key, whose hash (s.hash) is h, under its shard's lock. owns, when not nil, is called
// under the lock and must report whether this node still owns the key: it closes
// the race with a handoff that extracts the shard's states after a ring change.
// It returns errNotOwner when owns says no, ErrTooManyKeys at the key bound, or
// the algorithm's validation error.
func (s *store) take(h uint64, key string, l algo.Limit, hits, now, wall int64, owns func() bool, onEvict func(string)) (algo.Decision, error) {
	if !l.Kind.Valid() {
		return algo.Decision{}, l.Validate()
	}
	sh := &s.shards[shardOf(h)]
	m := sh.m[l.Kind]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if owns != nil && !owns() {
		return algo.Decision{}, errNotOwner
	}
	e := m[key]
	if e == nil {
		if hits == 0 {
			// A peek on an unknown key: answer from a fresh state, store nothing.
			var fresh algo.State
			return fresh.Take(now, 0, l)
		}
		if s.keys.Load() >= s.maxKeys {
			// Drop idle keys everywhere: release this shard's lock so shard locks are
			// never held two at a time, then look the key up again.
			sh.mu.Unlock()
			s.dropIdle(wall, onEvict)
			sh.mu.Lock()
			if owns != nil && !owns() {
				return algo.Decision{}, errNotOwner
			}
			if e = m[key]; e != nil {
				return s.update(e, l, hits, now, wall)
			}
			if s.keys.Load() >= s.maxKeys {
				if onEvict != nil {
					onEvict("refused")
				}
				return algo.Decision{}, ErrTooManyKeys
			}
		}
		e = &entry{}
		d, err := e.st.Take(now, hits, l)
		if err != nil {
			return d, err
		}
		e.limit, e.lastNow, e.lastWall, e.callerClock = l, now, wall, now != wall
		m[key] = e
		s.keys.Add(1)
		return d, nil
	}
	return s.update(e, l, hits, now, wall)
}

// update applies a check to an existing entry; the shard lock is held.
func (s *store) update(e *entry, l algo.Limit, hits, now, wall int64) (algo.Decision, error) {
	d, err := e.st.Take(now, hits, l)
	if err != nil {
		return d, err
	}
	if hits > 0 {
		e.limit = l
		if now > e.lastNow {
			e.lastNow = now
		}
		e.lastWall = wall
		e.callerClock = now != wall
	}
	return d, nil
}

// dropIdleLocked removes the shard's states that are back to full capacity at
// the time they have aged to (see entry).
func (s *store) dropIdleLocked(sh *shard, wall int64, onEvict func(string)) {
	for _, m := range sh.m {
		for k, e := range m {
			if !e.idle(wall) {
				continue
			}
			delete(m, k)
			s.keys.Add(-1)
			if onEvict != nil {
				onEvict("idle")
			}
		}
	}
}

// dropIdle scans every shard once, one lock at a time.
func (s *store) dropIdle(wall int64, onEvict func(string)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.dropIdleLocked(sh, wall, onEvict)
		sh.mu.Unlock()
	}
}

// extract removes and returns the states for which move(key) is true, one shard
// lock at a time.
func (s *store) extract(move func(key string) bool) []movedState {
	var out []movedState
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, m := range sh.m {
			for k, e := range m {
				if move(k) {
					out = append(out, movedState{key: k, e: e})
					delete(m, k)
					s.keys.Add(-1)
				}
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// movedState is a state taken out of a store for a handoff.
type movedState struct {
	key string
	e   *entry
}

// install merges a handed-off state whose last check was at lastNow (Unix ns; the
// caller's time when callerClock, 0 if unknown): an existing state for the key
// keeps the more restrictive of the two, compared at the later of the two last
// times. Installing never counts against MaxKeys refusals: a handoff must not lose
// state, so the bound may be exceeded briefly.
func (s *store) install(key string, l algo.Limit, st algo.State, lastNow int64, callerClock bool, wall int64) {
	if lastNow == 0 {
		lastNow = wall
	}
	sh := &s.shards[shardOf(s.hash(key))]
	m := sh.m[l.Kind] // l was validated by the caller
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := m[key]; e != nil {
		at := max(e.lastNow, lastNow)
		e.st.Merge(&st, at, l)
		e.lastNow, e.lastWall = at, wall
		e.callerClock = e.callerClock || callerClock
		return
	}
	m[key] = &entry{st: st, limit: l, lastNow: lastNow, lastWall: wall, callerClock: callerClock}
	s.keys.Add(1)
}

func (s *store) len() int { return int(s.keys.Load()) }
