package transport

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// peer batches the checks forwarded to one address and carries the batches to
// it, as messages of one long-lived ForwardStream (or, in unary mode, one
// Forward RPC each).
//
// A batch moves open (cur) -> ready (full, timed out, or the link is idle) ->
// in flight -> done. At most cfg.MaxInflightBatches are in flight. Whoever
// moves batches into flight on the stream sends them right after releasing mu:
// the caller of Forward that filled a batch or found the link idle, the flush
// timer, the stream's receive loop after an answer freed a slot. No goroutine
// is started per batch in stream mode. Batches not yet done are kept in a list
// in the order they opened, which is also the order of their deadlines; one
// expiry timer per peer, armed for the oldest, fails each batch at its
// deadline wherever it is, so a caller never waits past ForwardTimeout and no
// timer is made per batch.
//
// A stream is opened by its own goroutine, which then receives the answers
// until the stream ends; batches become ready while it opens and are sent once
// it is open. When the stream breaks, its batches in flight fail and the next
// ready batch opens a new stream.
//
// Batches are recycled (free) so that a forwarded check costs no allocation of
// its own on this side: a batch counts its holders (refs: the peer until it
// finishes the batch, every caller waiting on it, and the sender of a batch in
// flight until its message is written) and goes back to free only when the last
// lets go. A caller that gave up (its ctx ended) lets go at once; the batch's
// late answer is then matched by id, which is never reused, and dropped.
//
// A peer not used for ClientConfig.IdleTimeout closes its streams (idle, see
// idleFired); gRPC then closes the idle connection, and the next use opens
// both again.
//
// peer.go is over 600 lines because the batch state machine (open, ready, in
// flight, done), its one expiry timer, the stream's receive loop and the idle
// close all move batches under the same mu; split apart they would hide who
// may move a batch when.
type peer struct {
	cfg    *ClientConfig
	codec  wireCodec
	addr   string
	conn   *grpc.ClientConn
	client pb.PeerClient
	// codecOpts make a call use codec (Transfer; ForwardStream asks for it
	// when it opens).
	codecOpts []grpc.CallOption
	timer     *time.Timer // flushes cur after BatchMaxWait; fires into timerFired
	expiry    *time.Timer // fails live batches at their deadline; fires into expiryFired
	idle      *time.Timer // closes the streams once unused for IdleTimeout; fires into idleFired
	free      sync.Pool   // *batch no longer referred to, for reuse
	repl      replLink    // the replication stream (see sendReplica)

	mu          sync.Mutex
	cur         *batch     // open batch, or nil
	ready       []*batch   // closed batches waiting for an in-flight slot, FIFO
	stream      *fwdStream // current stream (open or opening), or nil
	unary       bool       // send batches as unary Forward RPCs
	unaryUntil  time.Time  // when a fallback to unary (not cfg.UnaryForward) tries the stream again
	unaryCount  int        // unary RPCs in flight
	nextID      uint64     // last batch id used
	live        batchList  // batches not done, oldest (earliest deadline) first
	expiryArmed bool       // expiry is set for the deadline of some live batch
	lastUse     time.Time  // when the last batch opened
	idleArmed   bool       // idle is set
	closed      bool
}

// fwdStream is one ForwardStream to the peer.
type fwdStream struct {
	pe     *peer
	ctx    context.Context
	cancel context.CancelFunc

	sendMu sync.Mutex // serialises SendMsg
	cs     grpc.ClientStream

	// Guarded by pe.mu.
	open     bool
	inflight map[uint64]*batch
	lastRecv time.Time // when the last answer arrived (or the stream opened)
}

func newPeer(cfg *ClientConfig, codec wireCodec, addr string, conn *grpc.ClientConn) *peer {
	pe := &peer{cfg: cfg, codec: codec, addr: addr, conn: conn, client: pb.NewPeerClient(conn), unary: cfg.UnaryForward,
		codecOpts: []grpc.CallOption{grpc.ForceCodecV2(codec)}}
	pe.timer = time.AfterFunc(time.Hour, pe.timerFired)
	pe.timer.Stop()
	pe.expiry = time.AfterFunc(time.Hour, pe.expiryFired)
	pe.expiry.Stop()
	pe.idle = time.AfterFunc(time.Hour, pe.idleFired)
	pe.idle.Stop()
	return pe
}

