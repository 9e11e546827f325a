//go:build !amd64 && !arm64

package store

// prefetch does nothing on this architecture (see prefetch.go).
func prefetch(uintptr) {}
