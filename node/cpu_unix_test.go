//go:build unix

package node

import "syscall"

// processCPU returns the user plus system CPU time of this process in ns, or 0
// when the system does not say.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