// add appends c to the open batch and returns the batch and c's index in it;
// ok is false when the peer was closed. It sends what became sendable.
func (pe *peer) add(c Check) (b *batch, i int, ok bool) {
	pe.mu.Lock()
	if pe.closed {
		pe.mu.Unlock()
		return nil, 0, false
	}
	b = pe.cur
	if b == nil {
		now := time.Now()
		b = pe.newBatchLocked(now)
		pe.lastUse = now
		pe.armIdleLocked()
		pe.live.push(b)
		if !pe.expiryArmed {
			// Armed for an older batch otherwise, whose deadline comes first.
			pe.expiryArmed = true
			pe.expiry.Reset(pe.cfg.ForwardTimeout)
		}
		pe.cur = b
	}
	i = len(b.checks)
	b.checks = append(b.checks, c)
	b.refs.Add(1) // the caller's, released by Pool.Forward
	var s *fwdStream
	var out *batch
	switch {
	case len(b.checks) >= pe.cfg.BatchMaxItems, pe.idleLocked():
		pe.closeCurLocked()
		s, out = pe.dispatchLocked()
	case i == 0:
		pe.timer.Reset(pe.cfg.BatchMaxWait)
	}
	pe.mu.Unlock()
	pe.sendAll(s, out)
	return b, i, true
}

// armIdleLocked sets the idle timer if it is not set: the peer was used.
func (pe *peer) armIdleLocked() {
	if !pe.idleArmed {
		pe.idleArmed = true
		pe.idle.Reset(pe.cfg.IdleTimeout)
	}
}

// touch records a use of the peer other than a forwarded check (a
// replication send): the idle timer is set if it is not.
func (pe *peer) touch() {
	pe.mu.Lock()
	if !pe.closed {
		pe.armIdleLocked()
	}
	pe.mu.Unlock()
}

// idleFired closes what of the peer went unused for IdleTimeout: the
// ForwardStream, once no batch opened for that long and none is open, queued
// or in flight (it is detached under mu, so the next batch opens a new
// stream and nothing is ever sent on the closed one), and the replication
// stream, once no send began for that long and none is under way. With
// neither stream open, gRPC's idle mode closes the connection IdleTimeout
// later. It sets the timer again while a stream stays open.
func (pe *peer) idleFired() {
	pe.mu.Lock()
	if pe.closed {
		pe.mu.Unlock()
		return
	}
	idle := pe.cfg.IdleTimeout
	now := time.Now()
	busy := pe.cur != nil || len(pe.ready) > 0 || pe.live.head != nil || pe.unaryCount > 0
	var s *fwdStream
	if st := pe.stream; st != nil && st.open && len(st.inflight) == 0 && !busy && now.Sub(pe.lastUse) >= idle {
		s = st
		pe.stream = nil
	}
	replLast, replOpen := pe.repl.closeIdle(now, idle)
	var next time.Duration
	if pe.stream != nil {
		if next = idle - now.Sub(pe.lastUse); next <= 0 {
			next = idle // busy: look again later
		}
	}
	if replOpen {
		w := idle - now.Sub(replLast)
		if w <= 0 {
			w = idle // a send under way
		}
		if next == 0 || w < next {
			next = w
		}
	}
	pe.idleArmed = next > 0
	if pe.idleArmed {
		pe.idle.Reset(next)
	}
	pe.mu.Unlock()
	if s != nil {
		s.cancel() // its receive loop ends it; nothing was in flight on it
	}
}

