package daemon

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

const rlsPolicy = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// TestRedisPortSecure: in secure mode --redis-port serves TLS and wants AUTH
// with a client token; redis-cli --tls and go-redis over TLS both work, and
// plaintext or token-less clients are refused.
func TestRedisPortSecure(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	d := startDaemon(t, testConfig(t, p, "resp-node", "--redis-port", "0"))
	addr := d.RedisAddr()
	if addr == "" {
		t.Fatal("RedisAddr: empty with --redis-port 0")
	}
	ctx := context.Background()

	// Plaintext: the TLS listener does not answer RESP.
	plain := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Errorf("plaintext PING: got nil error, want a failure on a TLS port")
	}
	// TLS without AUTH: NOAUTH.
	anon := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: p.anonTLS, DisableIdentity: true})
	defer anon.Close()
	if err := anon.Do(ctx, "CL.THROTTLE", "k", "0", "1", "2").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Errorf("TLS without AUTH: got %v, want NOAUTH", err)
	}
	// TLS with a wrong token: WRONGPASS.
	wrong := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: p.anonTLS, Password: "not-a-token"})
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("wrong token: got %v, want WRONGPASS", err)
	}
	// TLS with a client token: redis-cell's reply.
	good := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: p.anonTLS, Password: testToken})
	defer good.Close()
	for _, want := range [][]int64{{0, 1, 0, -1, 2}, {1, 1, 0, 2, 2}} {
		got, err := good.Do(ctx, "CL.THROTTLE", "user123", "0", "1", "2", "1").Int64Slice()
		if err != nil || len(got) != 5 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] || got[4] != want[4] {
			t.Fatalf("CL.THROTTLE user123 0 1 2 1: got %v, %v, want %v", got, err, want)
		}
	}
	// redis-cli --tls, as an operator would.
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found (.ci/run installs Debian's redis-tools): %v", err)
	}
	host, port := splitHostPort(t, addr)
	out, err := exec.Command(cli, "-h", host, "-p", port, "--tls", "--cacert", filepath.Join(p.dir, "resp-node", "ca.crt"),
		"-a", testToken, "--no-auth-warning", "CL.THROTTLE", "cli:key", "15", "30", "60").CombinedOutput()
	if err != nil || strings.Join(strings.Fields(string(out)), " ") != "0 16 15 -1 2" {
		t.Errorf("redis-cli --tls: got %q, %v, want 0 16 15 -1 2", out, err)
	}
}

// TestRLSOnClientPort: Envoy's RateLimitService on the secure client gRPC port,
// answered from --policy-file; a caller without credentials is refused.
func TestRLSOnClientPort(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeAtomic(t, path, rlsPolicy)
	d := startDaemon(t, testConfig(t, p, "rls-node", "--policy-file", path))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.7"}}}}}

	anonConn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(p.anonTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer anonConn.Close()
	if _, err := ratelimitv3.NewRateLimitServiceClient(anonConn).ShouldRateLimit(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no credentials: got %v, want Unauthenticated", err)
	}

	conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(p.clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := ratelimitv3.NewRateLimitServiceClient(conn)
	for i, want := range []ratelimitv3.RateLimitResponse_Code{ratelimitv3.RateLimitResponse_OK, ratelimitv3.RateLimitResponse_OK, ratelimitv3.RateLimitResponse_OVER_LIMIT} {
		r, err := c.ShouldRateLimit(ctx, req)
		if err != nil || r.OverallCode != want || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
			t.Fatalf("call %d: got %v, %v, want %v", i, r, err, want)
		}
	}
	// An unknown domain is OK with no limit.
	r, err := c.ShouldRateLimit(ctx, &ratelimitv3.RateLimitRequest{Domain: "other", Descriptors: req.Descriptors})
	if err != nil || r.OverallCode != ratelimitv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil {
		t.Errorf("unknown domain: got %v, %v, want OK with no limit", r, err)
	}
}

func splitHostPort(t *testing.T, addr string) (string, string) {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		t.Fatalf("address %q has no port", addr)
	}
	return addr[:i], addr[i+1:]
}
