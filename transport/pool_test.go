package transport

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

func TestForwardRoutesEachResultToItsCaller(t *testing.T) {
	t.Parallel()
	f := &fakePeer{}
	addr, _ := startServer(t, ServerConfig{}, f, nil)
	var rpcs atomic.Int64
	p := newPool(t, ClientConfig{OnBatch: func(string, int, time.Duration, error) { rpcs.Add(1) }})

	const callers, perCaller = 64, 50
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
				if r.Code != CodeOK || r.Owner != "owner:"+key || r.Decision.Remaining != hits || r.Route != RouteOwner {
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
	total := int64(callers * perCaller)
	if got := f.checks.Load(); got != total {
		t.Fatalf("handler saw %d checks, want %d", got, total)
	}
	if got := f.calls.Load(); got >= total {
		t.Fatalf("got %d Forward RPCs for %d checks, want fewer RPCs than checks", got, total)
	}
	// OnBatch runs after the callers are released: poll until it caught up.
	for deadline := time.Now().Add(5 * time.Second); rpcs.Load() != f.calls.Load(); {
		if time.Now().After(deadline) {
			t.Fatalf("OnBatch counted %d RPCs, want %d", rpcs.Load(), f.calls.Load())
		}
		runtime.Gosched()
	}
	t.Logf("%d checks in %d RPCs (%.1f per RPC)", total, f.calls.Load(), float64(total)/float64(f.calls.Load()))
}

func TestForwardSendsAtOnceWhenIdle(t *testing.T) {
	t.Parallel()
	f := &fakePeer{}
	addr, _ := startServer(t, ServerConfig{}, f, nil)
	// A BatchMaxWait of an hour would hang the test if an idle link waited.
	p := newPool(t, ClientConfig{BatchMaxWait: time.Hour, ForwardTimeout: 30 * time.Second})
	for i := range 3 {
		r, err := p.Forward(context.Background(), addr, validCheck("idle", int64(i)))
		if err != nil || r.Decision.Remaining != int64(i) {
			t.Fatalf("Forward %d: got %+v, %v, want remaining %d", i, r, err, i)
		}
	}
	if got := f.calls.Load(); got != 3 {
		t.Fatalf("got %d RPCs, want 3 (one per sequential check)", got)
	}
}

// gatedForward starts a Forward that the fake blocks in its handler, so the
// link to addr is busy until gate is closed; it returns that call's result.
func gatedForward(t *testing.T, p *Pool, addr string, f *fakePeer) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := p.Forward(context.Background(), addr, validCheck("first", 1))
		done <- err
	}()
	if got := recv(t, f.entered, eventWait, "the first batch"); got != 1 {
		t.Fatalf("first batch has %d checks, want 1", got)
	}
	return done
}

func TestForwardFlushesBySize(t *testing.T) {
	t.Parallel()
	f := &fakePeer{entered: make(chan int, 16), gate: make(chan struct{})}
	addr, _ := startServer(t, ServerConfig{}, f, nil)
	p := newPool(t, ClientConfig{BatchMaxItems: 5, BatchMaxWait: time.Hour, MaxInflightBatches: 4, ForwardTimeout: 30 * time.Second})
	first := gatedForward(t, p, addr, f)

	results := make(chan error, 10)
	for i := range 10 {
		go func() {
			key := fmt.Sprintf("size-%d", i)
			r, err := p.Forward(context.Background(), addr, validCheck(key, int64(i)))
			if err == nil && (r.Owner != "owner:"+key || r.Decision.Remaining != int64(i)) {
				err = fmt.Errorf("got %+v for %s", r, key)
			}
			results <- err
		}()
	}
	// The link is busy and the wait is an hour: only size can flush these.
	for range 2 {
		if got := recv(t, f.entered, eventWait, "a full batch"); got != 5 {
			t.Fatalf("got a batch of %d, want 5", got)
		}
	}
	close(f.gate)
	for range 10 {
		if err := recv(t, results, eventWait, "a result"); err != nil {
			t.Fatal(err)
		}
	}
	if err := recv(t, first, eventWait, "the first result"); err != nil {
		t.Fatal(err)
	}
}

