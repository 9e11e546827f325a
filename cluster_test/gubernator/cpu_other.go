//go:build !unix

package main

import "time"

// processCPU reports that this system's CPU time is not measured.
func processCPU() (time.Duration, bool) { return 0, false }
