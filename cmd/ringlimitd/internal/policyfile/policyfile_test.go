package policyfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/node/policy"
)

const testPolicy = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"

type nopChecker struct{ policy.Checker }

// TestReloadDeadline: a load that hangs fails its reload at the deadline and
// keeps the old policy; reloads fail at once while it still hangs, work again
// once it returns, and Close returns while it hangs.
func TestReloadDeadline(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(testPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Start(path, nopChecker{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	release := make(chan struct{})
	w.mu.Lock()
	w.timeout = 50 * time.Millisecond
	w.load = func(p string) (*policy.Policy, error) {
		<-release
		return policy.Load(p)
	}
	w.mu.Unlock()
	start := time.Now()
	if err := w.Reload(); !errors.Is(err, ErrReloadTimeout) {
		t.Fatalf("hanging load: got %v, want ErrReloadTimeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("hanging load: Reload took %v, want about the 50ms deadline", took)
	}
	if err := w.Reload(); !errors.Is(err, ErrReloadTimeout) {
		t.Errorf("while the load still hangs: got %v, want ErrReloadTimeout at once", err)
	}
	if _, v := w.lim.Policy(); v != 1 {
		t.Errorf("policy version after failed reloads: got %d, want 1", v)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := w.Reload()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reload after the load returned: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, v := w.lim.Policy(); v != 2 {
		t.Errorf("policy version: got %d, want 2", v)
	}
	// Close while a load hangs: returns, and Reload says closed.
	w.mu.Lock()
	w.timeout = time.Hour
	forever := make(chan struct{})
	defer close(forever)
	w.load = func(string) (*policy.Policy, error) { <-forever; return nil, errors.New("released") }
	w.mu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- w.Reload() }()
	waitHung := time.Now().Add(5 * time.Second)
	for w.mu.TryLock() { // Reload has not taken the lock yet
		w.mu.Unlock()
		if time.Now().After(waitHung) {
			t.Fatal("Reload did not start")
		}
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked behind a hanging reload")
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("reload interrupted by Close: got %v, want ErrClosed", err)
	}
}
