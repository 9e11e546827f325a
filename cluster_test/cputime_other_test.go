//go:build !unix

package cluster_test

import "time"

// processCPU returns false: this platform has no getrusage.
func processCPU() (time.Duration, bool) { return 0, false }
