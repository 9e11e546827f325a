package store

import (
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// words is the packed state of one algorithm (algo.Kind.PackedWords int64
// words; for a SlidingWindowLog or a BucketedSlidingWindow, the three words of
// algo.LogPackedWords or algo.BucketedPackedWords, packed or naming a box, see
// shard.loadLog and shard.loadBucketed).
type words interface {
	[1]int64 | [2]int64 | [3]int64
}

// slot is one key in a table: the key's 64-bit ring hash (its fingerprint; 0
// marks an empty slot), its packed state, the index in the shard's limit table
// of the Limit its state was last written under (see kindTable.taken), and
// flags. 24 bytes for GCRA.
type slot[W words] struct {
	h     uint64
	w     W
	lim   uint32
	flags uint32
}

// words returns the packed state words of sl, in place.
func (sl *slot[W]) words() []int64 {
	return unsafe.Slice((*int64)(unsafe.Pointer(&sl.w)), len(sl.w))
}

// Slot flags.
const (
	// flagClock: the key has a clockRec (its last check time differs from the
	// owner clock of that check, see clockRec).
	flagClock uint32 = 1 << iota
	// flagCaller: the key's last check carried the caller's timestamp.
	flagCaller
	// flagDirty: the flags' bits from dirtyShift up hold the index of the
	// key's entry in its shard's dirty list, if it is still listed (see
	// dirtyAt): the mark outlives the list, which a replication send empties
	// without touching the slots.
	flagDirty
)

// dirtyShift is where a slot's dirty-list index starts in its flags; an index
// at or above maxDirtyIndex is not kept (see markSlot).
const (
	dirtyShift    = 3
	maxDirtyIndex = 1<<(32-dirtyShift) - 1
)

// Table load bounds: a table grows by half when an insert would fill more than
// maxLoadNum/loadDen of its slots, and shrinks after an idle scan leaves it
// under a quarter full. With growth by 3/2 the load stays between 0.54 and
// 0.81 while keys are added (13/16 keeps linear probing short: about 3 slots
// per lookup of a present key, 13 for an absent one at the bound).
const (
	maxLoadNum = 13
	loadDen    = 16
	minSlots   = 8
)

// table is an open-addressing hash table (linear probing, backward-shift
// deletion, no tombstones) from a key's 64-bit hash to its slot. The home slot
// of hash h is h*len/2^64 (the high bits of h: shards and ring partitions use
// its low bits), so the length need not be a power of two and the table can
// grow by half instead of doubling. Not safe for concurrent use: the shard
// lock guards it.
type table[W words] struct {
	slots []slot[W]
	n     int // occupied slots
	// base and size are the address and length of slots as of the last
	// resize, for prefetchHome, which reads them without the shard lock. The
	// two may be read from different resizes: the address is then wrong,
	// which costs a useless prefetch, never a fault or a wrong answer.
	base, size atomic.Uintptr
}

// prefetchHome starts loading the home slot of h into the CPU's caches without
// the shard lock (see prefetch): at a million keys a slot is a cache miss, and
// the misses of a batch's keys, started together, overlap instead of each
// stalling the check that needs it. The slot may be stale or moved by the time
// the lock is taken; that costs a miss, never a wrong answer.
func (t *table[W]) prefetchHome(h uint64) {
	if n := t.size.Load(); n > 0 {
		sz := unsafe.Sizeof(slot[W]{})
		prefetch(t.base.Load() + uintptr(home(h, int(n)))*sz)
	}
}

// home returns the home slot of h in a table of n slots.
func home(h uint64, n int) int {
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}

// find returns the index of h's slot, or -1.
func (t *table[W]) find(h uint64) int {
	n := len(t.slots)
	if n == 0 {
		return -1
	}
	for i := home(h, n); ; {
		switch t.slots[i].h {
		case h:
			return i
		case 0:
			return -1
		}
		if i++; i == n {
			i = 0
		}
	}
}

// insert adds a slot for h, which must be absent and non-zero, and returns its
// index. It may grow the table, which moves every slot.
func (t *table[W]) insert(h uint64) int {
	if (t.n+1)*loadDen > len(t.slots)*maxLoadNum {
		t.resize(max(minSlots, len(t.slots)+len(t.slots)/2))
	}
	n := len(t.slots)
	i := home(h, n)
	for t.slots[i].h != 0 {
		if i++; i == n {
			i = 0
		}
	}
	t.slots[i] = slot[W]{h: h}
	t.n++
	return i
}

// remove empties slot i and shifts the rest of its probe run back so that no
// lookup stops early (Knuth's algorithm R).
func (t *table[W]) remove(i int) {
	n := len(t.slots)
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		s := &t.slots[j]
		if s.h == 0 {
			break
		}
		// Move s into the hole at i unless its home lies cyclically in (i, j].
		k := home(s.h, n)
		if (i <= j && (k <= i || k > j)) || (i > j && k <= i && k > j) {
			t.slots[i] = *s
			i = j
		}
	}
	t.slots[i] = slot[W]{}
	t.n--
}

// resize rehashes every slot into a table of n slots (n > t.n).
func (t *table[W]) resize(n int) {
	old := t.slots
	t.slots = make([]slot[W], n)
	t.base.Store(uintptr(unsafe.Pointer(unsafe.SliceData(t.slots))))
	t.size.Store(uintptr(n))
	for i := range old {
		if h := old[i].h; h != 0 {
			j := home(h, n)
			for t.slots[j].h != 0 {
				if j++; j == n {
					j = 0
				}
			}
			t.slots[j] = old[i]
		}
	}
}

// shrink halves the table while it is under a quarter full, after deletions.
func (t *table[W]) shrink() {
	if len(t.slots) > minSlots && t.n*4 < len(t.slots) {
		t.resize(max(minSlots, t.n*2))
	}
}

// scan calls f on each occupied slot's index; f may remove that slot (and only
// that one). A slot moved back over the scan position by a removal may be
// visited twice, none is skipped.
func (t *table[W]) scan(f func(i int)) {
	for i := 0; i < len(t.slots); {
		if t.slots[i].h == 0 {
			i++
			continue
		}
		h := t.slots[i].h
		f(i)
		if t.slots[i].h == h {
			i++
		}
	}
}
