package store

import (
	"errors"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/algo"
)

// NumShards is the number of independently locked shards of a store (a power of
// two). 256 keeps lock contention negligible at 64 concurrent callers while a
// whole-shard scan stays short (4k keys per shard at 1M keys).
const NumShards = 256

// The store's errors. node re-exports ErrTooManyKeys under its own name, and
// turns ErrNotOwner into a "not owner" answer (it never reaches a caller).
var (
	// ErrTooManyKeys is matched by the *FullError of a check that would
	// create a new key on a store at its key bound (MaxKeys) after dropping
	// idle keys.
	ErrTooManyKeys = errors.New("node: too many keys")
	// ErrNotOwner is returned by Take when its owns callback says the node no
	// longer owns the key.
	ErrNotOwner = errors.New("node: not owner")
)

// A store keeps no key strings. A key is stored under its 64-bit ring hash
// (ring.Snapshot.Hash, xxhash64 of the key), its fingerprint:
//
//   - Two distinct keys with the same hash share one state. Among n keys on a
//     node, the probability that any two of the same algorithm collide is at
//     most n(n-1)/2^65 (the birthday bound): 2.7e-8 at 1M keys, 2.7e-6 at 10M.
//     (The hash 0 marks an empty slot and is stored as 1: one more colliding
//     pair in 2^64.) Exactness holds per hash, so it holds per key whenever
//     keys do not collide.
//   - The hash is what the ring places keys by (partition = hash mod
//     PartitionCount), so the owner of every stored state, and whether to hand
//     it off after a ring change, is computed from the stored hash alone; a
//     handoff carries the hash (transport.KeyState.KeyHash) and the new owner
//     stores the state under it, as if it had taken the check itself.
//
// What a key costs: its slot in the table of its algorithm (the hash, the
// packed state of algo.State.Pack, a 4-byte index into the shard's table of
// distinct Limits and 4 bytes of flags: 24 bytes for GCRA, 32 for TokenBucket
// and FixedWindow, 40 for SlidingWindowCounter) at a load of 0.54 to 0.81. A
// SlidingWindowLog key of at most two entries is packed in its 40-byte slot
// (algo.State.PackLog: count, entries); a longer log is boxed (its algo.State,
// its log and the tail last sent to its backup). A BucketedSlidingWindow key
// whose hits all sit in one bucket is packed in its 40-byte slot
// (algo.State.PackBucketed: width, bucket, count); one with hits in two buckets
// or more is boxed (its algo.State and 152 bytes of buckets). A boxed key stays
// boxed until it is dropped as idle. A key whose checks carry caller
// timestamps also has a clockRec.

// emptyHash is the slot hash of an empty slot; a key whose hash is emptyHash is
// stored under foldedHash.
const (
	emptyHash  = 0
	foldedHash = 1
)

// fold maps a key hash to the hash a store keeps it under.
func fold(h uint64) uint64 {
	if h == emptyHash {
		return foldedHash
	}
	return h
}

// clockRec is kept for a key whose last check time (lastNow: the caller's
// timestamp, or the owner clock) is not the owner clock at that check
// (lastWall): its idleness is judged at lastNow + (wall - lastWall) so that keys
// replayed with old caller timestamps age at the wall-clock rate instead of
// expiring at once. Caller clocks may step back (a replayed log does), and a
// state that is full at lastNow+elapsed may not be full at an earlier caller
// time, so a key whose last check carried the caller's time (flagCaller) is
// dropped only once it is idle and has also gone unchecked for a whole Period
// of owner-clock time. A key without a clockRec had lastNow == lastWall.
type clockRec struct {
	lastNow, lastWall int64
}

// kindTable is one algorithm's states in one shard: its slots, and the clock
// records of its caller-timestamped keys.
type kindTable[W words] struct {
	table[W]
	clocks map[uint64]clockRec
}

// shard is a lock and the states whose key hashes to it. Checks for one key always
// take the same shard's lock, which serializes them: this is what makes every
// decision atomic. (A goroutine per shard was benchmarked against the lock and
// lost: see BenchmarkShardExecutors.) There is one table per algorithm, so the
// same key checked with two algorithms is two independent limiters (switching
// algorithm never resets or corrupts a state).
type shard struct {
	mu sync.Mutex
	// dirty lists the keys whose state changed since the last replication
	// send (store.track only), each once (see dirty.go). Next to mu: a check
	// that changes a state reads it under the lock.
	dirty []dirtyRec
	// dirtyBits is the store's dirtyShards.
	dirtyBits *[NumShards / 64]atomic.Uint64
	gcra      kindTable[[1]int64]
	tb, fw    kindTable[[2]int64]
	swc       kindTable[[3]int64]
	swl       kindTable[[3]int64] // packed (w[0] >= 0, see loadLog) or boxed in logs
	bsw       kindTable[[3]int64] // packed (w[0] >= 0, see loadBucketed) or boxed in bkts
	limits    limitTable
	logs      boxes // SlidingWindowLog states, with their sent marks
	bkts      boxes // BucketedSlidingWindow states with hits in two buckets or more (no marks)
	// bwBuf and logBuf hold the buckets or the log of the packed state last
	// loaded (algo.UnpackBucketed, algo.UnpackLog), until it is packed again
	// or cloned, under mu.
	bwBuf  algo.BucketedWindowState
	logBuf algo.SlidingWindowLogState
	_      [64]byte // keep neighbouring shards' locks off this cache line
}

