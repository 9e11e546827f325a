package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// replRecorder is a ReplicaHandler that records the keys of every
// replication batch in arrival order and answers the hashes of the keys
// starting with "whole" as need_full. With gate set, Replicate waits for gate
// to close or its context to end.
type replRecorder struct {
	fakePeer
	gate    chan struct{}
	entered chan struct{} // if not nil, gets a token on every entry

	mu      sync.Mutex
	batches [][]string
}

func (r *replRecorder) Replicate(ctx context.Context, b TransferBatch) ([]uint64, error) {
	if r.entered != nil {
		select {
		case r.entered <- struct{}{}:
		default:
		}
	}
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var keys []string
	var out []uint64
	for _, s := range b.States {
		keys = append(keys, s.Key)
		if strings.HasPrefix(s.Key, "whole") {
			out = append(out, s.KeyHash)
		}
	}
	r.mu.Lock()
	r.batches = append(r.batches, keys)
	r.mu.Unlock()
	return out, nil
}

func (r *replRecorder) seen() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// callCounter counts the RPCs a server receives by full method name.
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) options() []grpc.ServerOption {
	c.n = make(map[string]int)
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			c.add(info.FullMethod)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			c.add(info.FullMethod)
			return h(srv, ss)
		}),
	}
}

func (c *callCounter) add(m string) {
	c.mu.Lock()
	c.n[m]++
	c.mu.Unlock()
}

func (c *callCounter) get(m string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[m]
}

// replBatch returns a replication batch of n states named prefix0..; the
// states whose index is in whole are named "whole..." (the recorder wants them
// whole), and the hashes of those are returned.
func replBatch(prefix string, n int, whole ...int) (TransferBatch, []uint64) {
	lim := validCheck("", 0).Limit
	var b TransferBatch
	var want []uint64
	b.From = "node-a"
	for i := range n {
		s := KeyState{Key: fmt.Sprint(prefix, i), KeyHash: uint64(1000*len(prefix) + i + 1), Limit: lim, State: []byte{byte(i)}}
		if slices.Contains(whole, i) {
			s.Key = "whole-" + s.Key
			want = append(want, s.KeyHash)
		}
		b.States = append(b.States, s)
	}
	return b, want
}

func keysOf(b TransferBatch) []string {
	var out []string
	for _, s := range b.States {
		out = append(out, s.Key)
	}
	return out
}

// Replication batches travel on one stream: chunks and sends reach the
// handler in order, need_full comes back for each send, and no unary Transfer
// is made.
func TestReplicateStreamInOrder(t *testing.T) {
	t.Parallel()
	h := &replRecorder{}
	var cc callCounter
	addr, _ := startServer(t, ServerConfig{MaxBatch: 3, ServerOptions: cc.options()}, h, nil)
	p := newPool(t, ClientConfig{MaxBatch: 3})
	var wantBatches [][]string
	for i, n := range []int{7, 1, 3, 5} {
		b, want := replBatch(fmt.Sprint("s", i, "-"), n, 0, n-1)
		got, err := p.Replicate(context.Background(), addr, b)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("send %d: got %v, %v, want %v", i, got, err, want)
		}
		keys := keysOf(b)
		for len(keys) > 0 {
			k := min(3, len(keys))
			wantBatches = append(wantBatches, keys[:k])
			keys = keys[k:]
		}
	}
	if got := h.seen(); !slices.EqualFunc(got, wantBatches, slices.Equal) {
		t.Fatalf("handler saw %q, want %q", got, wantBatches)
	}
	if s, u := cc.get(pb.Peer_ReplicateStream_FullMethodName), cc.get(pb.Peer_Transfer_FullMethodName); s != 1 || u != 0 {
		t.Fatalf("got %d streams and %d unary Transfers, want 1 and 0", s, u)
	}
	// Handoffs stay unary.
	if err := p.Handoff(context.Background(), addr, TransferBatch{From: "node-a", States: []KeyState{{Key: "h", Limit: validCheck("", 0).Limit}}, Done: true}); err != nil {
		t.Fatal(err)
	}
	if u := cc.get(pb.Peer_Transfer_FullMethodName); u != 1 || h.transfers.Load() != 1 {
		t.Fatalf("handoff: got %d unary Transfers and %d handler calls, want 1 and 1", u, h.transfers.Load())
	}
}

