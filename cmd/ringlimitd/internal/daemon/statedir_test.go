package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// TestStateDir: a daemon with --state-dir saves its key states at shutdown
// and the next daemon with the same name and directory restores them (a used
// daily quota stays used) and counts them in /metrics.
func TestStateDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, nil, "solo", "--state-dir", dir, "--snapshot-interval", "0s")
	daily := algo.Limit{Kind: algo.FixedWindow, Limit: 1, Period: 24 * time.Hour}
	ctx := context.Background()

	d, err := Start(cfg, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if dec, err := d.Node().Allow(ctx, "user-1", daily); err != nil || !dec.Allowed {
		t.Fatalf("first hit: got %+v, %v; want allowed", dec, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	d = startDaemon(t, cfg)
	if dec, err := d.Node().Allow(ctx, "user-1", daily); err != nil || dec.Allowed {
		t.Errorf("after the restart: got %+v, %v; want denied", dec, err)
	}
	code, body := httpDo(t, "GET", "http://"+d.AdminAddr()+"/metrics", "")
	if code != 200 || !strings.Contains(body, "\nringlimit_restored_states_total 1\n") || !strings.Contains(body, "\nringlimit_snapshot_failures_total 0\n") {
		t.Errorf("/metrics: got %d, want ringlimit_restored_states_total 1 and ringlimit_snapshot_failures_total 0", code)
	}
}