// idleLocked reports whether nothing is in flight or queued to the peer, so
// that a new check should go out at once. A stream still opening counts as
// busy: checks gather while it opens.
func (pe *peer) idleLocked() bool {
	if len(pe.ready) > 0 {
		return false
	}
	if pe.unary {
		return pe.unaryCount == 0
	}
	return pe.stream == nil || (pe.stream.open && len(pe.stream.inflight) == 0)
}

// closeCurLocked moves the open batch to ready.
func (pe *peer) closeCurLocked() {
	pe.cur.state = batchReady
	pe.ready = append(pe.ready, pe.cur)
	pe.cur = nil
}

// kickLocked is called when a slot may have freed: the open batch is closed if
// the link became idle, then ready batches are dispatched.
func (pe *peer) kickLocked() (*fwdStream, *batch) {
	if pe.cur != nil && !pe.closed && pe.idleLocked() {
		pe.closeCurLocked()
	}
	return pe.dispatchLocked()
}

// dispatchLocked moves ready batches into flight while the in-flight bound
// allows. In stream mode it returns the stream and the batches the caller must
// send on it after releasing mu (a list linked by sendNext, each held for its
// sender); with no stream it starts opening one. In unary mode it starts one
// goroutine per batch.
func (pe *peer) dispatchLocked() (*fwdStream, *batch) {
	if pe.closed || len(pe.ready) == 0 {
		return nil, nil
	}
	if pe.unary && !pe.unaryUntil.IsZero() && pe.unaryCount == 0 && !time.Now().Before(pe.unaryUntil) {
		// The fallback's time is up and no unary RPC is in flight: try the
		// stream again (see ClientConfig.StreamRetryInterval).
		pe.unary, pe.unaryUntil = false, time.Time{}
	}
	if pe.unary {
		for pe.unaryCount < pe.cfg.MaxInflightBatches && len(pe.ready) > 0 {
			b := pe.popReady()
			b.state = batchUnary
			pe.unaryCount++
			go pe.runUnary(b)
		}
		return nil, nil
	}
	s := pe.stream
	if s == nil {
		s = &fwdStream{pe: pe, inflight: make(map[uint64]*batch)}
		s.ctx, s.cancel = context.WithCancel(context.Background())
		pe.stream = s
		go s.run()
		return nil, nil
	}
	if !s.open {
		return nil, nil
	}
	var head, tail *batch
	now := time.Time{}
	for len(s.inflight) < pe.cfg.MaxInflightBatches && len(pe.ready) > 0 {
		b := pe.popReady()
		if now.IsZero() {
			now = time.Now()
		}
		pe.nextID++
		b.id, b.state, b.stream, b.sent = pe.nextID, batchStreamed, s, now
		s.inflight[b.id] = b
		b.refs.Add(1) // the sender's, released by sendAll
		if tail == nil {
			head = b
		} else {
			tail.sendNext = b
		}
		tail = b
	}
	if head == nil {
		return nil, nil
	}
	return s, head
}

// maxKeptReady bounds the capacity of peer.ready kept once it empties.
const maxKeptReady = 16

func (pe *peer) popReady() *batch {
	b := pe.ready[0]
	n := copy(pe.ready, pe.ready[1:])
	pe.ready[n] = nil
	pe.ready = pe.ready[:n]
	if n == 0 && cap(pe.ready) > maxKeptReady {
		pe.ready = nil // let a backing array that grew under a burst go
	}
	return b
}

// sendAll sends the batches that dispatchLocked put in flight on s (the list
// from head) and lets go of them. A send error cancels the stream; its receive
// loop then fails every batch in flight.
func (pe *peer) sendAll(s *fwdStream, head *batch) {
	var err error
	for b := head; b != nil; {
		next := b.sendNext
		if err == nil {
			b.req = fwdRequest{id: b.id, timeout: max(int64(time.Until(b.deadline)), 1), checks: b.checks}
			s.sendMu.Lock()
			err = s.cs.SendMsg(&b.req)
			s.sendMu.Unlock()
			if err != nil {
				s.cancel()
			}
		}
		b.release()
		b = next
	}
}