// Store is the owner-side key space of a node (or its local fallback space).
type Store struct {
	Hash    func(string) uint64 // the ring's key hash: callers pass it to take
	onEvict func(reason string) // Metrics.Eviction, or nil
	shards  [NumShards]shard
	keys    atomic.Int64
	maxKeys int64
	// track lists changed keys in their shard's dirty list, for replication.
	Track bool
	// live is whether the keys have backups now (set by Node.publish): while
	// not, a check does not list the key it changes (nothing would be sent;
	// the list would only be cleared, a second cache miss on the key's slot
	// per admitted check). A ring that brings backups lists every owned key
	// again (Node.resync) after setting live.
	Live atomic.Bool
	// dirtyShards has bit i set while shard i's dirty list may be non-empty,
	// so a replication send visits only those shards.
	dirtyShards [NumShards / 64]atomic.Uint64
	// fullScan is the owner clock (Unix ns) of the last scan for idle keys
	// at the bound (0: none), fullFree when that scan's earliest key left
	// frees room (math.MaxInt64: none). See makeRoom.
	fullScan, fullFree atomic.Int64
}

// New returns a store that holds at most maxKeys keys (see take), hashed
// by hash, and reports evictions to onEvict (nil: not reported).
func New(maxKeys int, hash func(string) uint64, onEvict func(reason string)) *Store {
	s := &Store{maxKeys: int64(maxKeys), Hash: hash, onEvict: onEvict}
	for i := range s.shards {
		s.shards[i].dirtyBits = &s.dirtyShards
	}
	return s
}

// ShardOf picks the shard of a key from its hash (s.Hash(key)).
func ShardOf(h uint64) uint64 { return h & (NumShards - 1) }

// Take applies one check of the key whose hash (s.Hash) is h, under its shard's
// lock. owns, when not nil, is called under the lock and must report whether this
// node still owns the key: it closes the race with a handoff that extracts the
// shard's states after a ring change. It returns ErrNotOwner when owns says no,
// a *FullError (ErrTooManyKeys) at the key bound, or the algorithm's
// validation error.
func (s *Store) Take(h uint64, l algo.Limit, hits, now, wall int64, owns func() bool) (algo.Decision, error) {
	var d algo.Decision
	err := s.TakeInto(&d, h, l, hits, now, wall, owns)
	return d, err
}

// TakeInto is take writing its Decision to *out (left unchanged on error): the
// owner-local path passes the caller's Decision down instead of copying one up
// through every call.
func (s *Store) TakeInto(out *algo.Decision, h uint64, l algo.Limit, hits, now, wall int64, owns func() bool) error {
	h = fold(h)
	sh := &s.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if owns != nil && !owns() {
		return ErrNotOwner
	}
	var c check // filled field by field: no temporary to copy
	c.s, c.sh, c.h, c.l, c.hits, c.now, c.wall = s, sh, h, l, hits, now, wall
	switch l.Kind {
	case algo.GCRA:
		return takeIn(out, &c, &sh.gcra, owns)
	case algo.TokenBucket:
		return takeIn(out, &c, &sh.tb, owns)
	case algo.FixedWindow:
		return takeIn(out, &c, &sh.fw, owns)
	case algo.SlidingWindowCounter:
		return takeIn(out, &c, &sh.swc, owns)
	case algo.SlidingWindowLog:
		return takeIn(out, &c, &sh.swl, owns)
	case algo.BucketedSlidingWindow:
		return takeIn(out, &c, &sh.bsw, owns)
	}
	return l.Validate()
}

// check is one check in flight under a shard lock.
type check struct {
	s               *Store
	sh              *shard
	h               uint64
	l               algo.Limit
	hits, now, wall int64
}

// takeIn is take on the table of c.l.Kind; the shard lock is held.
func takeIn[W words](out *algo.Decision, c *check, t *kindTable[W], owns func() bool) error {
	i := t.find(c.h)
	if i < 0 {
		// A fresh state; a log's or a bucketed window's is packed words,
		// decided without allocating its entries or buckets (unless the check
		// stores three entries, which takes the State).
		var fresh algo.State
		var d algo.Decision
		var err error
		var pw [max(algo.LogPackedWords, algo.BucketedPackedWords)]int64
		packed := false
		if c.l.Kind.PackedWords() == 0 {
			packed, err = takePacked(pw[:], &d, c)
		}
		if !packed && err == nil {
			d, err = fresh.Take(c.now, c.hits, c.l)
		}
		if c.hits == 0 || err != nil {
			// A peek on an unknown key answers from the fresh state and stores
			// nothing; an invalid check is refused before anything is stored or
			// dropped.
			if err == nil {
				*out = d
			}
			return err
		}
		if c.s.keys.Load() >= c.s.maxKeys {
			// Drop idle keys everywhere: release this shard's lock so shard locks are
			// never held two at a time, then look the key up again.
			c.sh.mu.Unlock()
			freeAt := c.s.makeRoom(c.wall)
			c.sh.mu.Lock()
			if owns != nil && !owns() {
				return ErrNotOwner
			}
			if i = t.find(c.h); i >= 0 {
				return t.update(out, c, i)
			}
			if c.s.keys.Load() >= c.s.maxKeys {
				if c.s.onEvict != nil {
					c.s.onEvict("refused")
				}
				return c.s.fullError(c.wall, freeAt)
			}
		}
		i = t.insert(c.h)
		sl := &t.slots[i]
		sl.lim = c.sh.limits.ref(c.l)
		if packed {
			copy(sl.words(), pw[:])
		} else {
			c.sh.save(c.l.Kind, &fresh, sl.words())
		}
		setClock(t, sl, c.now, c.wall, c.now != c.wall)
		c.s.keys.Add(1)
		if c.s.Track && c.s.Live.Load() {
			markSlot(c.sh, c.l.Kind, sl)
		}
		*out = d
		return nil
	}
	return t.update(out, c, i)
}

