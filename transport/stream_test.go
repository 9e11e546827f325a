package transport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// slowPeer answers like fakePeer after a random delay of up to max per batch
// (seeded), so that the answers of batches in flight together come back out
// of order; it records the most batches it ever decided at the same time.
type slowPeer struct {
	max time.Duration

	mu      sync.Mutex
	rnd     *rand.Rand
	running int
	peak    int
	batches int
}

func (s *slowPeer) Forward(ctx context.Context, checks []Check, out []Result) {
	s.mu.Lock()
	d := time.Duration(s.rnd.Int64N(int64(s.max)))
	s.running++
	s.batches++
	s.peak = max(s.peak, s.running)
	s.mu.Unlock()
	time.Sleep(d)
	for i, c := range checks {
		out[i] = answer(c)
	}
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
}

func (s *slowPeer) Transfer(context.Context, TransferBatch) error { return nil }

func TestStreamMatchesResultsAcrossManyBatchesInFlight(t *testing.T) {
	t.Parallel()
	h := &slowPeer{max: 3 * time.Millisecond, rnd: rand.New(rand.NewPCG(1, 2))}
	addr, _ := startServer(t, ServerConfig{}, h, nil)
	p := newPool(t, ClientConfig{BatchMaxItems: 4, BatchMaxWait: 50 * time.Microsecond, MaxInflightBatches: 16, ForwardTimeout: 30 * time.Second})

	const callers, perCaller = 64, 40
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			for i := range perCaller {
				key := fmt.Sprintf("k%d-%d", g, i)
				hits := int64(g*perCaller + i)
				r, err := p.Forward(context.Background(), addr, validCheck(key, hits))
				if err != nil {
					errs <- err
					return
				}
				if r.Code != CodeOK || r.Owner != "owner:"+key || r.Decision.Remaining != hits {
					errs <- fmt.Errorf("key %s: got %+v, want owner:%s remaining %d", key, r, key, hits)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.peak < 2 {
		t.Fatalf("at most %d batches were decided at once, want several in flight", h.peak)
	}
	t.Logf("%d checks in %d batches, up to %d decided at once", callers*perCaller, h.batches, h.peak)
}

// listenAt listens on addr, retrying briefly while the port is being released.
func listenAt(t *testing.T, addr string) net.Listener {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		lis, err := net.Listen("tcp", addr)
		if err == nil {
			return lis
		}
		if time.Now().After(deadline) {
			t.Fatalf("listen %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStreamBrokenMidFlightFailsCallersAndRecovers(t *testing.T) {
	t.Parallel()
	f := &fakePeer{entered: make(chan int, 64), gate: make(chan struct{})}
	addr, s := startServer(t, ServerConfig{}, f, nil)
	const timeout = 10 * time.Second
	p := newPool(t, ClientConfig{BatchMaxItems: 2, MaxInflightBatches: 8, BatchMaxWait: time.Millisecond, ForwardTimeout: timeout})

	const callers = 6
	errs := make(chan error, callers)
	for i := range callers {
		go func() {
			_, err := p.Forward(context.Background(), addr, validCheck(fmt.Sprint("mid-", i), 1))
			errs <- err
		}()
	}
	for n := 0; n < callers; {
		n += recv(t, f.entered, eventWait, "the batches in the handler")
	}
	start := time.Now()
	s.Stop() // breaks the connection with every batch in flight
	for range callers {
		err := recv(t, errs, timeout, "a failed caller")
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v, want an error wrapping ErrUnavailable", err)
		}
	}
	if took := time.Since(start); took > timeout/2 {
		t.Fatalf("callers failed %v after the stop, want at once (well within ForwardTimeout %v)", took, timeout)
	}
	close(f.gate)

	// A new server at the same address: the next forwards open a new stream.
	f2 := &fakePeer{}
	s2 := NewServer(ServerConfig{}, f2, nil)
	lis := listenAt(t, addr)
	go func() { _ = s2.Serve(lis) }()
	t.Cleanup(s2.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := p.Forward(context.Background(), addr, validCheck("after", 3))
		if err == nil {
			if r.Owner != "owner:after" || r.Decision.Remaining != 3 {
				t.Fatalf("after restart: got %+v", r)
			}
			break
		}
		if !errors.Is(err, ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("after restart: got %v, want the new server to answer", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deafPeer blocks every Forward until release is closed, ignoring ctx: a peer
// that keeps the stream open and never answers.
type deafPeer struct {
	release chan struct{}
	calls   atomic.Int64
}

func (d *deafPeer) Forward(_ context.Context, checks []Check, out []Result) {
	if d.calls.Add(1) == 1 {
		<-d.release
	}
	for i, c := range checks {
		out[i] = answer(c)
	}
}

func (d *deafPeer) Transfer(context.Context, TransferBatch) error { return nil }

func TestStreamSilentPeerFailsAtForwardTimeoutAndRecovers(t *testing.T) {
	t.Parallel()
	d := &deafPeer{release: make(chan struct{})}
	defer close(d.release)
	addr, _ := startServer(t, ServerConfig{}, d, nil)
	const timeout = 300 * time.Millisecond
	var batchErr atomic.Value
	p := newPool(t, ClientConfig{ForwardTimeout: timeout, OnBatch: func(_ string, _ int, _ time.Duration, err error) {
		if err != nil {
			batchErr.Store(err)
		}
	}})
	start := time.Now()
	_, err := p.Forward(context.Background(), addr, validCheck("deaf", 1))
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if took < timeout || took > timeout+2*time.Second {
		t.Fatalf("returned after %v, want about ForwardTimeout %v", took, timeout)
	}
	// OnBatch runs after the caller is released: poll for it.
	for deadline := time.Now().Add(5 * time.Second); batchErr.Load() == nil; {
		if time.Now().After(deadline) {
			t.Fatal("OnBatch saw no error")
		}
		time.Sleep(time.Millisecond)
	}
	// The silent stream was cancelled; the next check goes on a new one, which
	// this peer answers.
	r, err := p.Forward(context.Background(), addr, validCheck("next", 2))
	if err != nil || r.Owner != "owner:next" {
		t.Fatalf("after the timeout: got %+v, %v, want an answer on a new stream", r, err)
	}
}

func TestStreamCallerDeadlineWhileBatchInFlight(t *testing.T) {
	t.Parallel()
	f := &fakePeer{entered: make(chan int, 16), gate: make(chan struct{})}
	addr, _ := startServer(t, ServerConfig{}, f, nil)
	p := newPool(t, ClientConfig{ForwardTimeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.Forward(ctx, addr, validCheck("late", 1))
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("returned after %v, want about the 50ms caller deadline", took)
	}
	recv(t, f.entered, eventWait, "the batch in the handler")
	close(f.gate) // the late answer arrives and is dropped
	r, err := p.Forward(context.Background(), addr, validCheck("on-time", 4))
	if err != nil || r.Owner != "owner:on-time" || r.Decision.Remaining != 4 {
		t.Fatalf("next check: got %+v, %v, want its own result", r, err)
	}
}

func TestGracefulStopWithOpenStreamReturnsPromptly(t *testing.T) {
	t.Parallel()
	f := &fakePeer{entered: make(chan int, 16), gate: make(chan struct{})}
	addr, s := startServer(t, ServerConfig{}, f, nil)
	p := newPool(t, ClientConfig{ForwardTimeout: 30 * time.Second})
	// A batch in the handler when the stop begins is answered.
	inFlight := make(chan error, 1)
	go func() {
		r, err := p.Forward(context.Background(), addr, validCheck("during-stop", 5))
		if err == nil && r.Decision.Remaining != 5 {
			err = fmt.Errorf("got %+v", r)
		}
		inFlight <- err
	}()
	recv(t, f.entered, eventWait, "the batch in the handler")
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned before the batch in the handler was answered")
	case <-time.After(50 * time.Millisecond):
	}
	close(f.gate)
	if err := recv(t, inFlight, eventWait, "the in-flight check"); err != nil {
		t.Fatalf("in-flight check: %v", err)
	}
	// The client's stream is still open (the Pool is not closed): the stop
	// must end it rather than wait for the client.
	recv(t, stopped, 2*time.Second, "GracefulStop")
	if _, err := p.Forward(context.Background(), addr, validCheck("after-stop", 1)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after stop: got %v, want ErrUnavailable", err)
	}
}

func TestPoolCloseAndDropEndClientStreams(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"close", "drop"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			addr, s := startServer(t, ServerConfig{}, &fakePeer{}, nil)
			p := newPool(t, ClientConfig{})
			if _, err := p.Forward(context.Background(), addr, validCheck("k", 1)); err != nil {
				t.Fatal(err)
			}
			if how == "close" {
				_ = p.Close()
			} else {
				p.Drop(addr)
			}
			// The bare gRPC graceful stop does not end streams itself: it returns
			// only once the client has ended its stream.
			stopped := make(chan struct{})
			go func() { s.GRPCServer().GracefulStop(); close(stopped) }()
			recv(t, stopped, eventWait, "the gRPC graceful stop")
		})
	}
}

// unaryOnlyPeer is a Peer service from before ForwardStream.
type unaryOnlyPeer struct{ *peerServer }

func (unaryOnlyPeer) ForwardStream(pb.Peer_ForwardStreamServer) error {
	return status.Error(codes.Unimplemented, "method ForwardStream not implemented")
}

func TestForwardFallsBackToUnaryForOldPeers(t *testing.T) {
	t.Parallel()
	f := &fakePeer{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterPeerServer(gs, unaryOnlyPeer{&peerServer{cfg: ServerConfig{}.withDefaults(), h: f}})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	addr := lis.Addr().String()
	p := newPool(t, ClientConfig{})
	for i := range 3 {
		r, err := p.Forward(context.Background(), addr, validCheck(fmt.Sprint("old-", i), int64(i)))
		if err != nil || r.Owner != fmt.Sprint("owner:old-", i) {
			t.Fatalf("forward %d: got %+v, %v, want the old peer's answer", i, r, err)
		}
	}
	if got := f.calls.Load(); got != 3 {
		t.Fatalf("old peer's handler saw %d batches, want 3", got)
	}
}

// TestStreamCallersGivingUpDoNotDisturbOthers has callers give up on checks
// in flight (their deadline passes while the peer is slow) among callers that
// wait: batches are recycled once their last caller lets go and their late
// answers are dropped, so every answer a caller gets must be its own check's,
// and a caller that gives up gets its context's error.
func TestStreamCallersGivingUpDoNotDisturbOthers(t *testing.T) {
	t.Parallel()
	h := &slowPeer{max: 2 * time.Millisecond, rnd: rand.New(rand.NewPCG(3, 4))}
	addr, _ := startServer(t, ServerConfig{}, h, nil)
	p := newPool(t, ClientConfig{BatchMaxItems: 8, BatchMaxWait: 100 * time.Microsecond, MaxInflightBatches: 8, ForwardTimeout: 30 * time.Second})

	const callers, perCaller = 32, 60
	var wg sync.WaitGroup
	var gaveUp, answered atomic.Int64
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 5))
			for i := range perCaller {
				key := fmt.Sprintf("k%d-%d", g, i)
				hits := int64(g*perCaller + i)
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if g%2 == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(r.Int64N(int64(6*time.Millisecond))))
				}
				res, err := p.Forward(ctx, addr, validCheck(key, hits))
				cancel()
				switch {
				case err != nil && g%2 == 0 && errors.Is(err, ErrUnavailable) && errors.Is(err, context.DeadlineExceeded):
					gaveUp.Add(1)
				case err != nil:
					errs <- fmt.Errorf("key %s: %w", key, err)
					return
				case res.Code != CodeOK || res.Owner != "owner:"+key || res.Decision.Remaining != hits:
					errs <- fmt.Errorf("key %s: got %+v, want owner:%s remaining %d", key, res, key, hits)
					return
				default:
					answered.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if gaveUp.Load() == 0 || answered.Load() == 0 {
		t.Fatalf("%d checks given up and %d answered, want some of each", gaveUp.Load(), answered.Load())
	}
	t.Logf("%d checks given up, %d answered", gaveUp.Load(), answered.Load())
}
