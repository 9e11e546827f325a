package daemon

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/config"
	"github.com/ringlimit/ringlimit/node/failover/redistest"
)

// TestRedisPrimary: with --redis-primary the HTTP checks are decided on Redis
// (owner "redis", state in Redis under the key prefix), and by the node when
// Redis is down, without an error to the caller.
func TestRedisPrimary(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := newTestPKI(t)
	d := startDaemon(t, testConfig(t, p, "redisfirst", "--redis-primary", srv.URL(), "--redis-budget", "200ms"))
	base, admin := "https://"+d.HTTPAddr(), "http://"+d.AdminAddr()
	waitUntil(t, 5*time.Second, "readyz", func() bool { c, _ := httpDo(t, "GET", admin+"/readyz", ""); return c == 200 })
	check := func() (owner string, remaining int64) {
		t.Helper()
		code, body := httpDoWith(t, p.certClient, "POST", base+"/v1/check", `{"key":"user123","algorithm":"gcra","limit":30,"period":"60s","burst":15}`, "")
		if code != 200 {
			t.Fatalf("check: got %d %s, want 200", code, body)
		}
		var dec struct {
			Remaining int64  `json:"remaining"`
			Owner     string `json:"owner"`
		}
		if err := json.Unmarshal([]byte(body), &dec); err != nil {
			t.Fatal(err)
		}
		return dec.Owner, dec.Remaining
	}
	if owner, rem := check(); owner != RedisOwner || rem != 15 {
		t.Errorf("healthy redis: got owner %q remaining %d, want %q 15", owner, rem, RedisOwner)
	}
	if n, err := srv.Client().Exists(t.Context(), "ringlimit:user123").Result(); err != nil || n != 1 {
		t.Errorf("redis key ringlimit:user123: exists %d %v, want 1", n, err)
	}
	if code, body := httpDoWith(t, p.certClient, "POST", base+"/v1/check", `{"key":"","algorithm":"gcra","limit":30,"period":"60s"}`, ""); code != 400 {
		t.Errorf("empty key: got %d %s, want 400", code, body)
	}
	srv.Kill()
	if owner, rem := check(); owner != "redisfirst" || rem != 15 {
		t.Errorf("redis down: got owner %q remaining %d, want the node (redisfirst), a fresh key (15)", owner, rem)
	}
	_, body := httpDo(t, "GET", admin+"/metrics", "")
	for _, m := range []string{`ringlimit_failover_checks_total{side="redis"} 1`, `ringlimit_failover_checks_total{side="cluster"} 1`} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

func TestRedisPrimaryFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--redis-primary", "http://x"}, {"--redis-primary", "redis://x", "--redis-budget", "0s"}} {
		_, err := config.Load(append([]string{"--node-name", "x"}, args...), func(string) (string, bool) { return "", false })
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "redis-") {
			t.Errorf("%v: got %v, want config.ErrInvalid naming the flag", args, err)
		}
	}
}
