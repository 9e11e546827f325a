package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/internal/cputime"
	"github.com/ringlimit/ringlimit/node"
)

// BenchmarkCluster3 drives a 3-node in-process cluster with 64 concurrent callers
// spread over the nodes, on uniform random keys (about 2/3 of checks are
// forwarded). It reports aggregate checks/s and latency percentiles (µs) from an
// HDR histogram, the process's CPU time per check, its heap allocations per
// check (allocs/check: -benchmem's allocs/op with decimals), and the mean
// number of checks in a forwarded batch (checks/batch), and the process's
// write and read system calls per check (writes/check, reads/check, from
// /proc/self/io: every message between members is a TLS record written with
// one write on loopback), the bytes written per check (bytes/check, wchar of
// /proc/self/io), the messages between members per check (msgs/check: each
// forwarded batch and each replication send to a backup is a request and an
// answer), the CPU per message (cpu-µs/msg: cpu-ns/check over msgs/check)
// and the key states per replication send (states/send). Run with -cpu 2 to pin GOMAXPROCS=2. With
// RINGLIMIT_BENCH_PROFILE=DIR it writes profiles of the load alone to DIR (see
// profileLoad).
//
// The nodes run DefaultConfig (a LAN deployment) on loopback with free ports,
// not TestConfig: the test profile gossips every 20 ms and scans for idle keys
// every second so that tests see crashes and expiry fast, and in a settled
// cluster both are only cost. (With the 1 s scan, keys limited at 1000 per
// second and checked about twice a second are dropped and re-created most of the
// time.)
//
// Sub-benchmarks: secure (the default: mutual TLS 1.3 between peers, gossip
// encrypted, as TestConfig makes it) and insecure (Config.Insecure, plaintext
// peers): run both in one invocation, for example
//
//	go test -run '^$' -bench 'Cluster3' -benchtime 200000x -count 3 -cpu 2 ./cluster_test/
//
// so that the ratio of their checks/s and cpu-ns/check is measured side by
// side (-count repeats the pair, alternating). A third, insecure-unreplicated
// (plaintext peers, Config.Replication off), is the configuration of this
// benchmark before issue 12 (5bf797d and earlier, where peers were plaintext
// unless TLS files were set and there was no replication): run that commit's
// BenchmarkCluster3 and this one alternately for a like-for-like before/after
// of a forwarded check's cost:
//
//	go test -run '^$' -bench 'Cluster3/insecure-unreplicated' -benchtime 300000x -cpu 2 -benchmem ./cluster_test/
func BenchmarkCluster3(b *testing.B) {
	for _, mode := range []struct {
		name     string
		insecure bool
		repl     node.Replication
	}{
		{"secure", false, node.ReplicationAsync},
		{"insecure", true, node.ReplicationAsync},
		{"insecure-unreplicated", true, node.ReplicationOff},
	} {
		b.Run(mode.name, func(b *testing.B) {
			benchCluster(b, 3, mode.insecure, mode.repl)
		})
	}
}

// BenchmarkCluster3Replication is BenchmarkCluster3 (secure) with replication
// off, asynchronous (the default) and synchronous, to measure what keeping
// each key's state on its backup costs, side by side:
//
//	go test -run '^$' -bench 'Cluster3Replication' -benchtime 200000x -count 3 -cpu 2 ./cluster_test/
func BenchmarkCluster3Replication(b *testing.B) {
	for _, mode := range []node.Replication{node.ReplicationOff, node.ReplicationAsync, node.ReplicationSync} {
		b.Run(mode.String(), func(b *testing.B) {
			benchCluster(b, 3, false, mode)
		})
	}
}

// batchCounter is a node.Metrics that counts the batches a node forwards and
// the checks in them, and (node.ReplicationMetrics) the replication sends it
// makes to backups and the key states in them.
type batchCounter struct{ batches, checks, replSends, replStates atomic.Int64 }

func (c *batchCounter) Replicated(_ string, states int, err error) {
	if err == nil {
		c.replSends.Add(1)
		c.replStates.Add(int64(states))
	}
}

func (*batchCounter) Check(algo.Kind, node.Route, bool) {}
func (c *batchCounter) Forward(_ string, size int, _ time.Duration, err error) {
	if err == nil {
		c.batches.Add(1)
		c.checks.Add(int64(size))
	}
}
func (*batchCounter) Handoff(int, time.Duration, error) {}
func (*batchCounter) Eviction(string)                   {}

