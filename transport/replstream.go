package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// replLink carries a peer's replication requests (TransferBatch.Replica) on
// one long-lived ReplicateStream, opened by the first send and after every
// failure: a unary Transfer costs grpc-go a new HTTP/2 stream, headers and
// contexts every time, a message on an open stream costs none of that.
//
// Sends are serialized (sendMu): each writes one request and reads its answer
// before the next request goes out, so answers match requests by order. A
// watchdog bounds every send: when the send's context ends (its deadline, at
// most ClientConfig.TransferTimeout away) it cancels the stream, which ends
// the SendMsg, RecvMsg or stream open waiting on it. Any failure closes the
// stream; the next send opens a new one. A peer that answers the stream with
// codes.Unimplemented (a member from before ReplicateStream) gets unary
// Transfers for ClientConfig.StreamRetryInterval, then the stream is tried
// again.
type replLink struct {
	sendMu sync.Mutex // held for a whole send
	// Used only by the holder of sendMu.
	resp       xferResponse // the answer, reused; keeps no hashes between sends
	unaryUntil time.Time    // the peer does not know ReplicateStream: unary Transfers until then

	mu       sync.Mutex
	cs       grpc.ClientStream  // the open stream, or nil
	cancel   context.CancelFunc // cancels the stream being used or opened
	answered bool               // cs has answered a request
	seq      uint64             // number of the current (or last) send
	active   bool               // a send is under way
	expired  error              // why the watchdog cancelled the current send, or nil
	closed   bool               // the peer is closed: no more sends
	lastUse  time.Time          // when the last send began
}

// sendReplica sends req, a replication request, on the peer's replication
// stream (or as a unary Transfer, see replLink) and returns needFull with the
// answer's need_full hashes appended (needFull itself when it fails). The send
// is bounded by ctx and ClientConfig.TransferTimeout. Errors as sendTransfer:
// an InvalidArgument answer wraps ErrInvalidCheck, every other failure
// ErrUnavailable.
func (pe *peer) sendReplica(ctx context.Context, req *xferRequest, needFull []uint64) ([]uint64, error) {
	l := &pe.repl
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	if !l.unaryUntil.IsZero() && time.Now().Before(l.unaryUntil) {
		return pe.sendTransfer(ctx, req, needFull)
	}
	if err := ctx.Err(); err != nil {
		return needFull, fmt.Errorf("%w: transfer to %s: %w", ErrUnavailable, pe.addr, err)
	}
	cctx := ctx
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > pe.cfg.TransferTimeout {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, pe.cfg.TransferTimeout)
		defer cancel()
	}

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return needFull, fmt.Errorf("%w: transfer to %s: peer closed", ErrUnavailable, pe.addr)
	}
	l.seq++
	seq := l.seq
	l.active, l.expired = true, nil
	l.lastUse = time.Now()
	cs := l.cs
	var sctx context.Context
	if cs == nil {
		sctx, l.cancel = context.WithCancel(context.Background())
		l.answered = false
	}
	l.mu.Unlock()
	pe.touch() // the peer's idle timer (see peer.idleFired)
	stop := context.AfterFunc(cctx, func() { l.expire(seq, cctx) })

	var err error
	if cs == nil {
		if cs, err = pe.client.ReplicateStream(sctx, pe.codecOpts...); err == nil {
			l.mu.Lock()
			l.cs = cs
			l.mu.Unlock()
		}
	}
	if err == nil {
		l.resp.needFull = needFull
		if err = cs.SendMsg(req); errors.Is(err, io.EOF) {
			// The stream ended; RecvMsg returns its status.
			if err = cs.RecvMsg(&l.resp); err == nil {
				err = errors.New("stream ended")
			}
		} else if err == nil {
			err = cs.RecvMsg(&l.resp)
		}
		if err == nil {
			needFull = l.resp.needFull
		}
		l.resp.needFull = nil
	}
	stop()

	l.mu.Lock()
	l.active = false
	expired := l.expired
	answered := l.answered
	if err != nil {
		if l.cancel != nil {
			l.cancel()
		}
		l.cs, l.cancel = nil, nil
	} else {
		l.answered = true
	}
	l.mu.Unlock()
	switch {
	case err == nil:
		return needFull, nil
	case expired != nil:
		return needFull, fmt.Errorf("%w: transfer to %s: stream: %w", ErrUnavailable, pe.addr, expired)
	case !answered && status.Code(err) == codes.Unimplemented:
		// A member from before ReplicateStream: nothing was applied.
		l.unaryUntil = time.Now().Add(pe.cfg.StreamRetryInterval)
		return pe.sendTransfer(ctx, req, needFull)
	}
	return needFull, errorFromStatus("transfer to "+pe.addr, err)
}

// expire cancels the stream of send seq, whose context ctx ended, unless that
// send is over.
func (l *replLink) expire(seq uint64, ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.active || l.seq != seq || l.cancel == nil {
		return
	}
	l.expired = ctx.Err()
	l.cancel()
}

// closeIdle closes the stream if no send is under way and none began within
// idle before now; the next send opens a new one. It returns when the last
// send began and whether a stream (or a send) is still open.
func (l *replLink) closeIdle(now time.Time, idle time.Duration) (last time.Time, open bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active {
		return l.lastUse, true
	}
	if l.cs == nil {
		return l.lastUse, false
	}
	if now.Sub(l.lastUse) < idle {
		return l.lastUse, true
	}
	if l.cancel != nil {
		l.cancel()
	}
	l.cs, l.cancel = nil, nil
	return l.lastUse, false
}

// busy reports whether a replication send is under way on the link.
func (l *replLink) busy() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active
}

// close ends the replication stream; sends under way fail and later ones
// fail at once.
func (l *replLink) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.cancel != nil {
		l.cancel()
	}
	l.cs, l.cancel = nil, nil
}
