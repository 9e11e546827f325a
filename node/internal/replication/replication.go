// Package replication holds the owner's replication sends and the backup's
// side of them: the backup table of a ring snapshot (Backups); the Replicator,
// which takes the changed states from the store, places them on their backups
// and makes the calls (Loop, Await), and installs the replicas an owner sends
// (Accept); the per-backup parts of one send (Scratch, Dest), kept from one
// send to the next; and the retry schedule of a backup that refuses sends
// (Backoff). What it needs of the node (its ring, its peers, its breakers) it
// gets as a Config of funcs and interfaces, built once.
package replication

import (
	"time"

	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

// Backoff is the retry schedule of sends to one backup after failures other
// than an unreachable backup (the breaker's case): a send refused as a whole
// is tried again after lag·2^Fails, at most MaxBackoff, not with every send,
// while the states wait listed as changed. The zero Backoff allows a send at
// once.
type Backoff struct {
	// Fails is the number of sends refused in a row.
	Fails int
	// Until is the time before which no send goes to the backup.
	Until time.Time
}

// MaxBackoff bounds the wait between sends to a backup that refuses them.
const MaxBackoff = 5 * time.Second

// Failed records a send refused at now; lag is the replication lag the wait
// doubles from.
func (b *Backoff) Failed(now time.Time, lag time.Duration) {
	b.Fails++
	d := MaxBackoff
	if b.Fails < 20 {
		d = min(lag<<b.Fails, MaxBackoff)
	}
	b.Until = now.Add(d)
}

// Succeeded records a send that went through: the next goes at once.
func (b *Backoff) Succeeded() { b.Fails, b.Until = 0, time.Time{} }

// Scratch holds what one replication send builds, kept for the next send:
// made afresh, these slices (a copy of every changed state, then a KeyState
// and an index per state and backup, grown by append) were most of the bytes
// allocated per check in a replicated cluster. The zero Scratch is ready
// after Reset. Only one goroutine (the replication loop) may use it.
type Scratch struct {
	// Ms holds the changed states taken from the store.
	Ms []store.Moved
	// Buf holds their binary forms, back to back.
	Buf []byte
	// Dests holds each backup's part of the send, by member name.
	Dests map[string]*Dest
}

// Dest is one backup's part of a replication send.
type Dest struct {
	// Addr is the backup's peer address.
	Addr string
	// Idx holds the indexes into Scratch.Ms of the states in States.
	Idx []int32
	// States holds the key states sent.
	States []transport.KeyState
	// Pens holds the ban states sent, PenH their keys' ring hashes.
	Pens []transport.PenaltyState
	PenH []uint64
}

// Keep bounds the slices a send leaves to the next (in states): a resync
// after a ring change lists every key once and should not pin its slices.
const Keep = 1 << 14

// Reset empties sc for a new send: a backup that got nothing in the last send
// is forgotten (it may have left the ring), the others keep their slices.
func (sc *Scratch) Reset() {
	if sc.Dests == nil {
		sc.Dests = make(map[string]*Dest)
	}
	for name, d := range sc.Dests {
		if len(d.States) == 0 && len(d.Pens) == 0 || cap(d.States) > Keep || cap(d.Pens) > Keep {
			delete(sc.Dests, name)
			continue
		}
		d.Idx, d.States, d.Pens, d.PenH = d.Idx[:0], d.States[:0], d.Pens[:0], d.PenH[:0]
	}
}

// Done drops what the send's slices refer to (states' logs, keys, bytes) and
// the slices themselves when a burst made them large.
func (sc *Scratch) Done() {
	clear(sc.Ms)
	sc.Ms = sc.Ms[:0]
	if cap(sc.Ms) > Keep {
		sc.Ms = nil
	}
	if cap(sc.Buf) > 16*Keep {
		sc.Buf = nil
	}
	for _, d := range sc.Dests {
		clear(d.States)
		clear(d.Pens)
	}
}

// Dest returns the part of the send for the backup named name at addr.
func (sc *Scratch) Dest(name, addr string) *Dest {
	d := sc.Dests[name]
	if d == nil {
		d = &Dest{}
		sc.Dests[name] = d
	}
	d.Addr = addr
	return d
}

// Resend lists d's states (in ms) in owned and its ban states in bans as
// changed again, to go whole with the next send: all of them when want is nil
// (the send failed or was not tried), else those whose ring hash want holds
// (the backup asked for them in need_full).
func (d *Dest) Resend(owned *store.Store, bans *store.Bans, ms []store.Moved, want map[uint64]bool) {
	for _, j := range d.Idx {
		if m := &ms[j]; want == nil || want[m.H] {
			owned.SendWhole(m.H, m.Limit.Kind)
		}
	}
	var keys []string
	var hs []uint64
	for i, h := range d.PenH {
		if want == nil || want[h] {
			keys, hs = append(keys, d.Pens[i].Key), append(hs, h)
		}
	}
	bans.MarkKeys(keys, hs)
}
