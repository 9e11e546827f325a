//go:build unix

package daemon

import "syscall"

// fdLimit returns the process's file-descriptor limit (RLIMIT_NOFILE, soft;
// the Go runtime raises it to the hard limit at start), 1024 if unknown.
func fdLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 1024
	}
	return r.Cur
}
