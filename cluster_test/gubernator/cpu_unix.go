//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU returns this process's user+system CPU time so far, and false
// when the system does not say.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
