package transport

import (
	"sync/atomic"
	"time"
)

// This file is a peer's batches of forwarded checks: their list, states and
// recycling (see peer in peer.go for how they are filled and sent).

// batchList is an intrusive doubly linked list of batches; guarded by peer.mu.
type batchList struct{ head, tail *batch }

func (l *batchList) push(b *batch) {
	b.prev, b.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = b
	} else {
		l.head = b
	}
	l.tail = b
}

func (l *batchList) remove(b *batch) {
	if b.prev != nil {
		b.prev.next = b.next
	} else if l.head == b {
		l.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	} else if l.tail == b {
		l.tail = b.prev
	}
	b.prev, b.next = nil, nil
}

// batchState says where a batch is; guarded by peer.mu.
type batchState uint8

const (
	batchOpen batchState = iota
	batchReady
	batchStreamed // in flight on a stream
	batchUnary    // in flight as a unary RPC
	batchDone
)

// batchInline is the first capacity of a batch's checks: batches under load
// hold about as many checks as callers wait on one peer link, often fewer
// than eight.
const batchInline = 8

// maxKeptItems bounds the capacity of the checks and results slices a
// recycled batch (either side's) keeps; larger ones, from a burst, are let go.
const maxKeptItems = 64

// batch is one group of checks sent together. Once it is done, err or one
// result per check is set and done holds one token per check, for its caller
// (a caller that gave up leaves its token, drained when the batch is
// recycled: done is reused with the batch). See peer for its recycling.
type batch struct {
	pe       *peer
	checks   []Check // backing array kept across reuse
	opened   time.Time
	deadline time.Time
	refs     atomic.Int32 // holders; recycled at 0 (see peer)

	// Guarded by peer.mu.
	state      batchState
	id         uint64
	stream     *fwdStream
	sent       time.Time
	prev, next *batch // in peer.live while not done
	sendNext   *batch // next batch of the same dispatch; then only its sender reads it

	req     fwdRequest    // the message of the batch; only its sender uses it
	done    chan struct{} // capacity BatchMaxItems
	results []Result      // backing array kept across reuse
	err     error
}

// newBatchLocked returns an empty open batch held by the peer (refs 1).
func (pe *peer) newBatchLocked(now time.Time) *batch {
	b, _ := pe.free.Get().(*batch)
	if b == nil {
		b = &batch{pe: pe, checks: make([]Check, 0, batchInline)}
	}
	b.opened, b.deadline = now, now.Add(pe.cfg.ForwardTimeout)
	if b.done == nil {
		b.done = make(chan struct{}, pe.cfg.BatchMaxItems) // no buffer: struct{} has no size
	}
	b.refs.Store(1)
	return b
}

// release lets go of one hold on b; the last one recycles it.
func (b *batch) release() {
	if b.refs.Add(-1) != 0 {
		return
	}
	pe := b.pe
	clear(b.checks) // the keys
	if cap(b.checks) > maxKeptItems {
		b.checks = nil
	}
	if cap(b.results) > maxKeptItems {
		b.results = nil
	}
	clear(b.results[:cap(b.results)]) // owner names and messages
	for len(b.done) > 0 {
		<-b.done // the tokens of callers that gave up
	}
	*b = batch{pe: pe, checks: b.checks[:0], results: b.results[:0], done: b.done}
	pe.free.Put(b)
}
