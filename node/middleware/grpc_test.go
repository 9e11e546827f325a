package middleware

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/algo"
)

func hourly(n int64) algo.Limit {
	return algo.Limit{Kind: algo.FixedWindow, Limit: n, Period: time.Hour}
}

func peerCtx(ip string) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 4000}})
}

const method = "/shop.v1.Cart/Add"

func TestUnaryInterceptorDeniesWithDetails(t *testing.T) {
	t.Parallel()
	f := &fakeLimiter{capacity: 1}
	ic, err := UnaryServerInterceptor(f)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	h := func(context.Context, any) (any, error) { calls++; return "ok", nil }
	info := &grpc.UnaryServerInfo{FullMethod: method}
	if _, err := ic(peerCtx("192.0.2.5"), nil, info, h); err != nil || calls != 1 {
		t.Fatalf("first call: got %v, %d calls; want ok", err, calls)
	}
	_, err = ic(peerCtx("192.0.2.5"), nil, info, h)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || calls != 1 {
		t.Fatalf("second call: got %v, %d handler calls; want ResourceExhausted, handler not reached", err, calls)
	}
	if !strings.Contains(st.Message(), method) {
		t.Fatalf("message %q does not name the method", st.Message())
	}
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.QuotaFailure:
			quota = d
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() != 1500*time.Millisecond {
		t.Fatalf("RetryInfo: got %v, want 1.5s", retry)
	}
	if quota == nil || len(quota.GetViolations()) != 1 || quota.GetViolations()[0].GetSubject() != "192.0.2.5" {
		t.Fatalf("QuotaFailure: got %v, want one violation for 192.0.2.5", quota)
	}
	if f.lastKey() != "192.0.2.5" {
		t.Fatalf("key: got %q, want the peer IP", f.lastKey())
	}
}

func TestInterceptorLimiterError(t *testing.T) {
	t.Parallel()
	f := &fakeLimiter{err: errors.New("owner down")}
	info := &grpc.UnaryServerInfo{FullMethod: method}
	calls := 0
	h := func(context.Context, any) (any, error) { calls++; return nil, nil }
	open, _ := UnaryServerInterceptor(f)
	if _, err := open(peerCtx("192.0.2.5"), nil, info, h); err != nil || calls != 1 {
		t.Fatalf("fail open: got %v, %d calls", err, calls)
	}
	closed, _ := UnaryServerInterceptor(f, WithGRPCFailClosed())
	_, err := closed(peerCtx("192.0.2.5"), nil, info, h)
	if status.Code(err) != codes.Unavailable || calls != 1 {
		t.Fatalf("fail closed: got %v, %d calls; want Unavailable, handler not reached", err, calls)
	}
}

func TestInterceptorKeys(t *testing.T) {
	t.Parallel()
	info := &grpc.UnaryServerInfo{FullMethod: method}
	h := func(context.Context, any) (any, error) { return nil, nil }
	f := &fakeLimiter{capacity: 10}
	byMethod, _ := UnaryServerInterceptor(f, WithGRPCKeyFunc(GRPCKeyFromMethod()))
	byMethod(peerCtx("192.0.2.5"), nil, info, h)
	if f.lastKey() != method {
		t.Fatalf("method key: got %q", f.lastKey())
	}
	byMD, _ := UnaryServerInterceptor(f, WithGRPCKeyFunc(GRPCKeyFromMetadata("X-Tenant")))
	ctx := metadata.NewIncomingContext(peerCtx("192.0.2.5"), metadata.Pairs("x-tenant", "acme"))
	byMD(ctx, nil, info, h)
	if f.lastKey() != "acme" {
		t.Fatalf("metadata key: got %q", f.lastKey())
	}
	called := false
	_, err := byMD(peerCtx("192.0.2.5"), nil, info, func(context.Context, any) (any, error) { called = true; return nil, nil })
	if status.Code(err) != codes.InvalidArgument || called {
		t.Fatalf("missing metadata: got %v, called %v; want InvalidArgument, not called", err, called)
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context { return s.ctx }

func TestStreamInterceptor(t *testing.T) {
	t.Parallel()
	ic, err := StreamServerInterceptor(&fakeLimiter{capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	h := func(any, grpc.ServerStream) error { calls++; return nil }
	info := &grpc.StreamServerInfo{FullMethod: "/shop.v1.Cart/Watch"}
	ss := fakeStream{ctx: peerCtx("192.0.2.9")}
	if err := ic(nil, ss, info, h); err != nil {
		t.Fatal(err)
	}
	if err := ic(nil, ss, info, h); status.Code(err) != codes.ResourceExhausted || calls != 1 {
		t.Fatalf("second stream: got %v, %d calls; want ResourceExhausted, handler not reached", err, calls)
	}
}
