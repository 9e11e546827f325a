//go:build unix

package daemon

import (
	"context"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGHUPReloadsPolicy: SIGHUP reloads the policy file even when the file
// did not change (so fsnotify saw nothing): the version goes from 1 to 2.
func TestSIGHUPReloadsPolicy(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeAtomic(t, path, policyV1)
	none := func(string) (string, bool) { return "", false }
	p := newTestPKI(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		args := append([]string{"--node-name", "hup", "--bind-addr", "127.0.0.1", "--gossip-port", "0", "--grpc-port", "0", "--peer-port", "0",
			"--http-port", "0", "--admin-port", "0", "--gossip-profile", "fast", "--policy-file", path}, p.args("hup")...)
		done <- Main(ctx, args, none, io.Discard, &stderr)
	}()
	waitUntil(t, 10*time.Second, "started log line", func() bool { return strings.Contains(stderr.String(), `"msg":"started"`) })
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "reload after SIGHUP", func() bool {
		return strings.Contains(stderr.String(), `"msg":"policy reloaded"`) && strings.Contains(stderr.String(), `"version":2`)
	})
	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Fatalf("exit status: got %d, want 0\n%s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Main did not return")
	}
}

// TestFIFOPolicySIGHUPThenSIGTERM: the policy file replaced by a FIFO (which
// used to wedge every reload and, through them, the signal loop) is refused
// as not a regular file on SIGHUP, the old policy stays, and SIGTERM still
// stops the daemon cleanly.
func TestFIFOPolicySIGHUPThenSIGTERM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	writeAtomic(t, path, policyV1)
	none := func(string) (string, bool) { return "", false }
	p := newTestPKI(t)
	// SIGTERM cancels ctx, as in the binary's main.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		args := append([]string{"--node-name", "fifo", "--bind-addr", "127.0.0.1", "--gossip-port", "0", "--grpc-port", "0", "--peer-port", "0",
			"--http-port", "0", "--admin-port", "0", "--gossip-profile", "fast", "--policy-file", path}, p.args("fifo")...)
		done <- Main(ctx, args, none, io.Discard, &stderr)
	}()
	waitUntil(t, 10*time.Second, "started log line", func() bool { return strings.Contains(stderr.String(), `"msg":"started"`) })
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a FIFO to replace the policy file with (mkfifo: %v)", err)
	}
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "reload refused", func() bool {
		return strings.Contains(stderr.String(), `"msg":"policy reload failed, keeping the previous policy"`) &&
			strings.Contains(stderr.String(), "not a regular file")
	})
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != ExitOK {
			t.Fatalf("exit status: got %d, want 0\n%s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("SIGTERM did not stop the daemon within 15s\n%s", stderr.String())
	}
}
