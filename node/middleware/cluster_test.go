package middleware

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/node/policy"
)

// TestClusterHTTPExactLimit: one client's requests spread round-robin over
// three nodes' middleware are admitted exactly the policy's limit in total, then
// answered 429 with the RateLimit fields and Retry-After.
func TestClusterHTTPExactLimit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := nodetest.StartCluster(ctx, 3, nodetest.TestConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := policy.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 10, name: per_ip}
`))
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, n := range c.Nodes() {
		pl, err := policy.NewLimiter(n, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := PolicyLimiter(pl, "edge", func(ip string) []policy.Descriptor {
			return []policy.Descriptor{{Entries: []policy.Entry{{Key: "remote_address", Value: ip}}}}
		})
		if err != nil {
			t.Fatal(err)
		}
		mw := mustHTTP(t, l)
		srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })))
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	admitted := 0
	for i := 0; i < 30; i++ {
		resp, err := http.Get(urls[i%3] + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get(HeaderRateLimitPolicy); got != `"per_ip";q=10;w=3600` {
			t.Fatalf("request %d: RateLimit-Policy %q, want \"per_ip\";q=10;w=3600", i, got)
		}
		rl := resp.Header.Get(HeaderRateLimit)
		switch resp.StatusCode {
		case http.StatusOK:
			admitted++
			if want := `"per_ip";r=` + strconv.Itoa(10-admitted) + ";t="; !strings.HasPrefix(rl, want) {
				t.Fatalf("request %d: RateLimit %q, want prefix %s", i, rl, want)
			}
		case http.StatusTooManyRequests:
			if i < 10 {
				t.Fatalf("request %d denied before the limit was used", i)
			}
			ra, err := strconv.Atoi(resp.Header.Get(HeaderRetryAfter))
			if err != nil || ra < 1 || ra > 3600 || !strings.HasPrefix(rl, `"per_ip";r=0;t=`) {
				t.Fatalf("request %d: Retry-After %q, RateLimit %q; want 1..3600 s and r=0", i, resp.Header.Get(HeaderRetryAfter), rl)
			}
		default:
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d through three nodes, want exactly 10", admitted)
	}
}

// TestOversizedKeyNeverPasses: a key the node refuses (above its MaxKeyLen)
// is the request's fault, 400 / InvalidArgument, not a limiter outage to fail
// open on: a long header or path must not bypass the limit.
func TestOversizedKeyNeverPasses(t *testing.T) {
	t.Parallel()
	cfg := nodetest.TestConfig()
	cfg.Name = "solo"
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	lim, err := NodeLimiter(n, hourly(1), "per_key", "k:")
	if err != nil {
		t.Fatal(err)
	}
	var hit reached
	h := mustHTTP(t, lim, WithKeyFunc(KeyFromHeader("X-Api-Key")))(hit.handler())
	long := strings.Repeat("x", 4096)
	for i := 0; i < 3; i++ {
		if w := serve(h, "192.0.2.1:1", map[string]string{"X-Api-Key": long}); w.Code != http.StatusBadRequest {
			t.Fatalf("request %d with a 4 KiB key: got %d, want 400", i, w.Code)
		}
	}
	if hit.count() != 0 {
		t.Fatalf("handler reached %d times, want 0", hit.count())
	}
	p, err := policy.Parse("p.yaml", []byte("domain: d\ndescriptors:\n  - key: path\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := policy.NewLimiter(n, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := HTTPDescriptors(pl, "d", func(r *http.Request) ([]policy.Descriptor, error) {
		return []policy.Descriptor{{Entries: []policy.Entry{{Key: "path", Value: r.URL.Path}}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/"+long, nil)
	w := httptest.NewRecorder()
	mw(hit.handler()).ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest || hit.count() != 0 {
		t.Fatalf("4 KiB path: got %d, reached %d; want 400, not reached", w.Code, hit.count())
	}
	ic, err := UnaryServerInterceptor(lim, WithGRPCKeyFunc(func(context.Context, string) (string, error) { return long, nil }))
	if err != nil {
		t.Fatal(err)
	}
	called := false
	_, err = ic(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { called = true; return nil, nil })
	if status.Code(err) != codes.InvalidArgument || called {
		t.Fatalf("gRPC 4 KiB key: got %v, called %v; want InvalidArgument, not called", err, called)
	}
}