// anyKindTable is what the cold paths (idle scans, handoffs) need of a
// kindTable, whatever its word count.
type anyKindTable interface {
	has(h uint64) bool
	removeHash(sh *shard, k algo.Kind, h uint64) bool
	dropIdle(sh *shard, k algo.Kind, wall int64, dropped func(), earliest bool) int64
	extract(sh *shard, k algo.Kind, act func(h uint64) MoveAction, wall int64, out []Moved) (_ []Moved, removed int)
	install(sh *shard, m Moved, wall int64, track bool) bool
	copyDirty(sh *shard, k algo.Kind, h uint64, wall int64) (Moved, bool)
	markWhere(sh *shard, k algo.Kind, pred func(h uint64) bool)
	sendWhole(sh *shard, k algo.Kind, h uint64)
	appendLog(sh *shard, m Moved, wall int64) bool
	appendLive(sh *shard, k algo.Kind, wall int64, out []Moved) []Moved
}

// MoveAction is what a ring change does with one stored state (see
// store.extract).
type MoveAction uint8

const (
	// MoveKeep: this node still owns the key, or holds its replica.
	MoveKeep MoveAction = iota
	// MoveSend: hand the state to the key's new owner and remove it here.
	MoveSend
	// MoveSendCopy: hand the state to the key's new owner and keep a copy here as
	// its replica (this node is the key's new backup).
	MoveSendCopy
	// MoveDrop: remove the state without sending it (a replica of a key this
	// node is no longer the backup of).
	MoveDrop
)

func (t *kindTable[W]) update(out *algo.Decision, c *check, i int) error {
	sl := &t.slots[i]
	if w := sl.words(); c.l.Kind.PackedWords() == 0 && w[0] >= 0 {
		// A packed log or bucketed window is decided on its words; a check that
		// would leave three entries, or hits in two buckets, is declined and
		// goes on below (and boxes the state).
		ok, err := takePacked(w, out, c)
		if err != nil {
			return err
		}
		if ok {
			t.taken(out, c, sl)
			return nil
		}
	}
	var scratch algo.State
	// The hint is the emission interval of the key's last Limit: GCRA's Take
	// skips its division when the Limit is the same.
	st, boxed := c.sh.load(c.l.Kind, sl.words(), &scratch, c.sh.limits.ls[sl.lim].t)
	// Written straight to *out: a Decision spilled and copied right after its
	// fields were stored stalls the CPU's store forwarding.
	if err := st.TakeInto(out, c.now, c.hits, c.l); err != nil {
		return err
	}
	if c.hits > 0 && out.Allowed && !boxed {
		c.sh.repack(c.l.Kind, st, sl.words())
	}
	t.taken(out, c, sl)
	return nil
}

// takePacked decides c on w, the packed state of a log or bucketed-window key
// (algo.TakeLogPacked, algo.TakeBucketedPacked); ok false: declined.
func takePacked(w []int64, out *algo.Decision, c *check) (ok bool, err error) {
	if c.l.Kind == algo.SlidingWindowLog {
		return algo.TakeLogPacked(w, out, c.now, c.hits, c.l)
	}
	return algo.TakeBucketedPacked(w, out, c.now, c.hits, c.l)
}

// taken records a check decided on slot sl whose state is stored: a check
// with hits sets the key's last check time, and one that admitted hits lists
// the key as changed and sets its Limit. The Limit is the one the state was
// last written under (a denied check writes nothing): a state admitted under
// l is plausible under l (algo.State.Plausible), so its replica passes the
// backup's check even while checks under a tighter limit are denied on the
// debt an earlier, looser one left.
func (t *kindTable[W]) taken(out *algo.Decision, c *check, sl *slot[W]) {
	if c.hits > 0 {
		if out.Allowed {
			if cur := c.sh.limits.at(sl.lim); cur != c.l {
				c.sh.limits.unref(sl.lim)
				sl.lim = c.sh.limits.ref(c.l)
			}
		}
		// The last check time: the later of this one and the recorded one. A key
		// without a clockRec was last checked at its owner clock then, which is
		// not kept; a caller time before it is then recorded as is, which ages
		// the key later than that clock would (never drops a state sooner).
		last := c.now
		if sl.flags&flagClock != 0 {
			last = max(last, t.clocks[sl.h].lastNow)
		}
		setClock(t, sl, last, c.wall, c.now != c.wall)
		switch {
		case out.Allowed && c.s.Track && c.s.Live.Load():
			markSlot(c.sh, c.l.Kind, sl) // after the Limit and the clock: its entry copies them
		case sl.flags&flagDirty != 0:
			touchSlot(c.sh, c.l.Kind, sl) // a new clockRec: the entry's copy is stale
		}
	}
}

// peerLastNow is the last check time to record for a state installed from a
// peer (a replica, a handoff) whose last check was at lastNow, when this
// node's clock reads wall: wall itself, so that no clockRec is kept, when
// lastNow is a node's clock (not a caller's timestamp) and not later than wall.
//
// Why that is exact: such a state's times (a TAT, a window start) are the
// sending node's clock, and this node judges it with its own clock from now
// on: it decides on it with its own clock once it owns the key, so it judges
// idleness with the same clock. With synchronized clocks a state is then idle
// here exactly when it is idle on its sender (a clockRec would age it from
// lastNow instead and keep it the transfer delay longer, which changes no
// decision); a clock skew between the two nodes shifts both the same way.
// Every replicated key used to carry a clockRec for the few milliseconds
// between its owner's clock and its backup's: a map entry per key and a map
// assignment per replication send (BenchmarkMemoryPerReplica: 89.5 B per
// replicated GCRA key with it, 33.8 B without).
func peerLastNow(lastNow, wall int64, caller bool) int64 {
	if !caller && lastNow <= wall {
		return wall
	}
	return lastNow
}

