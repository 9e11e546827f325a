package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/transport"
)

// BenchmarkClientPort measures one check through a single daemon's client
// ports, secure (TLS + client certificate or bearer token) against insecure
// (plaintext, no authentication), side by side in one run: the cost of the
// client-side trust boundary. Callers run in parallel (b.RunParallel) over one
// connection per goroutine group; every check is owner-local (one node), so
// the difference is TLS and authentication, not forwarding.
//
//	go test -run XXX -bench ClientPort -benchtime 3000x -count 3 -cpu 2 ./cmd/ringlimitd/internal/daemon/
func BenchmarkClientPort(b *testing.B) {
	p := newTestPKI(b)
	secure, err := Start(testConfig(b, p, "bench-secure"), nil)
	if err != nil {
		b.Fatal(err)
	}
	insecure, err := Start(testConfig(b, nil, "bench-insecure"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, d := range []*Daemon{secure, insecure} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			d.Shutdown(ctx)
			cancel()
		}
	})
	limit := algo.Limit{Kind: algo.GCRA, Limit: 1_000_000_000, Period: time.Second, Burst: 1_000_000}
	grpcCases := []struct {
		name  string
		d     *Daemon
		tls   *tls.Config
		token string
	}{
		{"grpc/insecure", insecure, nil, ""},
		{"grpc/secure-cert", secure, p.clientTLS, ""},
		{"grpc/secure-token", secure, p.anonTLS, testToken},
	}
	for _, c := range grpcCases {
		b.Run(c.name, func(b *testing.B) {
			cl, err := transport.Dial(c.d.GRPCAddr(), c.tls)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			ctx := context.Background()
			if c.token != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
			}
			var n atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := fmt.Sprintf("k%d", n.Add(1)%1000)
					if _, err := cl.Check(ctx, transport.Check{Key: key, Limit: limit, Hits: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	httpCases := []struct {
		name, url string
		client    *http.Client
	}{
		{"http/insecure", "http://" + insecure.HTTPAddr() + "/v1/check", &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}},
		{"http/secure-cert", "https://" + secure.HTTPAddr() + "/v1/check", &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, TLSClientConfig: p.clientTLS}}},
	}
	for _, c := range httpCases {
		b.Run(c.name, func(b *testing.B) {
			defer c.client.CloseIdleConnections()
			var n atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					body := fmt.Sprintf(`{"key":"k%d","algorithm":"gcra","limit":1000000000,"period":"1s","burst":1000000}`, n.Add(1)%1000)
					resp, err := c.client.Post(c.url, "application/json", strings.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body) // so the connection is reused
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
