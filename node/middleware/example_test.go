package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/middleware"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/node/policy"
)

func startNode() *node.Node {
	cfg := nodetest.TestConfig()
	cfg.Name = "example"
	n, err := node.New(cfg)
	if err != nil {
		panic(err)
	}
	return n
}

// Two requests a minute per client IP, behind a proxy at 10.0.0.0/8.
func ExampleHTTP() {
	n := startNode()
	defer n.Close()
	lim, err := middleware.NodeLimiter(n, algo.Limit{Kind: algo.GCRA, Limit: 2, Period: time.Minute, Burst: 1}, "per_ip", "ip:")
	if err != nil {
		panic(err)
	}
	mw, err := middleware.HTTP(lim, middleware.WithKeyFunc(middleware.KeyFromClientIP(netip.MustParsePrefix("10.0.0.0/8"))))
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello") }))
	for i := 0; i < 3; i++ {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.2:4711"
		r.Header.Set("X-Forwarded-For", "203.0.113.9")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %s retry-after=%q\n", w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "per_ip";q=2;w=60 retry-after=""
	// 200 "per_ip";q=2;w=60 retry-after=""
	// 429 "per_ip";q=2;w=60 retry-after="30"
}

// The policy file decides: descriptors built from the request.
func ExampleHTTPDescriptors() {
	n := startNode()
	defer n.Close()
	p, err := policy.Parse("api.yaml", []byte(`
domain: api
descriptors:
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 1, name: login}
`))
	if err != nil {
		panic(err)
	}
	pl, err := policy.NewLimiter(n, p, nil)
	if err != nil {
		panic(err)
	}
	mw, err := middleware.HTTPDescriptors(pl, "api", func(r *http.Request) ([]policy.Descriptor, error) {
		return []policy.Descriptor{{Entries: []policy.Entry{{Key: "path", Value: r.URL.Path}}}}, nil
	})
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, path := range []string{"/login", "/login", "/home"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, nil))
		fmt.Printf("%s %d policy=%s\n", path, w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// /login 200 policy="login";q=1;w=60
	// /login 429 policy="login";q=1;w=60
	// /home 200 policy=
}

// One call per hour per method; the interceptor answers ResourceExhausted.
func ExampleUnaryServerInterceptor() {
	n := startNode()
	defer n.Close()
	lim, err := middleware.NodeLimiter(n, algo.Limit{Kind: algo.FixedWindow, Limit: 1, Period: time.Hour}, "per_method", "grpc:")
	if err != nil {
		panic(err)
	}
	ic, err := middleware.UnaryServerInterceptor(lim, middleware.WithGRPCKeyFunc(middleware.GRPCKeyFromMethod()))
	if err != nil {
		panic(err)
	}
	// Pass ic to grpc.NewServer(grpc.ChainUnaryInterceptor(ic)); here it is called directly.
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.v1.Cart/Add"}
	handler := func(context.Context, any) (any, error) { return "added", nil }
	for i := 0; i < 2; i++ {
		resp, err := ic(context.Background(), nil, info, handler)
		fmt.Println(resp, status.Code(err))
	}
	// Output:
	// added OK
	// <nil> ResourceExhausted
}
