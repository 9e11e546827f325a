//go:build unix

package policy

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestLoadRefusesNonRegular: a FIFO (which used to block Load until a writer
// came, for good) and a directory are refused at once with ErrNotRegular; a
// symbolic link to a regular file loads.
func TestLoadRefusesNonRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a FIFO to test the regular-file check with (mkfifo: %v)", err)
	}
	for _, path := range []string{fifo, dir} {
		done := make(chan error, 1)
		go func() { _, err := Load(path); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("Load(%s): got %v, want ErrNotRegular", filepath.Base(path), err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Load(%s) blocked", filepath.Base(path))
		}
	}
	real := filepath.Join(dir, "real.yaml")
	if err := os.WriteFile(real, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(link); err != nil {
		t.Errorf("Load(symlink to a regular file): %v", err)
	}
}
