package cputime

import (
	"runtime"
	"testing"
	"time"
)

// Spinning moves the reading forward (by 100 ms within 30 s of wall time,
// however busy the machine is with other tests), and never by more than the
// wall time on every CPU.
func TestProcessAdvancesWithBurntCPU(t *testing.T) {
	before, ok := Process()
	if !ok {
		t.Skip("no process CPU time on this platform")
	}
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	var got time.Duration
	for i, x := 0, uint64(1); ; i, x = i+1, x*6364136223846793005+1 {
		if i%(1<<16) != 0 {
			continue
		}
		now, _ := Process()
		if got = now - before; got >= 100*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s of spinning read as %v of CPU", got)
		}
	}
	wall := time.Since(start)
	// The other CPUs may run this test binary's other work; none can run more.
	if ceiling := wall*time.Duration(runtime.NumCPU()) + 50*time.Millisecond; got > ceiling {
		t.Errorf("read %v of CPU over %v of wall time on %d CPUs", got, wall, runtime.NumCPU())
	}
}
