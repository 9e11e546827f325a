package transport

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"
)

// hintedPeer holds every check whose key starts with "held" until release is
// closed, answers the others at once, and says through ForwardMayWait which
// batches will wait. Every Forward reports
// on decided whether it ran on the stream's receive goroutine.
type hintedPeer struct {
	release chan struct{}
	decided chan decidedBatch
}

type decidedBatch struct {
	key    string
	inline bool
}

func (h *hintedPeer) ForwardMayWait(checks []Check) bool {
	for _, c := range checks {
		if strings.HasPrefix(c.Key, "held") {
			return true
		}
	}
	return false
}

func (h *hintedPeer) Forward(ctx context.Context, checks []Check, out []Result) {
	h.decided <- decidedBatch{key: checks[0].Key, inline: onRecvLoop()}
	for i, c := range checks {
		if strings.HasPrefix(c.Key, "held") {
			select {
			case <-h.release:
			case <-ctx.Done():
			}
		}
		out[i] = answer(c)
	}
}

func (h *hintedPeer) Transfer(context.Context, TransferBatch) error { return nil }

// onRecvLoop reports whether the caller runs on a ForwardStream's receive
// goroutine.
func onRecvLoop() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, ".(*forwardStream).recvLoop") {
			return true
		}
		if !more {
			return false
		}
	}
}

func TestForwardStreamDecidesOnReceiveGoroutineUnlessHandlerMayWait(t *testing.T) {
	t.Parallel()
	h := &hintedPeer{release: make(chan struct{}), decided: make(chan decidedBatch, 4)}
	addr, _ := startServer(t, ServerConfig{}, h, nil)
	p := newPool(t, ClientConfig{BatchMaxItems: 1, ForwardTimeout: 30 * time.Second})

	// A batch that will not wait is decided on the receive goroutine.
	if _, err := p.Forward(context.Background(), addr, validCheck("free-1", 1)); err != nil {
		t.Fatal(err)
	}
	if d := recv(t, h.decided, 10*time.Second, "free-1 decided"); !d.inline {
		t.Errorf("free-1 was decided in a goroutine of its own, want on the receive goroutine")
	}

	// A batch that may wait gets its own goroutine, and while it waits a later
	// batch on the same stream is still answered.
	heldDone := make(chan error, 1)
	go func() {
		_, err := p.Forward(context.Background(), addr, validCheck("held-1", 1))
		heldDone <- err
	}()
	if d := recv(t, h.decided, 10*time.Second, "held-1 decided"); d.key != "held-1" || d.inline {
		t.Errorf("first decided %+v, want held-1 in a goroutine of its own", d)
	}
	r, err := p.Forward(context.Background(), addr, validCheck("free-2", 2))
	if err != nil || r.Owner != "owner:free-2" {
		t.Fatalf("free-2 while held-1 waits: %+v, %v", r, err)
	}
	if d := recv(t, h.decided, 10*time.Second, "free-2 decided"); !d.inline {
		t.Errorf("free-2 was decided in a goroutine of its own, want on the receive goroutine")
	}
	select {
	case err := <-heldDone:
		t.Fatalf("held-1 answered before release: %v", err)
	default:
	}
	close(h.release)
	if err := recv(t, heldDone, 10*time.Second, "held-1 answered"); err != nil {
		t.Fatal(err)
	}
}

func TestForwardStreamWithoutHintDecidesInOwnGoroutine(t *testing.T) {
	t.Parallel()
	f := &fakePeer{}
	addr, _ := startServer(t, ServerConfig{}, onRecvLoopRecorder{f}, nil)
	p := newPool(t, ClientConfig{BatchMaxItems: 1, ForwardTimeout: 30 * time.Second})
	r, err := p.Forward(context.Background(), addr, validCheck("k", 1))
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != CodeOK {
		t.Errorf("got %+v, want CodeOK from a goroutine of its own", r)
	}
	if f.calls.Load() != 1 {
		t.Fatalf("handler called %d times, want 1", f.calls.Load())
	}
}

// onRecvLoopRecorder is a PeerHandler without ForwardMayWait that fails the
// check with CodeUnavailable when it runs on the receive goroutine.
type onRecvLoopRecorder struct{ *fakePeer }

func (o onRecvLoopRecorder) Forward(ctx context.Context, checks []Check, out []Result) {
	o.fakePeer.Forward(ctx, checks, out)
	if onRecvLoop() {
		for i := range out {
			out[i] = Result{Code: CodeUnavailable, Message: "decided on the receive goroutine"}
		}
	}
}
