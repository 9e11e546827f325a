package transport

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/stats"
)

// streamCounter is a grpc stats.Handler that counts the client streams begun.
type streamCounter struct{ n atomic.Int64 }

func (*streamCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (c *streamCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	if b, ok := s.(*stats.Begin); ok && b.IsClientStream {
		c.n.Add(1)
	}
}
func (*streamCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (*streamCounter) HandleConn(context.Context, stats.ConnStats) {}

// peerStreams reports whether the peer of addr in p has its ForwardStream
// and its replication stream open.
func peerStreams(t *testing.T, p *Pool, addr string) (fwd, repl bool) {
	t.Helper()
	v, ok := p.peers.Load(addr)
	if !ok {
		t.Fatalf("no peer for %s", addr)
	}
	pe := v.(*peer)
	pe.mu.Lock()
	fwd = pe.stream != nil
	pe.mu.Unlock()
	pe.repl.mu.Lock()
	repl = pe.repl.cs != nil
	pe.repl.mu.Unlock()
	return fwd, repl
}

// TestPoolIdleClosesStreamsAndConnection: a peer unused for IdleTimeout
// closes its ForwardStream and replication stream, gRPC then lets its
// connection go idle (closed), and the next forward and replication send
// open them again.
func TestPoolIdleClosesStreamsAndConnection(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, ServerConfig{}, replicaPeer{}, nil)
	p := newPool(t, ClientConfig{IdleTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	use := func() {
		t.Helper()
		if _, err := p.Forward(ctx, addr, validCheck("k", 1)); err != nil {
			t.Fatalf("Forward: %v", err)
		}
		if _, err := p.Replicate(ctx, addr, TransferBatch{From: "node-a", States: benchStates(t, 3, false)}); err != nil {
			t.Fatalf("Replicate: %v", err)
		}
		if fwd, repl := peerStreams(t, p, addr); !fwd || !repl {
			t.Fatalf("after use: forward stream open %v, replication stream open %v; want both open", fwd, repl)
		}
	}
	for round := range 2 {
		use()
		deadline := time.Now().Add(10 * time.Second)
		for {
			fwd, repl := peerStreams(t, p, addr)
			if !fwd && !repl {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: 10 s after the last use: forward stream open %v, replication stream open %v; want both closed after IdleTimeout", round, fwd, repl)
			}
			time.Sleep(10 * time.Millisecond)
		}
		v, _ := p.peers.Load(addr)
		conn := v.(*peer).conn
		for st := conn.GetState(); st != connectivity.Idle; st = conn.GetState() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: connection state %v, want %v once no stream is open for IdleTimeout", round, st, connectivity.Idle)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	use() // opens both again after the connection went idle
}

// TestPoolIdleNeverCutsAUse: with an IdleTimeout shorter than the pauses
// between uses, streams close and reopen all the time under concurrent
// forwards and replication sends, and not one of them fails.
func TestPoolIdleNeverCutsAUse(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, ServerConfig{}, replicaPeer{}, nil)
	streams := new(streamCounter)
	p := newPool(t, ClientConfig{IdleTimeout: 5 * time.Millisecond, DialOptions: []grpc.DialOption{grpc.WithStatsHandler(streams)}})
	ctx := context.Background()
	var wg sync.WaitGroup
	end := time.Now().Add(1500 * time.Millisecond)
	states := benchStates(t, 2, false)
	for g := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; time.Now().Before(end); i++ {
				var err error
				if g%3 == 0 {
					_, err = p.Replicate(ctx, addr, TransferBatch{From: "node-a", States: states})
				} else {
					_, err = p.Forward(ctx, addr, validCheck(benchKeys[i%len(benchKeys)], 1))
				}
				if err != nil {
					t.Errorf("use %d of goroutine %d: %v", i, g, err)
					return
				}
				time.Sleep(time.Duration(r.IntN(12)) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	// Two streams when nothing closes; the pauses make many more.
	if n := streams.n.Load(); n < 10 {
		t.Errorf("%d streams opened, want at least 10: idle streams were not closed between uses", n)
	}
}
