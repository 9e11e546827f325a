package transport

import (
	"context"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// echoPeer is the cheapest PeerHandler: it allows everything.
type echoPeer struct{}

func (echoPeer) Forward(_ context.Context, checks []Check) []Result {
	out := make([]Result, len(checks))
	for i, c := range checks {
		out[i].Decision.Allowed = true
		out[i].Decision.Limit = c.Limit.Limit
		out[i].Route = RouteOwner
	}
	return out
}

func (echoPeer) Transfer(context.Context, TransferBatch) error { return nil }

// benchKeys are the keys the benchmarks cycle through.
var benchKeys = func() []string {
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = "bench:user:" + strconv.Itoa(i)
	}
	return keys
}()

// BenchmarkForward runs 64 callers (on 2 cores) through one Pool to one local
// server with a trivial handler; allocs/op count both ends of one forwarded
// check. batching=off sends every check in its own batch; mode=unary sends
// every batch as its own Forward RPC instead of on the ForwardStream.
func BenchmarkForward(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  ClientConfig
	}{
		{"mode=stream/batching=on", ClientConfig{}},
		{"mode=unary/batching=on", ClientConfig{UnaryForward: true}},
		{"mode=stream/batching=off", ClientConfig{BatchMaxItems: 1}},
		{"mode=unary/batching=off", ClientConfig{BatchMaxItems: 1, UnaryForward: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			addr, _ := startServer(b, ServerConfig{}, echoPeer{}, nil)
			var rpcs atomic.Int64
			cfg := tc.cfg
			cfg.OnBatch = func(string, int, time.Duration, error) { rpcs.Add(1) }
			p := newPool(b, cfg)
			if _, err := p.Forward(context.Background(), addr, validCheck("warm", 1)); err != nil {
				b.Fatal(err)
			}
			rpcs.Store(0)
			var seq atomic.Int64
			b.SetParallelism(32)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1)) * 101
				for pb.Next() {
					i++
					if _, err := p.Forward(context.Background(), addr, validCheck(benchKeys[i%len(benchKeys)], 1)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			reportCPU(b, cpu0)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
			if n := rpcs.Load(); n > 0 {
				b.ReportMetric(float64(b.N)/float64(n), "checks/batch")
			}
		})
	}
}

// BenchmarkCluster3 is the transport's share of a 3-node in-process cluster: 64
// callers spread over 3 nodes, each check owned by node (i mod 3), so 2/3 are
// forwarded through that node's Pool and 1/3 decided locally by the handler.
// mode=unary sends every batch as its own Forward RPC (the transport before
// ForwardStream), mode=stream on the peer's ForwardStream.
func BenchmarkCluster3(b *testing.B) {
	b.Run("mode=stream", func(b *testing.B) { benchCluster3(b, false) })
	b.Run("mode=unary", func(b *testing.B) { benchCluster3(b, true) })
}

func benchCluster3(b *testing.B, unary bool) {
	const nodes = 3
	var addrs [nodes]string
	var pools [nodes]*Pool
	var rpcs atomic.Int64
	for n := range nodes {
		addrs[n], _ = startServer(b, ServerConfig{}, echoPeer{}, nil)
		pools[n] = newPool(b, ClientConfig{UnaryForward: unary, OnBatch: func(string, int, time.Duration, error) { rpcs.Add(1) }})
	}
	var seq, forwarded atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	b.RunParallel(func(pb *testing.PB) {
		g := int(seq.Add(1))
		self := g % nodes
		i := g * 101
		var fwd int64
		one := make([]Check, 1)
		for pb.Next() {
			i++
			c := validCheck(benchKeys[i%len(benchKeys)], 1)
			owner := i % nodes
			if owner == self {
				one[0] = c
				_ = echoPeer{}.Forward(context.Background(), one)
				continue
			}
			fwd++
			if _, err := pools[self].Forward(context.Background(), addrs[owner], c); err != nil {
				b.Error(err)
				return
			}
		}
		forwarded.Add(fwd)
	})
	b.StopTimer()
	reportCPU(b, cpu0)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
	b.ReportMetric(float64(forwarded.Load())/float64(b.N), "forwarded/op")
	if n := rpcs.Load(); n > 0 {
		b.ReportMetric(float64(forwarded.Load())/float64(n), "checks/batch")
	}
}

// cpuTime returns the CPU time (user + system) the process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process CPU time per op since start: on a shared,
// noisy machine it says more than wall time, and 2 cores / cpu-ns/op bounds
// the checks/s the package can sustain.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}