// benchCluster runs BenchmarkCluster3's load on an in-process cluster of size
// members (the 64 callers spread round-robin over them) and reports its
// metrics. It also reports goroutines/member and heap-MB/member, measured once
// the cluster has formed, before the load, and form-s, the seconds forming took.
func benchCluster(b *testing.B, size int, insecure bool, repl node.Replication) {
	benchClusterRouted(b, size, insecure, repl, false)
}

// benchClusterRouted is benchCluster; with toOwner, each caller sends every
// check to the key's owner (found with InspectKey before the load) instead of
// to its own member, as callers that know the ring would: nothing is
// forwarded.
func benchClusterRouted(b *testing.B, size int, insecure bool, repl node.Replication, toOwner bool) {
	batches := new(batchCounter)
	within := 20 * time.Second
	if size > 3 {
		// Secure members handshake with each other while joining; on 2 cores
		// 30 of them take longer than the tests' 20 s, and on a machine
		// shared with other builds (load average 10 and more) longer than
		// 2 minutes.
		within = 5 * time.Minute
	}
	formStart := time.Now()
	nodes := startClusterWithin(b, size, within, func(c *node.Config) {
		// LAN timings; loopback, free ports and security from TestConfig.
		def := node.DefaultConfig()
		c.IdleScanInterval, c.ForwardTimeout, c.HandoffTimeout = def.IdleScanInterval, def.ForwardTimeout, def.HandoffTimeout
		c.CloseTimeout, c.RejoinInterval, c.Gossip, c.AdmissionRetry = def.CloseTimeout, def.RejoinInterval, def.Gossip, def.AdmissionRetry
		if insecure {
			c.Insecure, c.SecretKey = true, nil
		}
		c.Replication = repl
		c.Metrics = batches
	})
	if nodes[0].Insecure() != insecure {
		b.Fatalf("node runs insecure=%v, want %v", nodes[0].Insecure(), insecure)
	}
	formed := time.Since(formStart)
	var ms runtime.MemStats
	{
		runtime.GC()
		runtime.ReadMemStats(&ms)
		// Reported after the load: ResetTimer drops metrics reported before it.
		gor, heap := float64(runtime.NumGoroutine())/float64(size), float64(ms.HeapInuse)/float64(size)/(1<<20)
		defer func() {
			b.ReportMetric(gor, "goroutines/member")
			b.ReportMetric(heap, "heap-MB/member")
			b.ReportMetric(formed.Seconds(), "form-s")
		}()
	}
	const callers = 64
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench:%d", i)
	}
	l := algo.Limit{Kind: algo.GCRA, Burst: 1000, Limit: 1000, Period: time.Second}
	var next atomic.Int64
	var mu sync.Mutex
	hist := hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
	var forwarded atomic.Int64
	hists := make([]*hdrhistogram.Histogram, callers)
	for i := range hists {
		hists[i] = hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
	}
	var owners []*node.Node // by key index, with toOwner
	if toOwner {
		owners = keyOwners(b, nodes, keys, l)
	}
	b.ResetTimer()
	if dir := os.Getenv("RINGLIMIT_BENCH_PROFILE"); dir != "" {
		stop := profileLoad(b, dir, size)
		defer stop()
	}
	batches0, batchChecks0 := batches.batches.Load(), batches.checks.Load()
	replSends0, replStates0 := batches.replSends.Load(), batches.replStates.Load()
	runtime.ReadMemStats(&ms)
	mallocs0 := ms.Mallocs
	cpu0, cpuOK := cputime.Process()
	io0, ioOK := procIO()
	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := hists[g]
			r := rand.New(rand.NewPCG(uint64(g), 1))
			own := nodes[g%size]
			fw := int64(0)
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				k, n := r.IntN(len(keys)), own
				if owners != nil {
					n = owners[k]
				}
				d, err := n.Allow(context.Background(), keys[k], l)
				if err != nil {
					b.Error(err)
					return
				}
				_ = h.RecordValue(time.Since(t0).Microseconds())
				if d.Route == node.RouteForwarded {
					fw++
				}
			}
			forwarded.Add(fw)
			mu.Lock()
			hist.Merge(h)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, _ := cputime.Process()
	io1, _ := procIO()
	b.StopTimer()
	if ioOK {
		// System calls that write (the messages between members, each a
		// TLS record and a write on loopback) and read, per check.
		b.ReportMetric(float64(io1.writes-io0.writes)/float64(b.N), "writes/check")
		b.ReportMetric(float64(io1.reads-io0.reads)/float64(b.N), "reads/check")
		// Bytes written to sockets (and anything else) per check: TLS
		// records of every message between members, both directions.
		b.ReportMetric(float64(io1.wbytes-io0.wbytes)/float64(b.N), "bytes/check")
	}
	runtime.ReadMemStats(&ms)
	// allocs/op to two decimals (-benchmem rounds down to whole allocations).
	b.ReportMetric(float64(ms.Mallocs-mallocs0)/float64(b.N), "allocs/check")
	if cpuOK {
		// CPU time of the whole process (three nodes and the callers) per check.
		// checks/s is about (CPUs the process gets) / this, so a change that
		// saves CPU shows here even when the scheduler, not the CPU, limits
		// checks/s.
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/check")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
	b.ReportMetric(float64(hist.ValueAtQuantile(50)), "p50-µs")
	b.ReportMetric(float64(hist.ValueAtQuantile(99)), "p99-µs")
	b.ReportMetric(float64(forwarded.Load())/float64(b.N), "forwarded-share")
	fwdBatches := batches.batches.Load() - batches0
	if fwdBatches > 0 {
		b.ReportMetric(float64(batches.checks.Load()-batchChecks0)/float64(fwdBatches), "checks/batch")
	}
	// Messages between members per check: a forwarded batch is a request
	// and its answer, a replication send a request and its answer (both
	// counted by the sender when the answer came). cpu-µs/msg is the
	// process's CPU per check over them: what one message costs, every
	// member's and caller's share included.
	sends := batches.replSends.Load() - replSends0
	if sends > 0 {
		b.ReportMetric(float64(batches.replStates.Load()-replStates0)/float64(sends), "states/send")
	}
	msgs := 2 * float64(fwdBatches+sends) / float64(b.N)
	b.ReportMetric(msgs, "msgs/check")
	if cpuOK && msgs > 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N)/msgs/1e3, "cpu-µs/msg")
	}
}