func TestForwardFlushesByTime(t *testing.T) {
	t.Parallel()
	f := &fakePeer{entered: make(chan int, 16), gate: make(chan struct{})}
	addr, _ := startServer(t, ServerConfig{}, f, nil)
	const wait = 30 * time.Millisecond
	p := newPool(t, ClientConfig{BatchMaxItems: 100, BatchMaxWait: wait, ForwardTimeout: 30 * time.Second})
	first := gatedForward(t, p, addr, f)

	start := time.Now()
	results := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := p.Forward(context.Background(), addr, validCheck(fmt.Sprintf("time-%d", i), 1))
			results <- err
		}()
	}
	// The first RPC is still blocked and 3 < 100: only the timer can send these.
	sent := 0
	for sent < 3 {
		sent += recv(t, f.entered, eventWait, "a timed-out batch")
	}
	if took := time.Since(start); took < wait {
		t.Fatalf("batch sent after %v, want >= BatchMaxWait %v", took, wait)
	}
	close(f.gate)
	for range 3 {
		if err := recv(t, results, eventWait, "a result"); err != nil {
			t.Fatal(err)
		}
	}
	if err := recv(t, first, eventWait, "the first result"); err != nil {
		t.Fatal(err)
	}
}

func TestForwardNotOwnerIsAResult(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, ServerConfig{}, &fakePeer{}, nil)
	p := newPool(t, ClientConfig{})
	r, err := p.Forward(context.Background(), addr, validCheck("notowner-1", 1))
	if err != nil {
		t.Fatalf("got error %v, want a CodeNotOwner result", err)
	}
	if r.Code != CodeNotOwner || !strings.Contains(r.Message, "not mine") {
		t.Fatalf("got %+v, want CodeNotOwner with the handler's message", r)
	}
}

func TestForwardPerItemInvalidDoesNotFailTheBatch(t *testing.T) {
	t.Parallel()
	f := &fakePeer{entered: make(chan int, 16), gate: make(chan struct{})}
	addr, _ := startServer(t, ServerConfig{MaxKeyLen: 8}, f, nil)
	p := newPool(t, ClientConfig{BatchMaxItems: 3, BatchMaxWait: time.Hour, MaxKeyLen: 100, ForwardTimeout: 30 * time.Second})
	first := gatedForward(t, p, addr, f)

	type res struct {
		key string
		r   Result
		err error
	}
	out := make(chan res, 3)
	for _, key := range []string{"ok-1", "far-too-long-key", "ok-2"} {
		go func() {
			r, err := p.Forward(context.Background(), addr, validCheck(key, 1))
			out <- res{key, r, err}
		}()
	}
	if got := recv(t, f.entered, eventWait, "the batch"); got != 2 {
		t.Fatalf("handler got %d checks, want the 2 valid ones", got)
	}
	close(f.gate)
	for range 3 {
		v := recv(t, out, eventWait, "a result")
		if v.err != nil {
			t.Fatalf("%s: %v", v.key, v.err)
		}
		switch v.key {
		case "far-too-long-key":
			if v.r.Code != CodeInvalidArgument || !strings.Contains(v.r.Message, "field key value 16 bytes") {
				t.Fatalf("got %+v, want CodeInvalidArgument naming the key length", v.r)
			}
		default:
			if v.r.Code != CodeOK || v.r.Owner != "owner:"+v.key {
				t.Fatalf("%s: got %+v, want its own OK result", v.key, v.r)
			}
		}
	}
	if err := recv(t, first, eventWait, "the first result"); err != nil {
		t.Fatal(err)
	}
}

func TestForwardRejectsInvalidCheckLocally(t *testing.T) {
	t.Parallel()
	p := newPool(t, ClientConfig{})
	// No server at this address: validation must fail before any dial.
	_, err := p.Forward(context.Background(), "127.0.0.1:1", validCheck("", 1))
	if !errors.Is(err, ErrInvalidCheck) || !strings.Contains(err.Error(), "key") {
		t.Fatalf("got %v, want ErrInvalidCheck naming the key", err)
	}
}

