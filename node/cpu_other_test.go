//go:build !unix

package node

// processCPU returns 0: this system's CPU time is not read (see cpu_unix_test.go).
func processCPU() int64 { return 0 }
