package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// validCheck returns a check every algorithm accepts.
func validCheck(key string, hits int64) Check {
	return Check{
		Key:   key,
		Limit: algo.Limit{Kind: algo.GCRA, Limit: 30, Period: time.Minute, Burst: 15},
		Hits:  hits,
	}
}

// fakePeer is a PeerHandler that answers every check with a Decision derived
// from the check (Remaining = Hits, Owner = "owner:"+Key), CodeNotOwner for
// keys starting with "notowner", and records every call.
type fakePeer struct {
	calls     atomic.Int64
	checks    atomic.Int64
	transfers atomic.Int64

	mu        sync.Mutex
	sizes     []int
	states    []KeyState
	xferSizes []int
	batches   []TransferBatch // without their States

	// entered, if not nil, receives the size of every Forward batch on entry.
	entered chan int
	// gate, if not nil, blocks every Forward until it is closed.
	gate chan struct{}
}

func (f *fakePeer) Forward(ctx context.Context, checks []Check, out []Result) {
	f.calls.Add(1)
	f.checks.Add(int64(len(checks)))
	f.mu.Lock()
	f.sizes = append(f.sizes, len(checks))
	f.mu.Unlock()
	if f.entered != nil {
		f.entered <- len(checks)
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
		}
	}
	for i, c := range checks {
		out[i] = answer(c)
	}
}

func answer(c Check) Result {
	if strings.HasPrefix(c.Key, "notowner") {
		return Result{Code: CodeNotOwner, Message: "key " + c.Key + " is not mine"}
	}
	return Result{
		Decision: algo.Decision{Allowed: true, Limit: c.Limit.Limit, Remaining: c.Hits, ResetAfter: c.Limit.Period},
		Route:    RouteOwner,
		Owner:    "owner:" + c.Key,
	}
}

func (f *fakePeer) Transfer(ctx context.Context, b TransferBatch) error {
	f.transfers.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.xferSizes = append(f.xferSizes, len(b.States))
	for _, s := range b.States {
		s.State = slices.Clone(s.State) // the server reuses them
		f.states = append(f.states, s)
	}
	b.States = nil
	f.batches = append(f.batches, b)
	return nil
}

// fakeLimiter is a LimiterHandler answering like fakePeer, with handler errors
// for some keys.
type fakeLimiter struct{ calls atomic.Int64 }

func (l *fakeLimiter) Check(ctx context.Context, c Check) (Result, error) {
	l.calls.Add(1)
	switch c.Key {
	case "stopped":
		return Result{}, fmt.Errorf("%w: node stopped", ErrUnavailable)
	case "handler-invalid":
		return Result{}, fmt.Errorf("node: %w", &algo.InputError{Field: "burst", Value: "99", Allowed: "too large for this node", Err: algo.ErrInvalidLimit})
	case "handler-bug":
		return Result{}, errors.New("something broke")
	}
	r := answer(c)
	r.Route = RouteForwarded
	return r, nil
}

// startServer serves NewServer(cfg, peer, lim) on a 127.0.0.1 port-0 listener
// until the test ends and returns its address.
func startServer(t testing.TB, cfg ServerConfig, peer PeerHandler, lim LimiterHandler) (string, *Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(cfg, peer, lim)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String(), s
}

// newPool returns a Pool closed when the test ends.
func newPool(t testing.TB, cfg ClientConfig) *Pool {
	t.Helper()
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// blackHole accepts TCP connections and never writes a byte. It returns its
// address; connections are closed when the test ends.
func blackHole(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String()
}

// eventWait bounds the wait for an event that a working transport delivers
// at once (a batch, a result): generous, so that a machine stalled for
// seconds (a loaded CI run) does not fail a test that asserts no latency.
const eventWait = 30 * time.Second

// recv receives from ch or fails the test after d.
func recv[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		panic("unreachable")
	}
}