func TestForwardToBlackHoleFailsWithinForwardTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	var batchErr atomic.Value
	p := newPool(t, ClientConfig{ForwardTimeout: timeout, OnBatch: func(_ string, _ int, _ time.Duration, err error) {
		if err != nil {
			batchErr.Store(err)
		}
	}})
	addr := blackHole(t)
	start := time.Now()
	_, err := p.Forward(context.Background(), addr, validCheck("k", 1))
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want an error wrapping ErrUnavailable", err)
	}
	if took < timeout || took > timeout+2*time.Second {
		t.Fatalf("returned after %v, want about ForwardTimeout %v", took, timeout)
	}
	// OnBatch runs after the callers are released: poll for it.
	for deadline := time.Now().Add(5 * time.Second); batchErr.Load() == nil; {
		if time.Now().After(deadline) {
			t.Fatal("OnBatch saw no error")
		}
		runtime.Gosched()
	}
}

func TestForwardHonoursCallerDeadline(t *testing.T) {
	t.Parallel()
	p := newPool(t, ClientConfig{ForwardTimeout: time.Minute})
	addr := blackHole(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.Forward(ctx, addr, validCheck("k", 1))
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrUnavailable and context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("returned after %v, want about the 50ms caller deadline", took)
	}
}

func TestForwardToStoppedServerIsUnavailable(t *testing.T) {
	t.Parallel()
	addr, s := startServer(t, ServerConfig{}, &fakePeer{}, nil)
	p := newPool(t, ClientConfig{ForwardTimeout: 2 * time.Second})
	if _, err := p.Forward(context.Background(), addr, validCheck("k", 1)); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	_, err := p.Forward(context.Background(), addr, validCheck("k", 1))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want an error wrapping ErrUnavailable", err)
	}
}

func TestDropFailsWaitingChecksAndRedials(t *testing.T) {
	t.Parallel()
	f := &fakePeer{entered: make(chan int, 16), gate: make(chan struct{})}
	addr, _ := startServer(t, ServerConfig{}, f, nil)
	p := newPool(t, ClientConfig{BatchMaxWait: time.Hour, ForwardTimeout: 30 * time.Second})
	first := gatedForward(t, p, addr, f)
	waiting := make(chan error, 1)
	go func() {
		_, err := p.Forward(context.Background(), addr, validCheck("waiting", 1))
		waiting <- err
	}()
	// The waiting check may or may not have joined the open batch yet; either
	// way Drop must fail it or let it redial, never hang.
	p.Drop(addr)
	if err := recv(t, first, eventWait, "the in-flight check"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("in-flight check: got %v, want ErrUnavailable", err)
	}
	close(f.gate)
	if err := recv(t, waiting, eventWait, "the waiting check"); err != nil && !errors.Is(err, ErrUnavailable) {
		t.Fatalf("waiting check: got %v, want nil or ErrUnavailable", err)
	}
	r, err := p.Forward(context.Background(), addr, validCheck("after", 2))
	if err != nil || r.Owner != "owner:after" {
		t.Fatalf("after Drop: got %+v, %v, want a fresh connection to answer", r, err)
	}
	p.Drop("127.0.0.1:9") // unknown: no-op
}

func TestCloseIsIdempotentAndFailsLaterCalls(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, ServerConfig{}, &fakePeer{}, nil)
	p := newPool(t, ClientConfig{})
	if _, err := p.Forward(context.Background(), addr, validCheck("k", 1)); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: got %v, want nil", err)
	}
	if _, err := p.Forward(context.Background(), addr, validCheck("k", 1)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Forward after Close: got %v, want ErrUnavailable", err)
	}
	if err := p.Transfer(context.Background(), addr, []KeyState{{Key: "k", Limit: validCheck("k", 0).Limit}}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Transfer after Close: got %v, want ErrUnavailable", err)
	}
}

func TestTransferChunks(t *testing.T) {
	t.Parallel()
	f := &fakePeer{}
	addr, _ := startServer(t, ServerConfig{}, f, nil)
	p := newPool(t, ClientConfig{MaxBatch: 4, TransferMaxBytes: 1000})
	lim := validCheck("", 0).Limit
	var states []KeyState
	for i := range 10 {
		states = append(states, KeyState{Key: fmt.Sprintf("key-%d", i), Limit: lim, State: []byte{byte(i)}})
	}
	big := KeyState{Key: "big", Limit: lim, State: make([]byte, 2000)} // above TransferMaxBytes: alone
	states = append(states, big, states[0])
	if err := p.Transfer(context.Background(), addr, states); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got, want := fmt.Sprint(f.xferSizes), "[4 4 2 1 1]"; got != want {
		t.Fatalf("chunk sizes: got %s, want %s", got, want)
	}
	for i, s := range f.states {
		if s.Key != states[i].Key || s.Limit != states[i].Limit || string(s.State) != string(states[i].State) {
			t.Fatalf("state %d: got %+v, want %+v", i, s, states[i])
		}
	}
}

