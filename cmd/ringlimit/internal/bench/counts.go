package bench

import (
	"sync"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// This file is what the callers count while they run: admitted checks per
// key (for the bound) and, per target, routes and latencies.

// admLogSize is how many admitted checks an admLog holds before it adds them
// to the shared counts: 4,096 int32 key indexes (16 KiB) per sender.
const admLogSize = 4096

// admissions counts the checks admitted per key, for the bound check. Senders
// do not add to the counts one check at a time: at a million keys (8 MB of
// counts) that was an atomic add and a cache miss per admitted check, the
// largest cost a 1M-key run had over a 10k-key one in a perf profile of the
// load generator itself. Each sender appends the key to its own admLog
// instead, which adds admLogSize of them at once under mu (plain adds whose
// misses the CPU overlaps).
type admissions struct {
	mu     sync.Mutex
	counts []int64 // admitted checks per key (each took Options.Hits hits)
}

// admLog is one sender's admitted checks not yet in the shared counts; only
// that sender uses it.
type admLog struct {
	to   *admissions
	keys []int32
}

func newAdmLog(to *admissions) *admLog {
	return &admLog{to: to, keys: make([]int32, 0, admLogSize)}
}

// add records one admitted check of key k (0 <= k < MaxKeys).
func (l *admLog) add(k int) {
	l.keys = append(l.keys, int32(k))
	if len(l.keys) == admLogSize {
		l.flush()
	}
}

// flush adds the recorded checks to the shared counts and empties the log.
func (l *admLog) flush() {
	l.to.mu.Lock()
	for _, k := range l.keys {
		l.to.counts[k]++
	}
	l.to.mu.Unlock()
	l.keys = l.keys[:0]
}

// routeSlots sizes the per-route counters, indexed by node.Route: room for
// every route (RouteLease is the highest) and a few more; a Decision
// with a route beyond them is counted in no route.
const routeSlots = 8

// targetCounts is what one caller counted of the checks it sent to one target.
type targetCounts struct {
	decided, errs int64
	routes        [routeSlots]int64
}

// latBufSize is how many latencies a caller holds before it records them into
// the targets' histograms: 1,024 samples (16 KiB) per caller.
const latBufSize = 1024

// latSample is one decided check's latency in ns and the target that decided it.
type latSample struct {
	target int
	ns     int64
}

// targetHists holds one latency histogram per target, made at its first
// sample. Callers add their samples in batches of latBufSize, taking a
// target's lock once per run of samples for it (a caller keeps to one target
// while it is up), not once per check; memory grows with the targets (about
// 240 KiB each), not with the callers.
type targetHists struct {
	mu []sync.Mutex
	h  []*hdrhistogram.Histogram
}

func newTargetHists(n int) *targetHists {
	return &targetHists{mu: make([]sync.Mutex, n), h: make([]*hdrhistogram.Histogram, n)}
}

// add records the samples, runs of one target under its lock.
func (th *targetHists) add(samples []latSample) {
	for i := 0; i < len(samples); {
		ti := samples[i].target
		th.mu[ti].Lock()
		h := th.h[ti]
		if h == nil {
			h = hdrhistogram.New(1, maxLatency, 3)
			th.h[ti] = h
		}
		for ; i < len(samples) && samples[i].target == ti; i++ {
			h.RecordValue(samples[i].ns)
		}
		th.mu[ti].Unlock()
	}
}

// caller is the state of one sending goroutine; only it writes to it.
type caller struct {
	adm                               *admLog
	hists                             *targetHists
	lat                               []latSample // not yet in hists
	decided, errs, admChecks, denChks int64
	unsent                            int64
	errSample                         []string
	perTarget                         []targetCounts
}

// record adds one decided check's latency, flushing the batch when full.
func (c *caller) record(ti int, ns int64) {
	c.lat = append(c.lat, latSample{target: ti, ns: ns})
	if len(c.lat) == latBufSize {
		c.flushLat()
	}
}

// flushLat records the held latencies into the targets' histograms.
func (c *caller) flushLat() {
	c.hists.add(c.lat)
	c.lat = c.lat[:0]
}
