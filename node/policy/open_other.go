//go:build !unix

package policy

import (
	"fmt"
	"os"
)

// openNonBlocking opens path read-only after checking it is a regular file
// (there is no O_NONBLOCK to open a FIFO without waiting here).
func openNonBlocking(path string) (*os.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return os.Open(path)
}
