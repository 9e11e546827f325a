package transport

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// This file is the server side of ReplicateStream (the sender's side is
// replstream.go).

// replicate passes a checked replication batch to the handler (Replicate
// when it is a ReplicaHandler, Transfer otherwise) and returns its needFull;
// the error is a status error.
func (s *peerServer) replicate(ctx context.Context, b TransferBatch) ([]uint64, error) {
	if rh, ok := s.h.(ReplicaHandler); ok {
		needFull, err := rh.Replicate(ctx, b)
		return needFull, statusFromError(err)
	}
	return nil, statusFromError(s.h.Transfer(ctx, b))
}

// errNotReplica ends a ReplicateStream whose request is not a replication
// batch: handoffs go through the unary Transfer.
var errNotReplica = status.Error(codes.InvalidArgument, ErrInvalidCheck.Error()+": replica: ReplicateStream carries replication batches only (TransferRequest.replica set)")

// ReplicateStream serves replication batches one after another, as Transfer
// serves them: each request is decoded into a pooled *xferRequest, checked
// (xferRequest.check), passed to the handler, and answered with its need_full
// before the next is read, so answers come in request order. The first
// request that Transfer would refuse (or that is not a replication batch, or
// whose handler fails) ends the stream with that status: the sender closes
// the stream on any error anyway and opens a new one for its next send, so a
// per-request error would buy it nothing. Requests run on a goroutine of
// their own, so that the stream ends when the server stops even while that
// goroutine waits in RecvMsg; a request being decided is answered first.
//
// The handler's context is the stream's: the sender bounds each request by
// closing the stream when its deadline passes, which cancels that context.
func (s *peerServer) ReplicateStream(stream pb.Peer_ReplicateStreamServer) error {
	select {
	case <-s.stop:
		return errStreamStopping
	default:
	}
	rs := &replStream{srv: s, stream: stream}
	done := make(chan error, 1)
	go func() { done <- rs.loop() }()
	var err error
	select {
	case err = <-done:
		if errors.Is(err, io.EOF) {
			err = nil // the client closed its side after its last request
		}
	case <-s.stop:
		err = errStreamStopping
	}
	rs.mu.Lock()
	rs.stopped = true
	rs.mu.Unlock()
	rs.wg.Wait() // a request being decided is answered first
	return err
}

// replStream is the server side of one ReplicateStream.
type replStream struct {
	srv    *peerServer
	stream grpc.ServerStream
	wg     sync.WaitGroup // the request being decided and answered
	resp   xferResponse   // the answer, reused

	mu      sync.Mutex
	stopped bool // the handler is returning: no new request is served
}

// loop serves requests until the stream ends, a request fails (its status
// error is returned), or the handler is returning.
func (rs *replStream) loop() error {
	s := rs.srv
	ctx := rs.stream.Context()
	sender, _ := PeerMember(ctx) // one connection, one certificate
	for {
		req := s.getXfer()
		if err := rs.stream.RecvMsg(req); err != nil {
			s.putXfer(req)
			return err
		}
		rs.mu.Lock()
		if rs.stopped {
			rs.mu.Unlock()
			s.putXfer(req)
			return nil // the handler is returning; the sender sees the stream end
		}
		rs.wg.Add(1)
		rs.mu.Unlock()
		err := rs.serve(ctx, req, sender)
		s.putXfer(req)
		rs.wg.Done()
		if err != nil {
			return err
		}
	}
}

// serve checks, decides and answers one request.
func (rs *replStream) serve(ctx context.Context, m *xferRequest, sender string) error {
	if err := m.check(); err != nil {
		return err
	}
	b := m.batch
	if !b.Replica {
		return errNotReplica
	}
	rs.resp.needFull = nil
	if len(b.States) > 0 || len(b.Penalties) > 0 || b.Done {
		b.Sender = sender
		needFull, err := rs.srv.replicate(ctx, b)
		if err != nil {
			return err
		}
		rs.resp.needFull = needFull
	}
	err := rs.stream.SendMsg(&rs.resp)
	rs.resp.needFull = nil
	return err
}