// concurrent sends to one peer take turns on the stream and each gets its
// own answer.
func TestReplicateStreamConcurrentSends(t *testing.T) {
	t.Parallel()
	h := &replRecorder{}
	addr, _ := startServer(t, ServerConfig{}, h, nil)
	p := newPool(t, ClientConfig{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				b, want := replBatch(fmt.Sprint("g", g, "-", i, "-"), 3, i%3)
				got, err := p.Replicate(context.Background(), addr, b)
				if err != nil || !slices.Equal(got, want) {
					t.Errorf("goroutine %d send %d: got %v, %v, want %v", g, i, got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := len(h.seen()); n != 160 {
		t.Fatalf("handler saw %d batches, want 160", n)
	}
}

// cutProxy relays TCP connections to target and can cut them all.
type cutProxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{lis: lis, target: target}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(func() { lis.Close(); p.cut() })
	return p
}

func (p *cutProxy) addr() string { return p.lis.Addr().String() }

// cut closes every relayed connection; new ones are relayed again.
func (p *cutProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns) / 2
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	return n
}

// A connection cut under an open stream fails at most the send that finds
// it broken (with ErrUnavailable); the next send opens a new stream and
// succeeds.
func TestReplicateStreamReopensAfterCut(t *testing.T) {
	t.Parallel()
	h := &replRecorder{}
	var cc callCounter
	addr, _ := startServer(t, ServerConfig{ServerOptions: cc.options()}, h, nil)
	px := newCutProxy(t, addr)
	p := newPool(t, ClientConfig{TransferTimeout: 5 * time.Second})
	send := func(i int) error {
		b, want := replBatch(fmt.Sprint("c", i, "-"), 2, 1)
		got, err := p.Replicate(context.Background(), px.addr(), b)
		if err == nil && !slices.Equal(got, want) {
			t.Fatalf("send %d: got %v, want %v", i, got, want)
		}
		return err
	}
	if err := send(0); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 3; round++ {
		if n := px.cut(); n != 1 {
			t.Fatalf("round %d: cut %d connections, want 1", round, n)
		}
		if err := send(10 * round); err != nil {
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("round %d: send on the cut stream: got %v, want an error wrapping ErrUnavailable", round, err)
			}
			if err := send(10*round + 1); err != nil {
				t.Fatalf("round %d: the send after a failed one: got %v, want it to reopen and succeed", round, err)
			}
		}
		if got := cc.get(pb.Peer_ReplicateStream_FullMethodName); got != round+1 {
			t.Fatalf("round %d: server saw %d streams, want %d", round, got, round+1)
		}
	}
}

// GracefulStop (and Stop) end an open replication stream at once instead of
// waiting for the peer to close it; the sender's next send fails with
// ErrUnavailable, and once a server is back on the address a send opens a new
// stream to it.
func TestReplicateStreamServerStops(t *testing.T) {
	t.Parallel()
	for _, graceful := range []bool{true, false} {
		t.Run(fmt.Sprint("graceful=", graceful), func(t *testing.T) {
			t.Parallel()
			h := &replRecorder{}
			addr, srv := startServer(t, ServerConfig{}, h, nil)
			p := newPool(t, ClientConfig{TransferTimeout: 5 * time.Second})
			b, _ := replBatch("a", 2)
			if _, err := p.Replicate(context.Background(), addr, b); err != nil {
				t.Fatal(err)
			}
			stopped := make(chan struct{})
			go func() {
				if graceful {
					srv.GracefulStop()
				} else {
					srv.Stop()
				}
				close(stopped)
			}()
			recv(t, stopped, eventWait, "the server to stop with a replication stream open")
			if _, err := p.Replicate(context.Background(), addr, b); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("send to the stopped server: got %v, want an error wrapping ErrUnavailable", err)
			}
			lis, err := net.Listen("tcp", addr)
			if err != nil {
				t.Skipf("cannot listen on %s again: %v", addr, err)
			}
			h2 := &replRecorder{}
			srv2 := NewServer(ServerConfig{}, h2, nil)
			go func() { _ = srv2.Serve(lis) }()
			t.Cleanup(srv2.Stop)
			// The connection may be in its reconnect backoff for a while.
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, err := p.Replicate(context.Background(), addr, b)
				if err == nil {
					break
				}
				if !errors.Is(err, ErrUnavailable) || time.Now().After(deadline) {
					t.Fatalf("send to the restarted server: got %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if got := h2.seen(); len(got) != 1 {
				t.Fatalf("restarted server saw %q, want one batch", got)
			}
		})
	}
}

// A handler that never answers fails the send at its deadline (the caller's
// ctx or TransferTimeout, whichever comes first) with ErrUnavailable, and
// the next send opens a new stream.
func TestReplicateStreamStuckHandler(t *testing.T) {
	t.Parallel()
	h := &replRecorder{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	var cc callCounter
	addr, _ := startServer(t, ServerConfig{ServerOptions: cc.options()}, h, nil)
	p := newPool(t, ClientConfig{TransferTimeout: 300 * time.Millisecond})
	b, _ := replBatch("k", 1)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.Replicate(ctx, addr, b)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("send to a stuck handler took %v, want about 200ms", took)
	}
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx deadline: got %v, want an error wrapping ErrUnavailable and context.DeadlineExceeded", err)
	}
	start = time.Now()
	_, err = p.Replicate(context.Background(), addr, b)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("send to a stuck handler took %v, want about TransferTimeout (300ms)", took)
	}
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TransferTimeout: got %v, want an error wrapping ErrUnavailable and context.DeadlineExceeded", err)
	}
	close(h.gate)
	if _, err := p.Replicate(context.Background(), addr, b); err != nil {
		t.Fatalf("send once the handler answers: %v", err)
	}
	if got := cc.get(pb.Peer_ReplicateStream_FullMethodName); got != 3 {
		t.Fatalf("server saw %d streams, want 3 (one per send, as each failure closes its stream)", got)
	}
}

