package transport

import (
	"context"
	"crypto/x509"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// helloPeer is a fakePeer that also answers Hello.
type helloPeer struct{ fakePeer }

func (h *helloPeer) Hello(_ context.Context, in Hello, _ string) (Hello, error) { return in, nil }

// ServerConfig.PeerGate is asked for every Peer RPC but Hello and after every
// message of a Peer stream: while it refuses, Forward (on its stream),
// Transfer and ReplicateStream fail and reach no handler, Hello is answered;
// once it lets the caller through the same pool works again, and refusing
// it again ends its open streams.
func TestPeerGate(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	refuse.Store(true)
	var asked atomic.Int64
	gate := func(cert *x509.Certificate) error {
		asked.Add(1)
		if cert != nil {
			return errors.New("a plaintext test sees no certificate")
		}
		if refuse.Load() {
			return errors.New("not a member")
		}
		return nil
	}
	h := &helloPeer{}
	addr, _ := startServer(t, ServerConfig{PeerGate: gate}, h, nil)
	p := newPool(t, ClientConfig{ForwardTimeout: time.Second, TransferTimeout: time.Second})
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Minute}
	batch := TransferBatch{From: "x", States: []KeyState{{Key: "k", Limit: l}}}
	attempt := func() (fwd, xfer, repl error) {
		_, fwd = p.Forward(ctx, addr, validCheck("k", 1))
		xfer = p.Handoff(ctx, addr, batch)
		_, repl = p.Replicate(ctx, addr, batch)
		return
	}
	if _, _, err := p.Hello(ctx, addr, Hello{Member: "x"}); err != nil {
		t.Errorf("Hello through a refusing gate: %v, want answered", err)
	}
	fwd, xfer, repl := attempt()
	if fwd == nil || xfer == nil || repl == nil {
		t.Errorf("refused caller: Forward %v, Transfer %v, ReplicateStream %v; want all refused", fwd, xfer, repl)
	}
	if h.calls.Load() != 0 || h.transfers.Load() != 0 {
		t.Errorf("a refused caller reached the handler: %d forwards, %d transfers", h.calls.Load(), h.transfers.Load())
	}
	if asked.Load() < 3 {
		t.Errorf("gate asked %d times, want at least 3", asked.Load())
	}
	refuse.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		fwd, xfer, repl = attempt()
		if fwd == nil && xfer == nil && repl == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admitted caller: Forward %v, Transfer %v, ReplicateStream %v; want all through", fwd, xfer, repl)
		}
		time.Sleep(50 * time.Millisecond) // the pool redials after the refusals
	}
	refuse.Store(true)
	if _, err := p.Replicate(ctx, addr, batch); err == nil {
		t.Error("the open replication stream after the gate refused its caller: accepted")
	}
}
