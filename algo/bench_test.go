package algo

import (
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// benchLimits are realistic limits per Kind: 100 hits per second (burst 10).
var benchLimits = map[Kind]Limit{
	GCRA:                  {Kind: GCRA, Limit: 100, Period: time.Second, Burst: 10},
	TokenBucket:           {Kind: TokenBucket, Limit: 100, Period: time.Second, Burst: 10},
	FixedWindow:           {Kind: FixedWindow, Limit: 100, Period: time.Second},
	SlidingWindowCounter:  {Kind: SlidingWindowCounter, Limit: 100, Period: time.Second},
	SlidingWindowLog:      {Kind: SlidingWindowLog, Limit: 100, Period: time.Second},
	BucketedSlidingWindow: {Kind: BucketedSlidingWindow, Limit: 100, Period: time.Second},
}

// benchStep advances the clock so that about every other check is admitted
// (200 checks per second against 100 per second).
const benchStep = int64(5 * time.Millisecond)

// BenchmarkStateTake measures State.Take (validation and dispatch included).
func BenchmarkStateTake(b *testing.B) {
	for _, k := range Kinds() {
		b.Run(k.String(), func(b *testing.B) {
			l := benchLimits[k]
			var s State
			now := int64(1_700_000_000) * int64(time.Second)
			b.ReportAllocs()
			for b.Loop() {
				now += benchStep
				if _, err := s.Take(now, 1, l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkValueTake measures the Take of each value type (no validation).
func BenchmarkValueTake(b *testing.B) {
	now := int64(1_700_000_000) * int64(time.Second)
	run := func(b *testing.B, k Kind, take func(now int64, l Limit) Decision) {
		b.Run(k.String(), func(b *testing.B) {
			l := benchLimits[k]
			t := now
			b.ReportAllocs()
			for b.Loop() {
				t += benchStep
				take(t, l)
			}
		})
	}
	var g GCRAState
	run(b, GCRA, func(now int64, l Limit) Decision { return g.Take(now, 1, l) })
	var tb TokenBucketState
	run(b, TokenBucket, func(now int64, l Limit) Decision { return tb.Take(now, 1, l) })
	var fw FixedWindowState
	run(b, FixedWindow, func(now int64, l Limit) Decision { return fw.Take(now, 1, l) })
	var wc SlidingWindowCounterState
	run(b, SlidingWindowCounter, func(now int64, l Limit) Decision { return wc.Take(now, 1, l) })
	var wl SlidingWindowLogState
	run(b, SlidingWindowLog, func(now int64, l Limit) Decision { return wl.Take(now, 1, l) })
	var bw BucketedWindowState
	run(b, BucketedSlidingWindow, func(now int64, l Limit) Decision { return bw.Take(now, 1, l) })
}

// BenchmarkStateSize reports unsafe.Sizeof of each state type, in bytes.
func BenchmarkStateSize(b *testing.B) {
	for _, c := range []struct {
		name string
		size uintptr
	}{
		{"State", unsafe.Sizeof(State{})},
		{"GCRAState", unsafe.Sizeof(GCRAState{})},
		{"TokenBucketState", unsafe.Sizeof(TokenBucketState{})},
		{"FixedWindowState", unsafe.Sizeof(FixedWindowState{})},
		{"SlidingWindowCounterState", unsafe.Sizeof(SlidingWindowCounterState{})},
		{"SlidingWindowLogState", unsafe.Sizeof(SlidingWindowLogState{})},
		{"BucketedWindowState", unsafe.Sizeof(BucketedWindowState{})},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
			}
			b.ReportMetric(float64(c.size), "bytes")
		})
	}
}

// BenchmarkHeapPerKey reports the heap per key of a map[string]State holding
// 1,000,000 keys ("k0".."k999999") that each took one hit, measured with
// runtime.ReadMemStats after GC: the map's slot for the string header and the
// 48-byte State, the map's own overhead and, for a SlidingWindowLog, its log
// (header and buffer). The key strings' bytes are allocated beforehand and not
// counted (they are the caller's). Each iteration builds the whole map.
func BenchmarkHeapPerKey(b *testing.B) {
	const keys = 1_000_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	for _, k := range Kinds() {
		b.Run(k.String(), func(b *testing.B) {
			l := benchLimits[k]
			now := int64(1_700_000_000) * int64(time.Second)
			var perKey float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				m := make(map[string]State)
				for _, key := range names {
					var s State
					if _, err := s.Take(now, 1, l); err != nil {
						b.Fatal(err)
					}
					m[key] = s
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perKey = float64(after.HeapAlloc-before.HeapAlloc) / keys
				runtime.KeepAlive(m)
			}
			b.ReportMetric(perKey, "bytes/key")
		})
	}
	runtime.KeepAlive(names)
}

// BenchmarkSlidingWindowLogScaling shows that a check costs the same whatever the
// log's size: at twice the limit's rate, every other check is admitted (one hit
// stored, one expired) and every other is denied against a full log of Limit
// hits. Flat ns/op from Limit 10 to MaxLogLimit is the amortized O(1) per hit.
func BenchmarkSlidingWindowLogScaling(b *testing.B) {
	for _, limit := range []int64{10, 1000, 65536} {
		b.Run("limit="+strconv.FormatInt(limit, 10), func(b *testing.B) {
			l := Limit{Kind: SlidingWindowLog, Limit: limit, Period: time.Second}
			step := int64(time.Second) / limit / 2
			var s State
			now := int64(1_700_000_000) * int64(time.Second)
			for range 2 * limit { // fill the log: the steady state
				now += step
				s.Take(now, 1, l)
			}
			b.ReportAllocs()
			for b.Loop() {
				now += step
				if _, err := s.Take(now, 1, l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