// ioCounts are the process's read and write system calls so far and the
// bytes those writes passed.
type ioCounts struct{ reads, writes, wbytes int64 }

// procIO reads the process's read and write system call counts (syscr and
// syscw of /proc/self/io, every thread included) and the bytes written
// (wchar); ok is false where that file cannot be read (not Linux).
func procIO() (c ioCounts, ok bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return c, false
	}
	var got int
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
		case "syscr":
			c.reads, got = n, got+1
		case "syscw":
			c.writes, got = n, got+1
		case "wchar":
			c.wbytes, got = n, got+1
		}
	}
	return c, got == 3
}

// profileLoad writes a CPU profile of the load alone to dir/members-N.cpu
// (without forming the cluster: at 30 members the TLS handshakes and ring
// rebuilds of forming dominate -cpuprofile) and the allocations made during
// the load as two heap profiles, dir/members-N.allocs0 and .allocs1 (read with
// go tool pprof -sample_index=alloc_objects -base allocs0 allocs1). It
// returns the function that ends the profiles.
func profileLoad(b *testing.B, dir string, size int) (stop func()) {
	b.Helper()
	name := func(ext string) string { return fmt.Sprintf("%s/members-%d.%s", dir, size, ext) }
	writeAllocs := func(ext string) {
		f, err := os.Create(name(ext))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		runtime.GC()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
	}
	writeAllocs("allocs0")
	f, err := os.Create(name("cpu"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		writeAllocs("allocs1")
	}
}

// keyOwners returns the owner of every key among nodes, asking nodes[0]
// (InspectKey) from 64 goroutines.
func keyOwners(b *testing.B, nodes []*node.Node, keys []string, l algo.Limit) []*node.Node {
	b.Helper()
	byName := make(map[string]*node.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name()] = n
	}
	owners := make([]*node.Node, len(keys))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(keys); i = int(next.Add(1)) - 1 {
				info, err := nodes[0].InspectKey(context.Background(), keys[i], l)
				if err != nil {
					errs <- fmt.Errorf("InspectKey(%q): %w", keys[i], err)
					return
				}
				if owners[i] = byName[info.Owner]; owners[i] == nil {
					errs <- fmt.Errorf("InspectKey(%q): owner %q is no member", keys[i], info.Owner)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return owners
}
