//go:build !unix

// Package cputime reads the CPU time this process has used (see
// cputime_unix.go).
package cputime

import "time"

// Process returns false: this platform has no getrusage.
func Process() (time.Duration, bool) { return 0, false }