// Closing the pool (or dropping the peer) ends a send waiting on the stream at
// once.
func TestReplicateStreamPoolClose(t *testing.T) {
	t.Parallel()
	for _, drop := range []bool{false, true} {
		h := &replRecorder{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
		addr, _ := startServer(t, ServerConfig{}, h, nil)
		p := newPool(t, ClientConfig{TransferTimeout: time.Minute})
		b, _ := replBatch("k", 1)
		done := make(chan error, 1)
		go func() {
			_, err := p.Replicate(context.Background(), addr, b)
			done <- err
		}()
		recv(t, h.entered, eventWait, "the handler to get the batch")
		if drop {
			p.Drop(addr)
		} else {
			_ = p.Close()
		}
		if err := recv(t, done, eventWait, "the send to end"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("drop=%v: got %v, want an error wrapping ErrUnavailable", drop, err)
		}
		close(h.gate)
	}
}

// RetireAll (the node's TLS material changed) lets a replication send in
// flight finish on the old connection: cut short, it would fail as if the
// backup were unreachable, and the node would skip a live owner for its
// backup and admit twice.
func TestReplicateStreamSurvivesRetireAll(t *testing.T) {
	t.Parallel()
	h := &replRecorder{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	addr, _ := startServer(t, ServerConfig{}, h, nil)
	p := newPool(t, ClientConfig{TransferTimeout: time.Minute, ForwardTimeout: time.Minute})
	b, _ := replBatch("k", 1)
	done := make(chan error, 1)
	go func() {
		_, err := p.Replicate(context.Background(), addr, b)
		done <- err
	}()
	recv(t, h.entered, eventWait, "the handler to get the batch")
	p.RetireAll()
	// The retiring connection polls every few milliseconds; give it rounds to
	// (wrongly) close the stream before the handler answers.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("the send ended before its answer: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(h.gate)
	if err := recv(t, done, eventWait, "the send to end"); err != nil {
		t.Fatalf("send across RetireAll: %v", err)
	}
	// A later send dials a new connection and works too.
	if _, err := p.Replicate(context.Background(), addr, b); err != nil {
		t.Fatalf("send after RetireAll: %v", err)
	}
}

// A peer without ReplicateStream (an older member) gets unary Transfers, and
// the pool remembers it.
func TestReplicateStreamUnimplementedFallback(t *testing.T) {
	t.Parallel()
	h := &replRecorder{}
	var cc callCounter
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodecV2(newWireCodec())}, cc.options()...)...)
	d := peerServiceDesc()
	d.Streams = slices.DeleteFunc(slices.Clone(d.Streams), func(sd grpc.StreamDesc) bool { return sd.StreamName == "ReplicateStream" })
	if len(d.Streams) != len(pb.Peer_ServiceDesc.Streams)-1 {
		t.Fatal("ReplicateStream not found in the service description")
	}
	gs.RegisterService(d, &peerServer{cfg: ServerConfig{MaxBatch: 3}.withDefaults(), h: h, stop: make(chan struct{})})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	addr := lis.Addr().String()

	p := newPool(t, ClientConfig{MaxBatch: 3})
	for i := range 3 {
		b, want := replBatch(fmt.Sprint("u", i, "-"), 4, 0, 3)
		got, err := p.Replicate(context.Background(), addr, b)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("send %d: got %v, %v, want %v", i, got, err, want)
		}
	}
	if n := len(h.seen()); n != 6 {
		t.Fatalf("handler saw %d batches, want 6 (two chunks per send)", n)
	}
	if got := cc.get(pb.Peer_Transfer_FullMethodName); got != 6 {
		t.Fatalf("got %d unary Transfers, want 6", got)
	}
}