// timerFired closes the open batch once it is BatchMaxWait old. A stale fire
// (the batch it was armed for is gone) re-arms for the current batch or does
// nothing.
func (pe *peer) timerFired() {
	pe.mu.Lock()
	b := pe.cur
	if b == nil || pe.closed {
		pe.mu.Unlock()
		return
	}
	if wait := pe.cfg.BatchMaxWait - time.Since(b.opened); wait > 0 {
		pe.timer.Reset(wait)
		pe.mu.Unlock()
		return
	}
	pe.closeCurLocked()
	s, out := pe.dispatchLocked()
	pe.mu.Unlock()
	pe.sendAll(s, out)
}

// expiryFired fails the live batches whose deadline has passed and re-arms the
// expiry timer for the oldest batch still live.
func (pe *peer) expiryFired() {
	pe.mu.Lock()
	pe.expiryArmed = false
	if pe.closed {
		pe.mu.Unlock()
		return
	}
	now := time.Now()
	var expired []*batch
	var errs []error
	var stuck []*fwdStream
	b := pe.live.head
	for b != nil && !b.deadline.After(now) {
		next := b.next
		// A unary batch is left to its RPC, which carries the same deadline.
		if b.state != batchUnary {
			msg := "before the batch could be sent"
			if b.state == batchStreamed {
				msg = "no answer within ForwardTimeout " + pe.cfg.ForwardTimeout.String()
			}
			if s := pe.expireLocked(b); s != nil {
				stuck = append(stuck, s)
			}
			expired = append(expired, b)
			errs = append(errs, fmt.Errorf("%w: forward to %s: %w %s", ErrUnavailable, pe.addr, context.DeadlineExceeded, msg))
		}
		b = next
	}
	if b != nil {
		pe.expiryArmed = true
		pe.expiry.Reset(b.deadline.Sub(now))
	}
	s, out := pe.kickLocked()
	pe.mu.Unlock()
	for i, b := range expired {
		pe.finish(b, b.opened, errs[i])
	}
	for _, s := range stuck {
		s.cancel() // its receive loop fails the rest and the next batch reopens
	}
	pe.sendAll(s, out)
}

// expireLocked takes b, whose deadline passed, out of wherever it is and marks
// it done; the caller finishes it after releasing mu. It returns b's stream if
// that stream is stuck: b got no answer and nothing else arrived since b was
// sent. The stream is then detached, so that no new batch goes on it, and the
// caller cancels it; its receive loop fails the batches still in flight on it.
func (pe *peer) expireLocked(b *batch) (stuck *fwdStream) {
	switch b.state {
	case batchOpen:
		if pe.cur == b {
			pe.cur = nil
		}
	case batchReady:
		if k := slices.Index(pe.ready, b); k >= 0 {
			pe.ready = slices.Delete(pe.ready, k, k+1)
		}
	case batchStreamed:
		s := b.stream
		delete(s.inflight, b.id)
		if !s.lastRecv.After(b.sent) {
			stuck = s
			if pe.stream == s {
				pe.stream = nil
			}
		}
	}
	pe.doneLocked(b)
	return stuck
}

// doneLocked marks b done and takes it off the live list.
func (pe *peer) doneLocked(b *batch) {
	b.state = batchDone
	pe.live.remove(b)
}

// finish completes b, which the caller has moved to batchDone under mu, and
// lets go of the peer's hold on it.
func (pe *peer) finish(b *batch, start time.Time, err error) {
	b.err = err
	n := len(b.checks)
	for range n {
		b.done <- struct{}{} // never blocks: n <= BatchMaxItems
	}
	if pe.cfg.OnBatch != nil {
		pe.cfg.OnBatch(pe.addr, n, time.Since(start), err)
	}
	b.release()
}

