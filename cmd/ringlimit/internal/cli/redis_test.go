package cli

import (
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/node/failover/redistest"
)

// TestBenchRedis runs bench --redis against a real redis-server: every check is
// decided by Redis, and the admission check holds.
func TestBenchRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	code, out, stderr := run(t, Deps{}, "bench", "--redis", srv.URL(), "--duration", "300ms", "--concurrency", "4", "--keys", "10", "--algorithm", "gcra", "--limit", "5", "--period", "100ms", "--burst", "2")
	if code != ExitOK {
		t.Fatalf("got exit %d, want 0\n%s%s", code, out, stderr)
	}
	for _, want := range []string{"closed loop, 4 callers, 1 targets", "errors             0", ": ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	n, err := srv.Client().DBSize(t.Context()).Result()
	if err != nil || n < 1 || n > 10 {
		t.Errorf("redis holds %d keys (%v), want 1..10 bench keys", n, err)
	}
	if code, _, stderr := run(t, Deps{}, "bench", "--redis", srv.URL(), "--nodes", "2"); code == ExitOK || !strings.Contains(stderr, "--redis sends to Redis") {
		t.Errorf("--redis with --nodes: got exit %d %q, want a usage error", code, stderr)
	}
}
