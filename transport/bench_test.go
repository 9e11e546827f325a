package transport

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// echoPeer is the cheapest PeerHandler: it allows everything.
type echoPeer struct{}

func (echoPeer) Forward(_ context.Context, checks []Check, out []Result) {
	for i, c := range checks {
		out[i].Decision.Allowed = true
		out[i].Decision.Limit = c.Limit.Limit
		out[i].Route = RouteOwner
	}
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

// BenchmarkForwardAlone forwards checks that each travel alone: pairs
// callers, each forwarding one check at a time to a server of its own (pairs
// servers, one Pool), so that every check is a batch of its own on its
// connection, a request written with one system call and an answer with
// another, as every forward is between two members of a large fleet, where a
// member pair has far less than one check in flight. cpu-ns/op is the CPU of
// both ends for one forwarded check (two messages) with a trivial handler:
// the floor, on this machine, of what a check forwarded alone costs. With
// pairs=1 the process is idle while each message travels and its idle
// scheduler's spinning is counted too; pairs=16 keeps it busy, as the members
// of a fleet under load are. tls=on is mutual TLS 1.3 as between members
// (LoadMutualTLS). writes/op and reads/op are the process's write and read
// system calls per check (Linux).
//
//	go test -run '^$' -bench 'ForwardAlone' -benchtime 20000x -cpu 2 ./transport/
func BenchmarkForwardAlone(b *testing.B) {
	for _, tc := range []struct {
		secure bool
		pairs  int
	}{{false, 1}, {true, 1}, {false, 16}, {true, 16}} {
		b.Run(fmt.Sprintf("tls=%s/pairs=%d", map[bool]string{false: "off", true: "on"}[tc.secure], tc.pairs), func(b *testing.B) {
			var scfg ServerConfig
			var ccfg ClientConfig
			if tc.secure {
				dir := b.TempDir()
				ca := newTestCA(b, "ringlimit bench CA")
				caFile := dir + "/ca.crt"
				write(b, caFile, ca.pem)
				certA, keyA := ca.issue(b, dir, "node-a")
				serverTLS, _, err := LoadMutualTLS(certA, keyA, caFile)
				if err != nil {
					b.Fatal(err)
				}
				certB, keyB := ca.issue(b, dir, "node-b")
				_, clientTLS, err := LoadMutualTLS(certB, keyB, caFile)
				if err != nil {
					b.Fatal(err)
				}
				scfg.TLS, ccfg.TLS = serverTLS, clientTLS
			}
			p := newPool(b, ccfg)
			addrs := make([]string, tc.pairs)
			for i := range addrs {
				addrs[i], _ = startServer(b, scfg, echoPeer{}, nil)
				if _, err := p.Forward(context.Background(), addrs[i], validCheck("warm", 1)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			measureCPU(b, len(addrs), func(w int, i int64) error {
				_, err := p.Forward(context.Background(), addrs[w], validCheck(benchKeys[i%int64(len(benchKeys))], 1))
				return err
			})
		})
	}
}

// BenchmarkSocketRoundTrip is the floor of any transport between members
// that are separate processes: pairs goroutines, each writing a 64-byte
// request on a loopback TCP connection of its own and reading the 64-byte
// answer that a server goroutine at the other end writes back, one in flight
// per connection, as a check forwarded alone travels between two members of
// a large fleet. No gRPC, no TLS, no framing, no decision: cpu-ns/op is the
// CPU of both ends (the process's user + system time) for one request and
// its answer, and writes/op and reads/op its system calls (Linux). Compare it
// with a whole check at 3 members (cluster_test BenchmarkFleetCheck) in the
// same session:
//
//	go test -run '^$' -bench 'SocketRoundTrip' -benchtime 200000x -cpu 2 ./transport/
func BenchmarkSocketRoundTrip(b *testing.B) {
	for _, pairs := range []int{1, 16} {
		b.Run(fmt.Sprintf("pairs=%d", pairs), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			var servers sync.WaitGroup
			defer servers.Wait()
			conns := make([]net.Conn, pairs)
			for i := range conns {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				s, err := ln.Accept()
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				conns[i] = c
				servers.Go(func() {
					defer s.Close()
					buf := make([]byte, 64)
					for {
						if _, err := io.ReadFull(s, buf); err != nil {
							return // the client closed
						}
						if _, err := s.Write(buf); err != nil {
							return
						}
					}
				})
			}
			bufs := make([][]byte, pairs)
			for i := range bufs {
				bufs[i] = make([]byte, 64)
			}
			b.ResetTimer()
			measureCPU(b, pairs, func(w int, _ int64) error {
				if _, err := conns[w].Write(bufs[w]); err != nil {
					return err
				}
				_, err := io.ReadFull(conns[w], bufs[w])
				return err
			})
			for _, c := range conns {
				c.Close()
			}
		})
	}
}

// measureCPU runs b.N operations on workers goroutines, op(w, i) being
// worker w's operation number i (1 to b.N, each made once), stops the timer,
// and reports cpu-ns/op (the process's CPU time) and, where /proc/self/io can
// be read, writes/op and reads/op (its write and read system calls). The
// first error ends that worker and fails the benchmark.
func measureCPU(b *testing.B, workers int, op func(w int, i int64) error) {
	w0, r0, ioOK := syscallCounts()
	cpu0 := cpuTime(b)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := op(w, i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	reportCPU(b, cpu0)
	if w1, r1, ok := syscallCounts(); ok && ioOK {
		b.ReportMetric(float64(w1-w0)/float64(b.N), "writes/op")
		b.ReportMetric(float64(r1-r0)/float64(b.N), "reads/op")
	}
}

// syscallCounts returns the process's write and read system calls so far
// (syscw and syscr of /proc/self/io); ok is false where that file cannot be
// read (not Linux).
func syscallCounts() (writes, reads int64, ok bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0, false
	}
	got := 0
	for _, line := range strings.Split(string(data), "\n") {
		name, v, found := strings.Cut(line, ": ")
		if !found {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "syscw":
			writes, got = n, got+1
		case "syscr":
			reads, got = n, got+1
		}
	}
	return writes, reads, got == 2
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
		one, oneOut := make([]Check, 1), make([]Result, 1)
		for pb.Next() {
			i++
			c := validCheck(benchKeys[i%len(benchKeys)], 1)
			owner := i % nodes
			if owner == self {
				one[0] = c
				echoPeer{}.Forward(context.Background(), one, oneOut)
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

// replicaPeer is echoPeer that also takes replication batches: it keeps
// nothing and asks for no whole state.
type replicaPeer struct{ echoPeer }

func (replicaPeer) Replicate(context.Context, TransferBatch) ([]uint64, error) { return nil, nil }

// benchStates returns n GCRA states of about 10 bytes each, as node sends
// them: by key hash without the key (replication), or with a key of about 20
// bytes too (withKeys, a handoff of a caller that keeps keys).
func benchStates(b testing.TB, n int, withKeys bool) []KeyState {
	l := algo.Limit{Kind: algo.GCRA, Burst: 15, Limit: 30, Period: time.Minute}
	const now = 1_700_000_000_000_000_000
	out := make([]KeyState, n)
	for i := range out {
		var st algo.State
		if _, err := st.Take(now+int64(i), 1, l); err != nil {
			b.Fatal(err)
		}
		bin, err := st.MarshalBinary()
		if err != nil {
			b.Fatal(err)
		}
		out[i] = KeyState{KeyHash: 0x9e3779b97f4a7c15 * uint64(i+1), Limit: l, State: bin, LastNow: now + int64(i)}
		if withKeys {
			out[i].Key = benchKeys[i%len(benchKeys)]
		}
	}
	return out
}

// BenchmarkTransferReplica sends one batch of n states per op through a Pool
// to a loopback server whose handler keeps nothing: mode=replica as node's
// replication sends them (Pool.Replicate, key hashes only), mode=handoff as
// a handoff with keys (Pool.Handoff), mode=marker the handoff-complete
// marker alone (no states, Done and two names in After), which a member
// sends to every other member on each ring change. Allocations and CPU
// count both ends; the per-state metrics divide them by n.
func BenchmarkTransferReplica(b *testing.B) {
	for _, tc := range []struct {
		mode string
		n    int
	}{
		{"replica", 100},
		{"replica", 1000},
		{"handoff", 1000},
		{"marker", 0},
	} {
		b.Run(fmt.Sprintf("mode=%s/states=%d", tc.mode, tc.n), func(b *testing.B) {
			addr, _ := startServer(b, ServerConfig{}, replicaPeer{}, nil)
			p := newPool(b, ClientConfig{})
			batch := TransferBatch{From: "node-a", States: benchStates(b, tc.n, tc.mode == "handoff")}
			if tc.mode == "marker" {
				batch.Done, batch.RingDigest, batch.After = true, 0x9e3779b97f4a7c15, []string{"node-b", "node-c"}
			}
			send := func() error {
				if tc.mode != "replica" {
					return p.Handoff(context.Background(), addr, batch)
				}
				_, err := p.Replicate(context.Background(), addr, batch)
				return err
			}
			if err := send(); err != nil {
				b.Fatal(err)
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			for range b.N {
				if err := send(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportCPU(b, cpu0)
			runtime.ReadMemStats(&m1)
			if tc.n == 0 {
				return
			}
			states := float64(b.N) * float64(tc.n)
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/states, "allocs/state")
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/states, "B/state")
			b.ReportMetric(float64(cpuTime(b)-cpu0)/states, "cpu-ns/state")
		})
	}
}
