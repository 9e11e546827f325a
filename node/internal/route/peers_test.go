package route

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/internal/breaker"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// forwarder answers every forward with res and err, and counts them.
type forwarder struct {
	res   transport.Result
	err   error
	calls int
}

func (f *forwarder) Forward(context.Context, string, transport.Check) (transport.Result, error) {
	f.calls++
	return f.res, f.err
}

func TestToBackupBreaker(t *testing.T) {
	t.Parallel()
	b := ring.Member{Name: "b", Addr: "10.0.0.2:7947"}
	f := &forwarder{err: errors.New("connection refused")}
	p := Peers{Pool: f, Breakers: breaker.NewSet(time.Hour)}
	if _, ok, err := p.ToBackup(context.Background(), b, transport.Check{}); ok || err != nil {
		t.Fatalf("unreachable backup: ok %v, err %v, want false, nil", ok, err)
	}
	f.err = nil
	f.res = transport.Result{Code: transport.CodeOK}
	if _, ok, _ := p.ToBackup(context.Background(), b, transport.Check{}); ok || f.calls != 1 {
		t.Fatalf("backup whose breaker is open: ok %v after %d forwards, want false after 1 (skipped)", ok, f.calls)
	}
	p.Breakers.Reset("b")
	if res, ok, err := p.ToBackup(context.Background(), b, transport.Check{}); !ok || err != nil || res.Code != transport.CodeOK {
		t.Fatalf("backup answering: %v, %v, %v, want CodeOK, true, nil", res.Code, ok, err)
	}
}

func TestAskOwner(t *testing.T) {
	t.Parallel()
	o := ring.Member{Name: "o", Addr: "10.0.0.1:7947"}
	f := &forwarder{res: transport.Result{Code: transport.CodeUnavailable}}
	p := Peers{Pool: f, Breakers: breaker.NewSet(time.Hour)}
	if _, done := p.AskOwner(context.Background(), o, transport.Check{Key: "k"}, time.Second); done {
		t.Fatalf("owner answering unavailable: done, want the replica to decide")
	}
	f.res = transport.Result{Code: transport.CodeNotOwner}
	if res, done := p.AskOwner(context.Background(), o, transport.Check{Key: "k"}, time.Second); !done || res.Code != transport.CodeNotOwner {
		t.Fatalf("owner answering not owner: %v, %v, want CodeNotOwner, done", res.Code, done)
	}
	f.err = errors.New("timeout")
	if _, done := p.AskOwner(context.Background(), o, transport.Check{Key: "k"}, time.Second); done {
		t.Fatalf("unreachable owner: done, want the replica to decide")
	}
	calls := f.calls
	if _, done := p.AskOwner(context.Background(), o, transport.Check{Key: "k"}, time.Second); done || f.calls != calls {
		t.Fatalf("owner whose breaker is open: asked again (%d forwards, want %d)", f.calls, calls)
	}
}

func TestFail(t *testing.T) {
	t.Parallel()
	l := algo.Limit{Kind: algo.FixedWindow, Limit: 10, Period: time.Second}
	open, err := Fail(l, 0, true, time.Second)
	if err != nil || !open.Allowed || open.Remaining != 10 {
		t.Fatalf("fail open: %+v, %v, want allowed with Remaining 10", open, err)
	}
	closed, err := Fail(l, 0, false, 3*time.Second)
	if err != nil || closed.Allowed || closed.Remaining != 0 || closed.RetryAfter != 3*time.Second {
		t.Fatalf("fail closed: %+v, %v, want denied, Remaining 0, RetryAfter 3s", closed, err)
	}
	if _, err := Fail(algo.Limit{}, 0, true, time.Second); err == nil {
		t.Fatalf("invalid limit: no error")
	}
}