// setClock records that the last check of sl was at lastNow, owner clock wall,
// and whether lastNow was the caller's timestamp.
func setClock[W words](t *kindTable[W], sl *slot[W], lastNow, wall int64, caller bool) {
	f := uint32(0)
	if lastNow != wall || caller {
		f = flagClock
		if caller {
			f |= flagCaller
		}
		if t.clocks == nil {
			t.clocks = make(map[uint64]clockRec)
		}
		t.clocks[sl.h] = clockRec{lastNow: lastNow, lastWall: wall}
	} else if sl.flags&flagClock != 0 {
		delete(t.clocks, sl.h)
	}
	sl.flags = f | sl.flags&^(flagClock|flagCaller)
}

// load returns the state of kind k held in w: for a packed state, unpacked
// into *scratch (boxed false: the caller stores it back with repack, or keeps
// a Clone of it, before it releases the shard lock or loads another); for a
// boxed one, the boxed State itself (boxed true), which Take changes in place.
// hint is the key's limitRec.t: passed to algo.UnpackState, and for a log the
// Limit its buffer is sized for (algo.UnpackLog).
func (sh *shard) load(k algo.Kind, w []int64, scratch *algo.State, hint int64) (st *algo.State, boxed bool) {
	if k.PackedWords() == 0 {
		if k == algo.BucketedSlidingWindow {
			return sh.loadBucketed(w, scratch)
		}
		return sh.loadLog(w, scratch, hint)
	}
	*scratch = algo.UnpackState(k, w, hint)
	return scratch, false
}

// loadLog is load for a sliding-window log: w[0] < 0 is the box at index
// -w[0]-1, else w is packed (algo.State.PackLog; its count, w[0], is never
// negative) and is unpacked with its entries in sh.logBuf.
func (sh *shard) loadLog(w []int64, scratch *algo.State, limit int64) (*algo.State, bool) {
	if w[0] < 0 {
		return sh.logs.at(-w[0] - 1), true
	}
	*scratch = algo.UnpackLog(w, &sh.logBuf, limit)
	return scratch, false
}

// loadBucketed is load for a bucketed-window key: w[0] < 0 is the box at
// index -w[0]-1, else w is packed (algo.State.PackBucketed; its width, w[0],
// is never negative) and is unpacked with its buckets in sh.bwBuf.
func (sh *shard) loadBucketed(w []int64, scratch *algo.State) (*algo.State, bool) {
	if w[0] < 0 {
		return sh.bkts.at(-w[0] - 1), true
	}
	*scratch = algo.UnpackBucketed(w, &sh.bwBuf)
	return scratch, false
}

// repack stores st, a state of algorithm k that load returned unboxed and that
// has changed, back in w. A log or bucketed-window state that no longer packs
// (three entries, hits in two buckets) moves to a box of its own; a log's box
// starts with no sent mark, so its next replication sends it whole.
func (sh *shard) repack(k algo.Kind, st *algo.State, w []int64) {
	switch k {
	case algo.SlidingWindowLog:
		if !st.PackLog(w) {
			w[0] = -sh.logs.add(st.Clone(), true) - 1
		}
	case algo.BucketedSlidingWindow:
		if !st.PackBucketed(w) {
			w[0] = -sh.bkts.add(st.Clone(), false) - 1
		}
	default:
		st.Pack(w)
	}
}

// save stores st, the State of a new key of algorithm k, in w: packed, or in a
// new box. A st of another Kind is stored as a fresh state of k.
func (sh *shard) save(k algo.Kind, st *algo.State, w []int64) {
	if st.Kind() != k {
		clear(w) // UnpackState, UnpackLog and UnpackBucketed of zero words are fresh states
		return
	}
	sh.repack(k, st, w)
}

// release frees what a removed slot's words hold outside the slot.
func (sh *shard) release(k algo.Kind, w []int64) {
	switch {
	case k == algo.SlidingWindowLog && w[0] < 0:
		sh.logs.release(-w[0] - 1)
	case k == algo.BucketedSlidingWindow && w[0] < 0:
		sh.bkts.release(-w[0] - 1)
	}
}

// logBox returns the index in sh.logs of the boxed log in w, or -1 for a
// packed one (which has no sent mark: it is always sent whole).
func logBox(w []int64) int64 {
	if w[0] < 0 {
		return -w[0] - 1
	}
	return -1
}

// lastNow returns the last check time of sl and the owner clock at it (wall
// when sl has no clockRec).
func (t *kindTable[W]) lastNow(sl *slot[W], wall int64) (lastNow, lastWall int64) {
	if sl.flags&flagClock != 0 {
		r := t.clocks[sl.h]
		return r.lastNow, r.lastWall
	}
	return wall, wall
}

// idle reports whether dropping slot sl changes no future decision, at owner
// time wall.
func (t *kindTable[W]) idle(sh *shard, k algo.Kind, sl *slot[W], wall int64) bool {
	l := sh.limits.at(sl.lim)
	at := wall
	if sl.flags&flagClock != 0 {
		r := t.clocks[sl.h]
		elapsed := wall - r.lastWall
		if sl.flags&flagCaller != 0 && elapsed < int64(l.Period) {
			return false
		}
		at = r.lastNow + elapsed
	}
	var scratch algo.State
	st, _ := sh.load(k, sl.words(), &scratch, 0)
	return st.Idle(at, l)
}