// The stream refuses what Transfer refuses, and handoffs: the status ends the
// stream and the sender's next send opens a new one.
func TestReplicateStreamRefusals(t *testing.T) {
	t.Parallel()
	h := &replRecorder{}
	addr, _ := startServer(t, ServerConfig{MaxKeyLen: 16}, h, nil)
	// A sender with a larger MaxKeyLen than the server's.
	p := newPool(t, ClientConfig{MaxKeyLen: 64})
	bad := TransferBatch{From: "node-a", States: []KeyState{{Key: "a-much-too-long-key", Limit: validCheck("", 0).Limit}}}
	if _, err := p.Replicate(context.Background(), addr, bad); !errors.Is(err, ErrInvalidCheck) || !strings.Contains(err.Error(), "states[0]") {
		t.Fatalf("invalid state: got %v, want an error wrapping ErrInvalidCheck naming states[0]", err)
	}
	b, want := replBatch("ok", 2, 1)
	if got, err := p.Replicate(context.Background(), addr, b); err != nil || !slices.Equal(got, want) {
		t.Fatalf("after a refusal: got %v, %v, want %v", got, err, want)
	}

	// A handoff sent on the stream is refused, whatever the client.
	cs, err := pb.NewPeerClient(rawConn(t, addr)).ReplicateStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Send(&pb.TransferRequest{From: "node-a", Done: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "replication batches only") {
		t.Fatalf("handoff on the stream: got %v, want InvalidArgument", err)
	}
	if n := h.transfers.Load(); n != 0 {
		t.Fatalf("Transfer handler called %d times, want 0", n)
	}
}

// A peer that answered ForwardStream and ReplicateStream with Unimplemented (a
// member from before them) gets unary RPCs only for StreamRetryInterval: once
// it is upgraded in place, at the same address, forwards and replication go
// back to the streams without this side restarting.
func TestStreamsRetriedAfterPeerUpgrade(t *testing.T) {
	t.Parallel()
	h := &replRecorder{}
	var old atomic.Bool
	old.Store(true)
	var mu sync.Mutex
	calls := make(map[string]int) // methods served (not refused)
	count := func(m string) {
		mu.Lock()
		calls[m]++
		mu.Unlock()
	}
	get := func(m string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[m]
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(newWireCodec()),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, hd grpc.UnaryHandler) (any, error) {
			count(info.FullMethod)
			return hd(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, hd grpc.StreamHandler) error {
			if old.Load() {
				return status.Errorf(codes.Unimplemented, "unknown method %s", info.FullMethod)
			}
			count(info.FullMethod)
			return hd(srv, ss)
		}))
	gs.RegisterService(peerServiceDesc(), &peerServer{cfg: ServerConfig{}.withDefaults(), h: h, stop: make(chan struct{})})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	addr := lis.Addr().String()
	p := newPool(t, ClientConfig{StreamRetryInterval: 20 * time.Millisecond})

	send := func(i int) {
		t.Helper()
		key := fmt.Sprint("up-", i)
		if r, err := p.Forward(context.Background(), addr, validCheck(key, 1)); err != nil || r.Owner != "owner:"+key {
			t.Fatalf("forward %d: got %+v, %v, want the peer's answer", i, r, err)
		}
		b, want := replBatch(fmt.Sprint("r", i, "-"), 2, 1)
		if got, err := p.Replicate(context.Background(), addr, b); err != nil || !slices.Equal(got, want) {
			t.Fatalf("replicate %d: got %v, %v, want %v", i, got, err, want)
		}
	}
	i := 0
	for ; i < 3; i++ {
		send(i)
	}
	if get(pb.Peer_Forward_FullMethodName) != 3 || get(pb.Peer_Transfer_FullMethodName) != 3 {
		t.Fatalf("old peer served %d unary Forwards and %d Transfers, want 3 each", get(pb.Peer_Forward_FullMethodName), get(pb.Peer_Transfer_FullMethodName))
	}

	old.Store(false) // the upgrade
	deadline := time.Now().Add(10 * time.Second)
	for get(pb.Peer_ForwardStream_FullMethodName) == 0 || get(pb.Peer_ReplicateStream_FullMethodName) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the upgrade: %d ForwardStreams, %d ReplicateStreams opened; want the streams back", get(pb.Peer_ForwardStream_FullMethodName), get(pb.Peer_ReplicateStream_FullMethodName))
		}
		send(i)
		i++
		time.Sleep(5 * time.Millisecond)
	}
	fw, tr := get(pb.Peer_Forward_FullMethodName), get(pb.Peer_Transfer_FullMethodName)
	for range 5 {
		send(i)
		i++
	}
	if get(pb.Peer_Forward_FullMethodName) != fw || get(pb.Peer_Transfer_FullMethodName) != tr {
		t.Fatalf("after the streams came back: unary Forwards %d -> %d, Transfers %d -> %d; want no more", fw, get(pb.Peer_Forward_FullMethodName), tr, get(pb.Peer_Transfer_FullMethodName))
	}
	if n := get(pb.Peer_ForwardStream_FullMethodName); n != 1 {
		t.Fatalf("%d ForwardStreams opened, want 1", n)
	}
}
