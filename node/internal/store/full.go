package store

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// A store at its bound (MaxKeys) refuses a new key with a *FullError. Before
// it refuses, it scans every shard for idle keys, drops them, and notes when
// the earliest key left frees room (algo.State.IdleAfter). A new key at the
// bound then scans again only once that time has come or a second has passed
// since the last scan (a key checked since under a looser limit, or one
// installed since, may free room sooner): a flood of new keys at the bound
// costs one scan a second, not one per check.

// rescanAfter bounds how long a full store refuses new keys on its last
// scan's word before it scans again.
const rescanAfter = int64(time.Second)

// FullError is the error of a check (or install) that would create a new key
// in a full key table: the node's (MaxKeys) or, built by a front door, a
// credential's own bound. errors.Is(err, ErrTooManyKeys) matches it.
type FullError struct {
	// Who names whose table is full: "this node", "node-2 (the key's
	// owner)", a credential.
	Who string
	// Text says what Who holds and its bound ("holds 20000 keys, its
	// MaxKeys, none of them idle"); the owner of a forwarded check sends it.
	Text string
	// RetryAfter estimates when room frees: the time until the earliest key
	// held becomes idle if nothing checks it again, at least 1 s; 0 when not
	// known. A new key may still be refused then if another took the room.
	RetryAfter time.Duration
}

// Message is the error's text as a client sees it: "key table full: <Who>
// <Text>", and "; the earliest key frees in <RetryAfter>" when it is known.
func (e *FullError) Message() string {
	var b strings.Builder
	b.WriteString("key table full: ")
	b.WriteString(e.Who)
	b.WriteString(" ")
	b.WriteString(e.Text)
	if e.RetryAfter > 0 {
		b.WriteString("; the earliest key frees in ")
		b.WriteString(e.RetryAfter.String())
	}
	return b.String()
}

// Error is Message.
func (e *FullError) Error() string { return e.Message() }

// Is reports whether target is ErrTooManyKeys.
func (e *FullError) Is(target error) bool { return target == ErrTooManyKeys }

// RetryDelay returns RetryAfter (transport answers it as gRPC RetryInfo).
func (e *FullError) RetryDelay() time.Duration { return e.RetryAfter }

// fullError is the store's FullError at wall, when its earliest key frees at
// freeAt (Unix ns; math.MaxInt64: none known).
func (s *Store) fullError(wall, freeAt int64) *FullError {
	e := &FullError{Who: "this node", Text: fmt.Sprintf("holds %d keys, its MaxKeys, none of them idle", s.maxKeys)}
	if freeAt != math.MaxInt64 && freeAt > wall {
		e.RetryAfter = RoundUpSeconds(time.Duration(freeAt - wall))
	}
	return e
}

// RoundUpSeconds rounds d > 0 up to whole seconds (what a Retry-After header
// can say); 0 for d <= 0.
func RoundUpSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if d > time.Duration(math.MaxInt64)-time.Second {
		return d
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// makeRoom is called, with no shard lock held, when a new key finds the store
// at its bound at wall (the owner clock): it drops idle keys unless the last
// scan said none frees before now (see above), and returns when the earliest
// key left frees room (math.MaxInt64: none known). The caller checks the
// bound again.
func (s *Store) makeRoom(wall int64) (freeAt int64) {
	last, free := s.fullScan.Load(), s.fullFree.Load()
	if last != 0 && wall < free && wall-last < rescanAfter && wall >= last {
		return free
	}
	if !s.fullScan.CompareAndSwap(last, wall) {
		return s.fullFree.Load() // another caller scans now
	}
	free = s.dropIdleEarliest(wall)
	s.fullFree.Store(free)
	return free
}

// dropIdleEarliest is DropIdle that also returns when the earliest key it
// keeps becomes idle (Unix ns; math.MaxInt64 when it keeps none).
func (s *Store) dropIdleEarliest(wall int64) int64 {
	earliest := int64(math.MaxInt64)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, kt := range sh.tables() {
			if at := kt.t.dropIdle(sh, kt.k, wall, s.droppedIdle, true); at < earliest {
				earliest = at
			}
		}
		sh.mu.Unlock()
	}
	return earliest
}

// droppedIdle counts one key dropped as idle.
func (s *Store) droppedIdle() {
	s.keys.Add(-1)
	if s.onEvict != nil {
		s.onEvict("idle")
	}
}

// idleAt returns when slot sl's state becomes idle (Unix ns, owner clock
// wall's; <= wall: idle now), by the rule of idle.
func (t *kindTable[W]) idleAt(sh *shard, k algo.Kind, sl *slot[W], wall int64) int64 {
	l := sh.limits.at(sl.lim)
	at := wall
	var callerWait int64 // a caller-clock key is kept a Period of wall time
	if sl.flags&flagClock != 0 {
		r := t.clocks[sl.h]
		elapsed := wall - r.lastWall
		if sl.flags&flagCaller != 0 && elapsed < int64(l.Period) {
			callerWait = int64(l.Period) - elapsed
		}
		at = r.lastNow + elapsed
	}
	var scratch algo.State
	st, _ := sh.load(k, sl.words(), &scratch, 0)
	d := int64(st.IdleAfter(at, l))
	if callerWait > 0 {
		d = max(d, callerWait)
	}
	if d > math.MaxInt64-wall {
		return math.MaxInt64
	}
	return wall + d
}