// removeAt removes slot i with everything it holds; the caller counts it.
func (t *kindTable[W]) removeAt(sh *shard, k algo.Kind, i int) {
	sl := &t.slots[i]
	sh.unlist(k, sl.h, sl.flags)
	sh.release(k, sl.words())
	sh.limits.unref(sl.lim)
	if sl.flags&flagClock != 0 {
		delete(t.clocks, sl.h)
	}
	t.remove(i)
}

// dropIdle removes the table's idle states (calling dropped for each). With
// earliest it also returns when the earliest state it keeps becomes idle
// (Unix ns; math.MaxInt64 when it keeps none, or without earliest: the
// periodic scan skips the peek that costs).
func (t *kindTable[W]) dropIdle(sh *shard, k algo.Kind, wall int64, dropped func(), earliest bool) int64 {
	first := int64(math.MaxInt64)
	t.scan(func(i int) {
		sl := &t.slots[i]
		if earliest {
			if at := t.idleAt(sh, k, sl, wall); at > wall {
				first = min(first, at)
				return
			}
		} else if !t.idle(sh, k, sl, wall) {
			return
		}
		t.removeAt(sh, k, i)
		dropped()
	})
	t.shrink()
	return first
}

func (t *kindTable[W]) extract(sh *shard, k algo.Kind, act func(h uint64) MoveAction, wall int64, out []Moved) (_ []Moved, removed int) {
	t.scan(func(i int) {
		sl := &t.slots[i]
		a := act(sl.h)
		if a == MoveKeep {
			return
		}
		if a != MoveDrop {
			out = append(out, t.copyAt(sh, k, sl, wall))
		}
		if a != MoveSendCopy {
			t.removeAt(sh, k, i)
			removed++
		}
	})
	t.shrink()
	return out, removed
}

// copyAt returns a copy of slot sl's state (a deep copy of a boxed state, whose
// log or buckets keep changing in place after the shard lock is released, and
// of a packed log or bucketed-window state, whose entries or buckets are
// sh.logBuf or sh.bwBuf).
func (t *kindTable[W]) copyAt(sh *shard, k algo.Kind, sl *slot[W], wall int64) Moved {
	var scratch algo.State
	st, boxed := sh.load(k, sl.words(), &scratch, 0)
	if boxed || k.PackedWords() == 0 {
		c := st.Clone()
		st = &c
	}
	lastNow, _ := t.lastNow(sl, wall)
	return Moved{
		H: sl.h, Limit: sh.limits.at(sl.lim), St: *st,
		LastNow: lastNow, CallerClock: sl.flags&flagCaller != 0,
	}
}

// Prefetch starts loading the home slot of the key with hash h (not folded)
// in its table for algorithm k, without the shard lock (table.prefetchHome).
// A batch calls it for every key before deciding the first. The boxed states
// of a SlidingWindowLog key, or of a BucketedSlidingWindow key with hits in
// two buckets, are a second line, not prefetched.
//
// Only a store of prefetchMinKeys keys or more prefetches: a smaller one's
// slots stay in the CPU's caches, where a prefetch costs its calls and saves
// nothing, so the check that keeps it out is one load of the key count.
func (s *Store) Prefetch(h uint64, k algo.Kind) {
	if s.keys.Load() >= prefetchMinKeys {
		s.PrefetchLarge(h, k)
	}
}

// PrefetchLarge is store.prefetch past its key-count check (apart so that the
// check is inlined into the callers). h may be folded already (fold is
// idempotent).
func (s *Store) PrefetchLarge(h uint64, k algo.Kind) {
	h = fold(h)
	sh := &s.shards[ShardOf(h)]
	switch k {
	case algo.GCRA:
		sh.gcra.prefetchHome(h)
	case algo.TokenBucket:
		sh.tb.prefetchHome(h)
	case algo.FixedWindow:
		sh.fw.prefetchHome(h)
	case algo.SlidingWindowCounter:
		sh.swc.prefetchHome(h)
	case algo.SlidingWindowLog:
		sh.swl.prefetchHome(h)
	case algo.BucketedSlidingWindow:
		sh.bsw.prefetchHome(h)
	}
}

// prefetchMinKeys is the key count from which store.prefetch prefetches:
// 2^17 GCRA keys are about 4.7 MiB of slots (24 B each at a load of 2/3), more
// than a core's L2 cache; 10k keys (0.4 MiB) are not prefetched
// (BenchmarkForwardBatchKeys, BenchmarkAllowLocalKeys).
const prefetchMinKeys = 1 << 17

// PrefetchDirty starts loading the slot of every key in the dirty lists, a
// shard lock at a time (store.prefetch), so that takeDirtyInto's copies, which
// follow, find them loaded: at a million keys each is a cache miss (the check
// that listed it was ReplicationLag ago), and misses started together overlap.
func (s *Store) PrefetchDirty() {
	for w := range s.dirtyShards {
		for bitsSet := s.dirtyShards[w].Load(); bitsSet != 0; bitsSet &= bitsSet - 1 {
			sh := &s.shards[w*64+bits.TrailingZeros64(bitsSet)]
			sh.mu.Lock()
			for _, r := range sh.dirty {
				s.PrefetchLarge(r.h, r.k)
			}
			sh.mu.Unlock()
		}
	}
}