// run opens the stream, sends what gathered meanwhile, then receives answers
// until the stream ends.
func (s *fwdStream) run() {
	pe := s.pe
	defer s.cancel()
	cs, err := pe.client.ForwardStream(s.ctx, grpc.ForceCodecV2(pe.codec))
	if err != nil {
		s.broken(err)
		return
	}
	s.cs = cs // published to senders by pe.mu below
	pe.mu.Lock()
	s.open = true
	s.lastRecv = time.Now()
	st, out := pe.kickLocked()
	pe.mu.Unlock()
	pe.sendAll(st, out)
	resp := new(fwdResponse)
	for {
		if err := cs.RecvMsg(resp); err != nil {
			s.broken(err)
			return
		}
		pe.mu.Lock()
		b := s.inflight[resp.id]
		if b != nil {
			delete(s.inflight, b.id)
			pe.doneLocked(b)
		}
		s.lastRecv = time.Now()
		st, out := pe.kickLocked()
		pe.mu.Unlock()
		pe.sendAll(st, out)
		if b == nil {
			continue // expired or failed already: the late answer is dropped
		}
		var err error
		switch {
		case resp.code == pb.Code_CODE_INVALID_ARGUMENT:
			err = errorFromStatus("forward to "+pe.addr, status.Error(codes.InvalidArgument, resp.message))
		case resp.code != pb.Code_CODE_OK:
			err = fmt.Errorf("%w: forward to %s: %s", ErrUnavailable, pe.addr, resp.message)
		case len(resp.results) != len(b.checks):
			err = fmt.Errorf("%w: forward to %s: %d results for %d checks", ErrUnavailable, pe.addr, len(resp.results), len(b.checks))
		default:
			// resp.results is decoded into again by the next RecvMsg.
			b.results = append(b.results[:0], resp.results...)
		}
		if cap(resp.results) > maxKeptItems {
			resp.results = nil
		}
		pe.finish(b, b.sent, err)
	}
}

// broken ends s after err: its batches in flight fail with ErrUnavailable (or,
// when the peer does not know ForwardStream, go back to ready for unary RPCs),
// and if batches are waiting a new stream is opened for them. A stream that
// fails to open fails the ready batches too, so a dead peer never loops.
func (s *fwdStream) broken(err error) {
	pe := s.pe
	pe.mu.Lock()
	if pe.stream == s {
		pe.stream = nil
	}
	opened := s.open
	s.open = false
	failed := make([]*batch, 0, len(s.inflight))
	for _, b := range s.inflight {
		failed = append(failed, b)
	}
	clear(s.inflight)
	slices.SortFunc(failed, func(a, b *batch) int { return cmp.Compare(a.id, b.id) })
	if status.Code(err) == codes.Unimplemented && !pe.closed {
		// A peer from before ForwardStream: nothing was decided. Resend as
		// unary, and try the stream again after StreamRetryInterval.
		pe.unary, pe.unaryUntil = true, time.Now().Add(pe.cfg.StreamRetryInterval)
		for _, b := range failed {
			b.state, b.stream = batchReady, nil
		}
		pe.ready = append(failed, pe.ready...)
		failed = nil
	} else {
		for _, b := range failed {
			pe.doneLocked(b)
		}
		if !opened {
			for _, b := range pe.ready {
				pe.doneLocked(b)
				failed = append(failed, b)
			}
			pe.ready = nil
		}
	}
	st, out := pe.kickLocked()
	pe.mu.Unlock()
	s.cancel()
	e := fmt.Errorf("%w: forward to %s: stream: %w", ErrUnavailable, pe.addr, err)
	for _, b := range failed {
		start := b.sent
		if start.IsZero() {
			start = b.opened
		}
		pe.finish(b, start, e)
	}
	pe.sendAll(st, out)
}

