package middleware

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/node/policy"
)

// BenchmarkHTTPOverhead measures the middleware per request against the bare
// handler, on an owner-local node (a cluster of one: no forwarding), with a
// limit that never denies: bare, NodeLimiter keyed by client IP, and the policy
// file through HTTPDescriptors.
func BenchmarkHTTPOverhead(b *testing.B) {
	cfg := nodetest.TestConfig()
	cfg.Name = "bench"
	n, err := node.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	bare := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	lim, err := NodeLimiter(n, algo.Limit{Kind: algo.GCRA, Limit: 1e9, Period: time.Second, Burst: 1 << 30}, "bench", "ip:")
	if err != nil {
		b.Fatal(err)
	}
	byIP := mustHTTP(b, lim)(bare)
	p, err := policy.Parse("bench.yaml", []byte("domain: d\ndescriptors:\n  - key: remote_address\n    rate_limit: {period: 1s, requests_per_unit: 1000000000, algorithm: gcra, burst: 1073741824}\n"))
	if err != nil {
		b.Fatal(err)
	}
	pl, err := policy.NewLimiter(n, p, nil)
	if err != nil {
		b.Fatal(err)
	}
	byPolicy, err := HTTPDescriptors(pl, "d", func(r *http.Request) ([]policy.Descriptor, error) {
		return []policy.Descriptor{{Entries: []policy.Entry{{Key: "remote_address", Value: r.RemoteAddr}}}}, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	// The node's own cost for the same check, for the ratio.
	b.Run("allow-only", func(b *testing.B) {
		ctx := context.Background()
		l := algo.Limit{Kind: algo.GCRA, Limit: 1e9, Period: time.Second, Burst: 1 << 30}
		b.ReportAllocs()
		for b.Loop() {
			if d, err := n.AllowN(ctx, "ip:192.0.2.1", l, 1); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"node", byIP}, {"policy", byPolicy(bare)}} {
		b.Run(bc.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				bc.h.ServeHTTP(w, r)
				if w.code != http.StatusNoContent {
					b.Fatalf("status %d", w.code)
				}
			}
		})
	}
}

// discardWriter is a ResponseWriter that keeps only the status, so the
// benchmark measures the middleware, not a recorder.
type discardWriter struct {
	h    http.Header
	code int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(code int)        { d.code = code }