// copyDirty returns a copy of the state of the key with hash h, listed as
// changed; false if the key is gone.
func (t *kindTable[W]) copyDirty(sh *shard, k algo.Kind, h uint64, wall int64) (Moved, bool) {
	i := t.find(h)
	if i < 0 {
		return Moved{}, false
	}
	sl := &t.slots[i]
	box := int64(-1)
	if k == algo.SlidingWindowLog {
		box = logBox(sl.words())
	}
	if box < 0 {
		return t.copyAt(sh, k, sl, wall), true // not a log, or a packed one: whole
	}
	// A boxed log: send the entries appended since the tail last sent when the
	// replica holds that tail, the whole log otherwise.
	st, mark := sh.logs.at(box), &sh.logs.sent[box]
	var m Moved
	if delta, ok := st.LogSince(mark.t, int64(mark.n)); mark.valid && ok {
		lastNow, _ := t.lastNow(sl, wall)
		m = Moved{
			H: sl.h, Limit: sh.limits.at(sl.lim), St: delta, LastNow: lastNow,
			CallerClock: sl.flags&flagCaller != 0, Delta: true, After: mark.t, AfterN: int64(mark.n),
		}
	} else {
		m = t.copyAt(sh, k, sl, wall)
	}
	tail, n := st.LogTail()
	mark.t, mark.n = tail, int32(n) // n <= a log's length, an int32
	mark.valid = true
	return m, true
}

// sendWhole makes the next replication send of the key with hash h carry its
// whole state (its replica is missing or behind) and lists it as changed.
func (t *kindTable[W]) sendWhole(sh *shard, k algo.Kind, h uint64) {
	i := t.find(h)
	if i < 0 {
		return
	}
	sl := &t.slots[i]
	if box := logBox(sl.words()); k == algo.SlidingWindowLog && box >= 0 {
		sh.logs.sent[box].valid = false
	}
	markSlot(sh, k, sl)
}

// markWhere lists as dirty every key whose hash satisfies pred, to be sent
// whole (a new backup holds nothing of it).
func (t *kindTable[W]) markWhere(sh *shard, k algo.Kind, pred func(h uint64) bool) {
	for i := range t.slots {
		if sl := &t.slots[i]; sl.h != 0 && pred(sl.h) {
			if box := logBox(sl.words()); k == algo.SlidingWindowLog && box >= 0 {
				sh.logs.sent[box].valid = false
			}
			markSlot(sh, k, sl)
		}
	}
}

// appendLog applies a replicated log delta m to the replica of its key; false
// if the key is not held or the delta does not extend it (algo.State.AppendLog).
func (t *kindTable[W]) appendLog(sh *shard, m Moved, wall int64) bool {
	i := t.find(m.H)
	if i < 0 {
		return false
	}
	sl := &t.slots[i]
	var scratch algo.State
	st, boxed := sh.load(algo.SlidingWindowLog, sl.words(), &scratch, sh.limits.ls[sl.lim].t)
	if !st.AppendLog(m.After, m.AfterN, &m.St, m.Limit) {
		return false
	}
	if !boxed {
		sh.repack(algo.SlidingWindowLog, st, sl.words())
	}
	if cur := sh.limits.at(sl.lim); cur != m.Limit {
		sh.limits.unref(sl.lim)
		sl.lim = sh.limits.ref(m.Limit)
	}
	last, _ := t.lastNow(sl, wall)
	cc := sl.flags&flagCaller != 0 || m.CallerClock
	setClock(t, sl, peerLastNow(max(last, m.LastNow), wall, cc), wall, cc)
	return true
}

// has reports whether t holds the key whose (folded) hash is h.
func (t *kindTable[W]) has(h uint64) bool { return t.find(h) >= 0 }

// install merges m into t; it reports whether it added a key. With track, the
// key is listed as dirty (its backup must get the merged state).
func (t *kindTable[W]) install(sh *shard, m Moved, wall int64, track bool) bool {
	k := m.Limit.Kind
	if i := t.find(m.H); i >= 0 {
		sl := &t.slots[i]
		var scratch algo.State
		st, boxed := sh.load(k, sl.words(), &scratch, 0)
		last, _ := t.lastNow(sl, wall)
		at := max(last, m.LastNow)
		st.Merge(&m.St, at, m.Limit)
		if !boxed {
			sh.repack(k, st, sl.words())
		}
		cc := sl.flags&flagCaller != 0 || m.CallerClock
		setClock(t, sl, peerLastNow(at, wall, cc), wall, cc)
		if track {
			markSlot(sh, k, sl)
		} else if sl.flags&flagDirty != 0 {
			touchSlot(sh, k, sl) // listed: its entry must copy the merged state
		}
		return false
	}
	sl := &t.slots[t.insert(m.H)]
	sl.lim = sh.limits.ref(m.Limit)
	sh.save(k, &m.St, sl.words())
	setClock(t, sl, peerLastNow(m.LastNow, wall, m.CallerClock), wall, m.CallerClock)
	if track {
		markSlot(sh, k, sl)
	}
	return true
}

type kindAndTable struct {
	k algo.Kind
	t anyKindTable
}

// tables lists the shard's tables with their algorithms.
func (sh *shard) tables() [6]kindAndTable {
	return [...]kindAndTable{
		{algo.SlidingWindowLog, &sh.swl},
		{algo.SlidingWindowCounter, &sh.swc},
		{algo.FixedWindow, &sh.fw},
		{algo.GCRA, &sh.gcra},
		{algo.TokenBucket, &sh.tb},
		{algo.BucketedSlidingWindow, &sh.bsw},
	}
}

// table returns the table of algorithm k (nil for an invalid k).
func (sh *shard) table(k algo.Kind) anyKindTable {
	for _, kt := range sh.tables() {
		if kt.k == k {
			return kt.t
		}
	}
	return nil
}

// dropIdleLocked removes the shard's states that are back to full capacity at
// the time they have aged to (see clockRec).
func (s *Store) dropIdleLocked(sh *shard, wall int64) {
	for _, kt := range sh.tables() {
		kt.t.dropIdle(sh, kt.k, wall, s.droppedIdle, false)
	}
}

// DropIdle scans every shard once, one lock at a time.
func (s *Store) DropIdle(wall int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.dropIdleLocked(sh, wall)
		sh.mu.Unlock()
	}
}

