//go:build !unix

package daemon

// fdLimit returns 1024 where RLIMIT_NOFILE does not exist.
func fdLimit() uint64 { return 1024 }
