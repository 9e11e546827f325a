package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// BenchmarkAllowLocalSmallStates is BenchmarkAllowLocal for the two
// algorithms whose small states the store packs in their slot, under limits
// that keep them small: a sliding-window log whose Period (1 µs) is over before
// the same key is checked again, so each check finds its one entry expired and
// stores one (packed: at most two entries), and a bucketed window of a 1-hour
// Period, whose hits all sit in one bucket for the run (packed: one bucket).
// Before the packing, both were boxed.
//
//	go test -run '^$' -bench AllowLocalSmallStates -benchtime 2000000x -cpu 2 -benchmem ./node/
func BenchmarkAllowLocalSmallStates(b *testing.B) {
	n := testNode(b, nil)
	ctx := context.Background()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	for _, l := range []algo.Limit{
		{Kind: algo.SlidingWindowLog, Limit: 2, Period: time.Microsecond},
		{Kind: algo.BucketedSlidingWindow, Limit: 1e12, Period: time.Hour}, // Config.MaxLimit: never denied in a run
	} {
		b.Run(l.Kind.String(), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				d, err := n.Allow(ctx, keys[i&1023], l)
				if err != nil || !d.Allowed {
					b.Fatalf("%+v %v", d, err)
				}
				i++
			}
		})
	}
}
