//go:build unix

package policy

import (
	"os"
	"syscall"
)

// openNonBlocking opens path read-only with O_NONBLOCK, so that opening a FIFO
// returns at once instead of waiting for a writer (a regular file ignores the
// flag).
func openNonBlocking(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
