//go:build unix

// Package cputime reads the CPU time this process has used, for benchmarks
// that report CPU per operation (cluster_test's BenchmarkCluster3, the CLI's
// bench).
package cputime

import (
	"syscall"
	"time"
)

// Process returns the CPU time (user + system, all threads) this process has
// used so far, or false when the platform cannot tell. Unix: getrusage(2),
// RUSAGE_SELF, whose resolution is the kernel's accounting (a scheduler tick
// on some kernels): subtract two readings over a span of many ticks.
func Process() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
