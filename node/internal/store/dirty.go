package store

import "github.com/ringlimit/ringlimit/algo"

// The dirty lists: which keys a replication send carries.
//
// Each shard lists the keys whose state changed since the last send, each
// once, in sh.dirty; the slot of a listed key holds its entry's index in its
// flags (flagDirty, dirtyShift). A send empties the list without touching a
// slot: an index is believed only while the entry it names is still the key's
// (dirtyAt), so every mark left in a slot is stale once its list is emptied.
// Clearing the marks one by one cost the send a lookup of every key's slot,
// long out of the CPU's caches by then: most of the sender's cost of
// replication at 100k keys.
//
// For the algorithms whose state is packed in its slot (GCRA, TokenBucket,
// FixedWindow, SlidingWindowCounter) and a key without a clockRec, the entry
// also copies the state and its Limit whenever they change while it is
// listed (snap), so that the send reads the list alone. A log or a bucketed
// window (a box, a delta since the last send), or a key whose last check time
// is not its owner clock, is looked up at the send instead (copyDirty).

// dirtyRec is a key listed as changed: its (folded) hash (emptyHash: the key
// was removed since) and algorithm, and with snap its Limit and packed words
// as of its last change.
type dirtyRec struct {
	h    uint64
	k    algo.Kind
	snap bool
	l    algo.Limit
	w    [3]int64
}

// dirtyAt returns the index in sh.dirty of the entry of the key of algorithm k
// with (folded) hash h and slot flags flags, or -1 if it is not listed.
func (sh *shard) dirtyAt(k algo.Kind, h uint64, flags uint32) int {
	if flags&flagDirty == 0 {
		return -1
	}
	if p := int(flags >> dirtyShift); p < len(sh.dirty) && sh.dirty[p].h == h && sh.dirty[p].k == k {
		return p
	}
	return -1
}

// markSlot lists slot sl of algorithm k as changed, once, and copies its
// state into its entry (shard lock held); the first key listed in a shard
// flags the shard in its store's dirtyShards for the next replication send.
// Called after the slot's words, Limit and clock are written.
func markSlot[W words](sh *shard, k algo.Kind, sl *slot[W]) {
	p := sh.dirtyAt(k, sl.h, sl.flags)
	if p < 0 {
		if len(sh.dirty) == 0 {
			i := ShardOf(sl.h)
			sh.dirtyBits[i/64].Or(1 << (i % 64))
		}
		p = len(sh.dirty)
		sh.dirty = append(sh.dirty, dirtyRec{h: sl.h, k: k})
		if p > maxDirtyIndex {
			// Not kept: the key may be listed again before the send, which
			// then looks it up (no snap) and sends its state twice.
			sl.flags &^= flagDirty
			return
		}
		sl.flags = sl.flags&(1<<dirtyShift-1) | flagDirty | uint32(p)<<dirtyShift
	}
	snapSlot(sh, &sh.dirty[p], k, sl)
}

// touchSlot refreshes the entry of slot sl if it is listed: its state, Limit
// or clock changed without a change to send (a replica merged, a denied check
// that left a clockRec).
func touchSlot[W words](sh *shard, k algo.Kind, sl *slot[W]) {
	if p := sh.dirtyAt(k, sl.h, sl.flags); p >= 0 {
		snapSlot(sh, &sh.dirty[p], k, sl)
	}
}

// snapSlot copies slot sl's state and Limit into its entry r where the send
// can take them from there (see the comment at the top of this file).
func snapSlot[W words](sh *shard, r *dirtyRec, k algo.Kind, sl *slot[W]) {
	if k.PackedWords() == 0 || sl.flags&flagClock != 0 {
		r.snap = false
		return
	}
	r.snap, r.l = true, sh.limits.at(sl.lim)
	copy(r.w[:], sl.words())
}

// unlist drops the entry of a key being removed, if it is listed: a key
// created again under the same hash starts a new entry, and the old state
// must not be sent after it.
func (sh *shard) unlist(k algo.Kind, h uint64, flags uint32) {
	if p := sh.dirtyAt(k, h, flags); p >= 0 {
		sh.dirty[p].h = emptyHash
	}
}