// TestHandoffMarksTheLastChunk: a handoff in several chunks carries Done,
// After and Leaving on its last chunk only.
func TestHandoffMarksTheLastChunk(t *testing.T) {
	t.Parallel()
	f := &fakePeer{}
	addr, _ := startServer(t, ServerConfig{}, f, nil)
	p := newPool(t, ClientConfig{MaxBatch: 2})
	lim := validCheck("", 0).Limit
	var states []KeyState
	for i := range 5 {
		states = append(states, KeyState{Key: fmt.Sprint("h", i), Limit: lim})
	}
	if err := p.Handoff(context.Background(), addr, TransferBatch{From: "node-a", RingDigest: 42, States: states, Done: true, After: []string{"node-x"}, Leaving: true}); err != nil {
		t.Fatal(err)
	}
	// A handoff with nothing to hand over still sends its Done marker; one
	// without Done and without states sends nothing.
	if err := p.Handoff(context.Background(), addr, TransferBatch{From: "node-b", RingDigest: 7, Done: true}); err != nil {
		t.Fatal(err)
	}
	if err := p.Handoff(context.Background(), addr, TransferBatch{From: "node-c"}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	want := []TransferBatch{
		{From: "node-a", RingDigest: 42},
		{From: "node-a", RingDigest: 42},
		{From: "node-a", RingDigest: 42, Done: true, After: []string{"node-x"}, Leaving: true}, // only the last chunk says them
		{From: "node-b", RingDigest: 7, Done: true},
	}
	if got := fmt.Sprint(f.batches); got != fmt.Sprint(want) {
		t.Fatalf("got batches %s, want %s", got, fmt.Sprint(want))
	}
	if got := fmt.Sprint(f.xferSizes); got != "[2 2 1 0]" {
		t.Fatalf("got chunk sizes %s, want [2 2 1 0]", got)
	}
}

func TestTransferRejectsInvalidState(t *testing.T) {
	t.Parallel()
	f := &fakePeer{}
	addr, _ := startServer(t, ServerConfig{MaxKeyLen: 4}, f, nil)
	p := newPool(t, ClientConfig{})
	lim := validCheck("", 0).Limit
	err := p.Transfer(context.Background(), addr, []KeyState{{Key: "a", Limit: lim}, {Key: "", Limit: lim}})
	if !errors.Is(err, ErrInvalidCheck) || !strings.Contains(err.Error(), "states[1]") {
		t.Fatalf("local: got %v, want ErrInvalidCheck naming states[1]", err)
	}
	// Passes the client's checks, fails the server's shorter MaxKeyLen.
	err = p.Transfer(context.Background(), addr, []KeyState{{Key: "a", Limit: lim}, {Key: "too-long", Limit: lim}})
	if !errors.Is(err, ErrInvalidCheck) || !strings.Contains(err.Error(), "states[1]") || !strings.Contains(err.Error(), "key") {
		t.Fatalf("remote: got %v, want ErrInvalidCheck naming states[1] and the key", err)
	}
	err = p.Transfer(context.Background(), addr, []KeyState{{Key: "a", Limit: algo.Limit{Kind: algo.GCRA, Limit: 1}}})
	if !errors.Is(err, ErrInvalidCheck) || !errors.Is(err, algo.ErrInvalidLimit) || !containsFold(err.Error(), "field period") {
		t.Fatalf("bad limit: got %v, want ErrInvalidCheck and algo.ErrInvalidLimit naming the period", err)
	}
	if got := f.transfers.Load(); got != 0 {
		t.Fatalf("handler saw %d transfers, want 0", got)
	}
}

func TestNewPoolRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []ClientConfig{
		{BatchMaxItems: -1},
		{ForwardTimeout: -time.Second},
		{BatchMaxItems: 2000},
		{BatchMaxItems: 10, MaxBatch: 5},
	} {
		if _, err := NewPool(cfg); err == nil {
			t.Errorf("NewPool(%+v): got nil error, want one", cfg)
		}
	}
}
