package daemon

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// TestGRPCHealth asks the client gRPC port's grpc.health.v1 with grpc-go's
// health client, as a caller without credentials: NOT_SERVING while the node
// has not joined its seed (as /readyz answers 503), SERVING once the seed
// starts and the node joins it, NOT_SERVING when the daemon shuts down, after
// which the Watch stream ends so the graceful stop is not held.
func TestGRPCHealth(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	// The seed's gossip port, free until the seed starts on it below.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seedPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	b := startDaemon(t, testConfig(t, p, "b", "--join", "127.0.0.1:"+strconv.Itoa(seedPort)))

	conn, err := grpc.NewClient(b.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(p.anonTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, svc := range []string{"", pb.Limiter_ServiceDesc.ServiceName} {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("Check(%q) before ready: got %v, %v; want NOT_SERVING", svc, r.GetStatus(), err)
		}
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check(unknown service): got %v, want NotFound", err)
	}
	// Only health is open without credentials: the Limiter still refuses.
	if _, err := pb.NewLimiterClient(conn).Check(ctx, &pb.CheckRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Limiter.Check without credentials: got %v, want Unauthenticated", err)
	}
	code, _ := httpDo(t, "GET", "http://"+b.AdminAddr()+"/readyz", "")
	if code != 503 {
		t.Fatalf("/readyz before ready: got %d, want 503", code)
	}

	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recv := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		r, err := watch.Recv()
		if err != nil || r.GetStatus() != want {
			t.Fatalf("Watch: got %v, %v; want %v", r.GetStatus(), err, want)
		}
	}
	recv(healthpb.HealthCheckResponse_NOT_SERVING)

	startDaemon(t, testConfig(t, p, "a", "--gossip-port", strconv.Itoa(seedPort)))
	recv(healthpb.HealthCheckResponse_SERVING) // b's next rejoin finds a
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check once ready: got %v, %v; want SERVING", r.GetStatus(), err)
	}
	if code, _ := httpDo(t, "GET", "http://"+b.AdminAddr()+"/readyz", ""); code != 200 {
		t.Fatalf("/readyz once SERVING: got %d, want 200", code)
	}

	done := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		done <- b.Shutdown(sctx)
	}()
	recv(healthpb.HealthCheckResponse_NOT_SERVING)
	if _, err := watch.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("Watch after NOT_SERVING on shutdown: got %v, want Unavailable (stream ended)", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}