// runUnary sends b as one Forward RPC, completes it, and dispatches what waits.
func (pe *peer) runUnary(b *batch) {
	start := time.Now()
	var err error
	var resp *pb.ForwardResponse
	if !start.Before(b.deadline) {
		err = fmt.Errorf("%w: forward to %s: %w before the batch could be sent", ErrUnavailable, pe.addr, context.DeadlineExceeded)
	} else {
		ctx, cancel := context.WithDeadline(context.Background(), b.deadline)
		resp, err = pe.client.Forward(ctx, &pb.ForwardRequest{Checks: checksToWire(b.checks)})
		cancel()
		switch {
		case err != nil:
			err = errorFromStatus("forward to "+pe.addr, err)
		case len(resp.GetResults()) != len(b.checks):
			err = fmt.Errorf("%w: forward to %s: %d results for %d checks", ErrUnavailable, pe.addr, len(resp.GetResults()), len(b.checks))
		default:
			b.results = slices.Grow(b.results[:0], len(b.checks))[:len(b.checks)]
			for i, m := range resp.GetResults() {
				b.results[i] = Result{}
				resultFromWire(m, &b.results[i])
			}
		}
	}
	pe.mu.Lock()
	pe.unaryCount--
	pe.doneLocked(b)
	s, out := pe.kickLocked()
	pe.mu.Unlock()
	pe.finish(b, start, err)
	pe.sendAll(s, out)
}

// retire closes the peer once no batch is open, queued or in flight and no
// replication send is under way, or after max, polling every few
// milliseconds (a connection being replaced lives no longer than that). A
// replication send cut short here would fail as if the backup were
// unreachable, and the node would then skip a live owner for its backup.
func (pe *peer) retire(max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		pe.mu.Lock()
		idle := pe.cur == nil && pe.live.head == nil && pe.idleLocked()
		pe.mu.Unlock()
		if idle && !pe.repl.busy() {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	pe.close(fmt.Errorf("%w: forward to %s: connection retired (TLS material changed)", ErrUnavailable, pe.addr))
}

// closedUnder reports whether err, the failure of a unary call on pe's
// connection made with ctx, is this Pool closing that connection under the
// call (see ErrLocalClose): gRPC's codes.Canceled while ctx is still live,
// on a peer that close has run on. A peer cannot cause it: its resets and
// refusals leave pe open.
func (pe *peer) closedUnder(ctx context.Context, err error) bool {
	if status.Code(err) != codes.Canceled || ctx.Err() != nil {
		return false
	}
	pe.mu.Lock()
	defer pe.mu.Unlock()
	return pe.closed
}

// close fails every batch not yet done with err, ends the streams and closes
// the connection, which fails the unary RPCs in flight.
func (pe *peer) close(err error) {
	pe.mu.Lock()
	if pe.closed {
		pe.mu.Unlock()
		return
	}
	pe.closed = true
	failed := pe.ready
	if pe.cur != nil {
		failed = append(failed, pe.cur)
	}
	s := pe.stream
	if s != nil {
		for _, b := range s.inflight {
			failed = append(failed, b)
		}
		clear(s.inflight)
	}
	for _, b := range failed {
		pe.doneLocked(b)
	}
	pe.cur, pe.ready, pe.stream = nil, nil, nil
	pe.mu.Unlock()
	pe.timer.Stop()
	pe.expiry.Stop()
	pe.idle.Stop()
	for _, b := range failed {
		pe.finish(b, b.opened, err)
	}
	if s != nil {
		s.cancel()
	}
	pe.repl.close()
	_ = pe.conn.Close()
}

// sendTransfer sends req as one Transfer RPC, bounded by
// ClientConfig.TransferTimeout, and returns needFull with the answer's
// need_full hashes appended (needFull itself when the call fails). wireCodec
// encodes req straight from its chunk and decodes the answer.
func (pe *peer) sendTransfer(ctx context.Context, req *xferRequest, needFull []uint64) ([]uint64, error) {
	resp := &xferResponse{needFull: needFull}
	cctx, cancel := context.WithTimeout(ctx, pe.cfg.TransferTimeout)
	defer cancel()
	if err := pe.conn.Invoke(cctx, pb.Peer_Transfer_FullMethodName, req, resp, pe.codecOpts...); err != nil {
		return needFull, errorFromStatus("transfer to "+pe.addr, err)
	}
	return resp.needFull, nil
}
