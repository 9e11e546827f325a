package cputime

import (
	"runtime"
	"testing"
	"time"
)

// Burning CPU for 200 ms moves the reading forward by about that much, and
// never by more than the wall time on every CPU.
func TestProcessCountsBurntCPU(t *testing.T) {
	before, ok := Process()
	if !ok {
		t.Skip("no process CPU time on this platform")
	}
	start := time.Now()
	for x := uint64(1); time.Since(start) < 200*time.Millisecond; x = x*6364136223846793005 + 1 {
		_ = x
	}
	wall := time.Since(start)
	after, _ := Process()
	got := after - before
	if got < 100*time.Millisecond {
		t.Errorf("200 ms of spinning read as %v of CPU", got)
	}
	// The other CPUs may run this test binary's other work; none can run more.
	if ceiling := wall*time.Duration(runtime.NumCPU()) + 50*time.Millisecond; got > ceiling {
		t.Errorf("read %v of CPU over %v of wall time on %d CPUs", got, wall, runtime.NumCPU())
	}
}
