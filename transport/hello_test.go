package transport

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// stallHello is a fakePeer whose Hello, while stall is set, waits until its
// call ends (the caller gives up or the connection closes) or the test ends;
// every Hello is announced on entered first.
type stallHello struct {
	fakePeer
	stall   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *stallHello) Hello(ctx context.Context, in Hello, _ string) (Hello, error) {
	h.entered <- struct{}{}
	if h.stall.Load() {
		select {
		case <-ctx.Done():
			return Hello{}, ctx.Err()
		case <-h.release:
			return Hello{}, errors.New("test over")
		}
	}
	return in, nil
}

func newStallHello(t *testing.T) *stallHello {
	h := &stallHello{entered: make(chan struct{}, 16), release: make(chan struct{})}
	h.stall.Store(true)
	t.Cleanup(func() { close(h.release) })
	return h
}

// A Hello whose connection this Pool closes under it (Drop) fails with
// ErrLocalClose (and ErrUnavailable): the peer did nothing, and the same
// Hello sent again, on a new connection, is answered. A Hello that fails for
// any other reason (the caller gave up, the peer stopped under the call,
// nothing listens at the address) does not wrap
// ErrLocalClose.
func TestHelloLocalClose(t *testing.T) {
	t.Parallel()
	me := Hello{ClusterLabel: "c", Member: "me", ProtocolVersion: ProtocolVersion, InstanceID: "i0"}

	// inFlight runs a Hello to addr on p with ctx, waits until h holds it,
	// runs cut, and returns the Hello's error.
	inFlight := func(t *testing.T, ctx context.Context, p *Pool, addr string, h *stallHello, cut func()) error {
		t.Helper()
		errc := make(chan error, 1)
		go func() {
			_, _, err := p.Hello(ctx, addr, me)
			errc <- err
		}()
		recv(t, h.entered, eventWait, "the Hello at the peer")
		cut()
		err := recv(t, errc, eventWait, "the Hello's error")
		if err == nil {
			t.Fatal("the Hello was answered, want it cut")
		}
		return err
	}

	t.Run("dropped under the call", func(t *testing.T) {
		t.Parallel()
		h := newStallHello(t)
		addr, _ := startServer(t, ServerConfig{}, h, nil)
		p := newPool(t, ClientConfig{})
		ctx, cancel := context.WithTimeout(context.Background(), eventWait)
		defer cancel()
		err := inFlight(t, ctx, p, addr, h, func() { p.Drop(addr) })
		if !errors.Is(err, ErrLocalClose) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Hello dropped under the call: %v, want ErrLocalClose and ErrUnavailable", err)
		}
		h.stall.Store(false)
		got, _, err := p.Hello(ctx, addr, me)
		if err != nil || got != me {
			t.Fatalf("the same Hello again: %+v, %v, want answered on a new connection", got, err)
		}
	})

	t.Run("caller gave up", func(t *testing.T) {
		t.Parallel()
		h := newStallHello(t)
		addr, _ := startServer(t, ServerConfig{}, h, nil)
		p := newPool(t, ClientConfig{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		err := inFlight(t, ctx, p, addr, h, cancel)
		if errors.Is(err, ErrLocalClose) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Hello whose caller gave up: %v, want ErrUnavailable without ErrLocalClose", err)
		}
	})

	t.Run("peer stopped under the call", func(t *testing.T) {
		t.Parallel()
		h := newStallHello(t)
		addr, s := startServer(t, ServerConfig{}, h, nil)
		p := newPool(t, ClientConfig{})
		ctx, cancel := context.WithTimeout(context.Background(), eventWait)
		defer cancel()
		err := inFlight(t, ctx, p, addr, h, s.Stop)
		if errors.Is(err, ErrLocalClose) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Hello to a peer that stopped: %v, want ErrUnavailable without ErrLocalClose", err)
		}
	})

	t.Run("nothing listens", func(t *testing.T) {
		t.Parallel()
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		lis.Close()
		p := newPool(t, ClientConfig{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, _, err = p.Hello(ctx, addr, me)
		if err == nil || errors.Is(err, ErrLocalClose) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Hello to a closed port: %v, want ErrUnavailable without ErrLocalClose", err)
		}
	})
}