// Extract applies act(hash) to every state, one shard lock at a time, and
// returns the states to send (MoveSend, MoveSendCopy); wall is the owner clock,
// the last check time reported for keys checked on it.
func (s *Store) Extract(act func(h uint64) MoveAction, wall int64) []Moved {
	var out []Moved
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, kt := range sh.tables() {
			var removed int
			out, removed = kt.t.extract(sh, kt.k, act, wall, out)
			s.keys.Add(-int64(removed))
		}
		sh.mu.Unlock()
	}
	return out
}

// TakeDirty returns copies of the states changed since the last call (those
// listed dirty) and clears the list, one shard lock at a time.
func (s *Store) TakeDirty(wall int64) []Moved {
	return s.TakeDirtyInto(wall, nil)
}

// TakeDirtyInto is takeDirty appending to out.
func (s *Store) TakeDirtyInto(wall int64, out []Moved) []Moved {
	if s.keys.Load() >= prefetchMinKeys {
		s.PrefetchDirty() // a shard listed after it is copied all the same
	}
	for w := range s.dirtyShards {
		bitsSet := s.dirtyShards[w].Swap(0)
		for bitsSet != 0 {
			b := bits.TrailingZeros64(bitsSet)
			bitsSet &^= 1 << b
			out = s.takeDirtyShard(&s.shards[w*64+b], wall, out)
		}
	}
	return out
}

// ClearDirty empties every dirty list, copying nothing and touching no slot.
func (s *Store) ClearDirty() {
	for w := range s.dirtyShards {
		bitsSet := s.dirtyShards[w].Swap(0)
		for bitsSet != 0 {
			b := bits.TrailingZeros64(bitsSet)
			bitsSet &^= 1 << b
			sh := &s.shards[w*64+b]
			sh.mu.Lock()
			sh.dirty = sh.dirty[:0] // the slots' marks are stale now (see dirtyAt)
			sh.mu.Unlock()
		}
	}
}

// takeDirtyShard appends copies of shard sh's changed states to out and
// clears its dirty list.
func (s *Store) takeDirtyShard(sh *shard, wall int64, out []Moved) []Moved {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range sh.dirty {
		r := &sh.dirty[i]
		switch {
		case r.h == emptyHash: // the key was removed
		case r.snap:
			// The state as of its last change, copied then: no lookup of
			// its slot, a cache miss per key at this distance from the check.
			out = append(out, Moved{H: r.h, Limit: r.l, St: algo.UnpackState(r.k, r.w[:r.k.PackedWords()], 0), LastNow: wall})
		default:
			if t := sh.table(r.k); t != nil {
				if m, ok := t.copyDirty(sh, r.k, r.h, wall); ok {
					out = append(out, m)
				}
			}
		}
	}
	sh.dirty = sh.dirty[:0] // the slots' marks are stale now (see dirtyAt)
	if cap(sh.dirty) > 4096 {
		sh.dirty = nil // a burst of changes does not pin its list
	}
	return out
}

// MarkWhere lists as dirty every key whose hash satisfies pred (a ring change
// gave these keys a new backup), one shard lock at a time.
func (s *Store) MarkWhere(pred func(h uint64) bool) {
	if !s.Track {
		return
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, kt := range sh.tables() {
			kt.t.markWhere(sh, kt.k, pred)
		}
		sh.mu.Unlock()
	}
}

// SendWhole lists the key with (folded) hash h and algorithm k as changed, to
// be sent whole by the next replication send.
func (s *Store) SendWhole(h uint64, k algo.Kind) {
	sh := &s.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t := sh.table(k); t != nil {
		t.sendWhole(sh, k, h)
	}
}

// AppendLog applies the replicated log delta of the key whose hash is h (see
// kindTable.appendLog); false if it could not.
func (s *Store) AppendLog(h uint64, l algo.Limit, delta algo.State, after, afterN, lastNow int64, callerClock bool, wall int64) bool {
	h = fold(h)
	sh := &s.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if l.Kind != algo.SlidingWindowLog {
		return false
	}
	if lastNow == 0 {
		lastNow = wall
	}
	return sh.swl.appendLog(sh, Moved{H: h, Limit: l, St: delta, LastNow: lastNow, CallerClock: callerClock, After: after, AfterN: afterN}, wall)
}

// Moved is a state taken out of a store for a handoff or a replication
// send.
type Moved struct {
	H           uint64 // the key's hash (folded)
	Limit       algo.Limit
	St          algo.State
	LastNow     int64 // Unix ns: the caller's time when CallerClock
	CallerClock bool
	// Delta: St holds only the log entries appended since the tail
	// (After, AfterN) last sent (replication of a SlidingWindowLog key).
	Delta         bool
	After, AfterN int64
}

// Install merges a handed-off or replicated state of the key whose hash is h,
// last checked at lastNow (Unix ns; the caller's time when callerClock, 0 if
// unknown) under l, which the caller validated: an existing state for the key
// keeps the more restrictive of the two, compared at the later of the two last
// times. A new key counts against MaxKeys as a check's does: at the bound,
// idle keys are dropped first, and if none was, the state is not installed,
// install reports false and it is counted as Eviction("refused") (a peer's
// Transfers cannot grow the store past its bound). With mark (and a tracking
// store) the key is listed as changed, so that its backup gets the result.
func (s *Store) Install(h uint64, l algo.Limit, st algo.State, lastNow int64, callerClock bool, wall int64, mark bool) bool {
	return s.InstallScan(h, l, st, lastNow, callerClock, wall, mark, nil)
}

