//go:build unix

package daemon

import (
	"context"
	"io"
	"os"
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
