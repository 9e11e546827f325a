//go:build amd64 || arm64

package store

// prefetch asks the CPU to bring the cache line at address p into its caches
// and returns at once (amd64 PREFETCHT0, arm64 PRFM PLDL1KEEP). It reads
// nothing that Go code can observe and never faults, whatever p is (an address
// freed or never mapped included), so it needs no lock and is no data race. p
// is a uintptr, not a pointer: nothing is kept alive by it. Implemented in
// prefetch_$GOARCH.s.
func prefetch(p uintptr)