// InstallScan is install; a non-nil scanned bounds the scans for idle keys
// at the bound to one per batch of installs: once *scanned is true, a new key
// at the bound is refused without scanning (a peer's batch of new keys at the
// bound would otherwise scan every shard once per state).
func (s *Store) InstallScan(h uint64, l algo.Limit, st algo.State, lastNow int64, callerClock bool, wall int64, mark bool, scanned *bool) bool {
	if lastNow == 0 {
		lastNow = wall
	}
	h = fold(h)
	sh := &s.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.table(l.Kind)
	if t == nil {
		return false
	}
	if s.keys.Load() >= s.maxKeys && !t.has(h) { // a replica's slot is looked up once, by install, below the bound
		if scanned == nil || !*scanned {
			if scanned != nil {
				*scanned = true
			}
			// As takeIn: one shard lock at a time.
			sh.mu.Unlock()
			s.makeRoom(wall)
			sh.mu.Lock()
		}
		if !t.has(h) && s.keys.Load() >= s.maxKeys {
			if s.onEvict != nil {
				s.onEvict("refused")
			}
			return false
		}
	}
	if t.install(sh, Moved{H: h, Limit: l, St: st, LastNow: lastNow, CallerClock: callerClock}, wall, s.Track && mark) {
		s.keys.Add(1)
	}
	return true
}

// AnyDirty reports whether any shard may list a changed key (for tests: a
// store whose keys have no backup lists none).
func (s *Store) AnyDirty() bool {
	for w := range s.dirtyShards {
		if s.dirtyShards[w].Load() != 0 {
			return true
		}
	}
	return false
}

// Len returns the number of keys held.
func (s *Store) Len() int { return int(s.keys.Load()) }

// Count returns the number of stored states whose hash satisfies pred, one
// shard lock at a time (for Stats and tests: it scans every slot).
func (s *Store) Count(pred func(h uint64) bool) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, kt := range sh.tables() {
			kt.t.markWhere(sh, kt.k, func(h uint64) bool {
				if pred(h) {
					n++
				}
				return false
			})
		}
		sh.mu.Unlock()
	}
	return n
}

// limitTable interns the distinct Limits of a shard's keys: a key stores a
// 4-byte index instead of its 32-byte Limit. Entries are reference counted
// and reused once no key refers to them.
type limitTable struct {
	ls   []limitRec
	idx  map[algo.Limit]uint32
	free []uint32
	last uint32 // the index ref returned last: most checks repeat a Limit
}

type limitRec struct {
	l    algo.Limit
	t    int64 // the hint of shard.load: GCRA's emission interval Period/Limit, a log's Limit, else 0
	refs uint32
}

// ref returns the index of l, counting one more reference.
func (t *limitTable) ref(l algo.Limit) uint32 {
	if int(t.last) < len(t.ls) && t.ls[t.last].refs > 0 && t.ls[t.last].l == l {
		t.ls[t.last].refs++
		return t.last
	}
	i, ok := t.idx[l]
	if !ok {
		if t.idx == nil {
			t.idx = make(map[algo.Limit]uint32)
		}
		if n := len(t.free); n > 0 {
			i = t.free[n-1]
			t.free = t.free[:n-1]
			t.ls[i] = limitRec{l: l, t: interval(l)}
		} else {
			i = uint32(len(t.ls))
			t.ls = append(t.ls, limitRec{l: l, t: interval(l)})
		}
		t.idx[l] = i
	}
	t.ls[i].refs++
	t.last = i
	return i
}

// interval returns the limitRec.t of a valid l: GCRA's emission interval, a
// SlidingWindowLog's Limit (the size algo.UnpackLog gives its buffer), else 0.
func interval(l algo.Limit) int64 {
	switch l.Kind {
	case algo.GCRA:
		return int64(l.Period) / l.Limit
	case algo.SlidingWindowLog:
		return l.Limit
	}
	return 0
}

// unref drops one reference to index i.
func (t *limitTable) unref(i uint32) {
	r := &t.ls[i]
	if r.refs--; r.refs == 0 {
		delete(t.idx, r.l)
		r.l = algo.Limit{}
		t.free = append(t.free, i)
	}
}

// at returns the Limit at index i.
func (t *limitTable) at(i uint32) algo.Limit { return t.ls[i].l }

// boxes holds the States of one algorithm without a packed form, each under an
// index kept in its slot, and for a sliding-window log the tail of each log as
// last sent to the key's backup (sent, as long as st; empty in the bucketed
// window's boxes, which replicate whole states: 24 bytes a key saved there).
// Freed indexes are reused.
type boxes struct {
	st    []algo.State
	sent  []logMark
	spare []int64
}

// logMark is the tail (algo.State.LogTail) of a log as last sent to the key's
// backup, whose replica then ends there; valid is false when the next send
// must carry the whole state. 16 bytes: n counts entries of one log, which
// algo keeps in int32.
type logMark struct {
	t     int64
	n     int32
	valid bool
}

func (b *boxes) at(i int64) *algo.State { return &b.st[i] }

// add boxes s and returns its index; marked: b keeps sent marks (a log's).
func (b *boxes) add(s algo.State, marked bool) int64 {
	if n := len(b.spare); n > 0 {
		i := b.spare[n-1]
		b.spare = b.spare[:n-1]
		b.st[i] = s
		if marked {
			b.sent[i] = logMark{}
		}
		return i
	}
	b.st = append(b.st, s)
	if marked {
		b.sent = append(b.sent, logMark{})
	}
	return int64(len(b.st) - 1)
}

func (b *boxes) release(i int64) {
	b.st[i] = algo.State{}
	if i < int64(len(b.sent)) {
		b.sent[i] = logMark{}
	}
	b.spare = append(b.spare, i)
}
