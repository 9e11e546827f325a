package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/transport"
)

// exactCluster is a fake cluster: one algo.State per key behind a lock, honouring
// CreatedAt; flip makes it answer one decision wrong.
type exactCluster struct {
	mu    sync.Mutex
	m     map[string]*algo.State
	flipN int // flip the Allowed of the flipN-th check (1-based); 0 = never
	n     int
}

func newExact() *exactCluster { return &exactCluster{m: map[string]*algo.State{}} }

func (c *exactCluster) Check(ctx context.Context, chk transport.Check) (transport.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	s := c.m[chk.Key]
	if s == nil {
		s = new(algo.State)
		c.m[chk.Key] = s
	}
	now := chk.CreatedAt
	if now == 0 {
		now = time.Now().UnixNano()
	}
	d, err := s.Take(now, chk.Hits, chk.Limit)
	if err != nil {
		return transport.Result{}, err
	}
	if c.n == c.flipN {
		d.Allowed = !d.Allowed
	}
	return transport.Result{Decision: d, Route: transport.RouteOwner, Owner: "fake-0"}, nil
}

func fakeInProcess(c target.Checker) InProcessFunc {
	return func(ctx context.Context, nodes int, accept bool) ([]target.Target, func() error, error) {
		var ts []target.Target
		for i := range nodes {
			ts = append(ts, target.Target{Name: "fake-" + string(rune('0'+i)), Checker: c})
		}
		return ts, func() error { return nil }, nil
	}
}

func run(t *testing.T, deps Deps, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Execute(context.Background(), args, &out, &errb, deps)
	return code, out.String(), errb.String()
}

// smallLog writes a log of n requests from 3 IPs, one second apart.
func smallLog(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	base := time.Date(2015, 5, 17, 10, 5, 0, 0, time.UTC)
	for i := range n {
		ts := base.Add(time.Duration(i) * time.Second).Format("02/Jan/2006:15:04:05 -0700")
		b.WriteString("10.0.0." + string(rune('1'+i%3)) + ` - - [` + ts + `] "GET / HTTP/1.1" 200 5 "-" "ua"` + "\n")
	}
	b.WriteString("not a log line\n")
	p := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFlagValidation(t *testing.T) {
	t.Parallel()
	deps := Deps{InProcess: fakeInProcess(newExact())}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--algorithm", "leaky"}, `--algorithm: algo: invalid limit: kind "leaky"`},
		{[]string{"replay", "--limit", "0"}, "--limit/--period/--burst for gcra: algo: invalid limit: field Limit value 0"},
		{[]string{"bench", "--period", "-1s"}, "field Period"},
		{[]string{"bench", "--algorithm", "token_bucket", "--burst", "0"}, "field Burst value 0"},
		{[]string{"bench", "--hits", "-1"}, "--hits"},
		{[]string{"bench", "--dist", "pareto"}, "--dist"},
		{[]string{"bench", "--dist", "zipf", "--zipf-s", "1"}, "--zipf-s 1: must be > 1"},
		{[]string{"bench", "--duration", "0s"}, "--duration 0s"},
		{[]string{"bench", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"bench", "--addr", "127.0.0.1:1", "--nodes", "5"}, "--addr sends to daemons"},
		{[]string{"bench", "--target", "k8s"}, `--target "k8s"`},
		{[]string{"replay", "--nodes", "0"}, "--nodes 0"},
		{[]string{"replay", "--log", "/nonexistent/log"}, "/nonexistent/log"},
		{[]string{"replay", "--addr", "127.0.0.1:1", "--tls-cert", "x"}, "--tls-cert, --tls-key and --tls-ca go together"},
		{[]string{"demo", "--algorithm", "gcra"}, "unknown flag: --algorithm"},
		{[]string{"check"}, "accepts 1 arg"},
		{[]string{"check", "k", "--algorithm", "x"}, "--algorithm"},
		{[]string{"members", "--addr", "ftp://x"}, "want host:port or an http(s) URL"},
		{[]string{"bench", "--no-such-flag"}, "unknown flag"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			code, _, stderr := run(t, deps, tt.args...)
			if code != ExitError {
				t.Errorf("got exit %d, want %d", code, ExitError)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("got stderr %q, want it to contain %q", stderr, tt.want)
			}
		})
	}
}

func TestReplayExactAndFlipped(t *testing.T) {
	t.Parallel()
	log := smallLog(t, 60)
	code, out, stderr := run(t, Deps{InProcess: fakeInProcess(newExact())}, "replay", "--log", log, "--limit", "3", "--burst", "1")
	if code != ExitOK {
		t.Fatalf("exact cluster: got exit %d, want 0\n%s%s", code, out, stderr)
	}
	for _, want := range []string{"60 requests (1 malformed lines skipped)", "decided by fake-0", "sent via fake-2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr, "skipped 1 malformed lines of 61; first: accesslog: malformed line 61") {
		t.Errorf("stderr does not report the malformed line: %q", stderr)
	}

	flip := newExact()
	flip.flipN = 7
	code, out, stderr = run(t, Deps{InProcess: fakeInProcess(flip)}, "replay", "--log", log, "--limit", "3", "--burst", "1")
	if code != ExitNo {
		t.Fatalf("flipping cluster: got exit %d, want %d\n%s", code, ExitNo, out)
	}
	if !strings.Contains(out, "MISMATCH line") || !strings.Contains(stderr, "1 of 60 requests") {
		t.Errorf("mismatch not reported:\n%s\n%s", out, stderr)
	}
}

func TestDemoRunsEveryAlgorithm(t *testing.T) {
	t.Parallel()
	log := smallLog(t, 90)
	code, out, stderr := run(t, Deps{InProcess: fakeInProcess(newExact())}, "demo", "--log", log, "--limit", "5", "--period", "10s")
	if code != ExitOK {
		t.Fatalf("got exit %d, want 0\n%s%s", code, out, stderr)
	}
	for _, k := range algo.Kinds() {
		if !strings.Contains(out, "== "+k.String()) {
			t.Errorf("no summary for %v:\n%s", k, out)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("all %d replays match", len(algo.Kinds()))) {
		t.Errorf("no final verdict:\n%s", out)
	}
	flip := newExact()
	flip.flipN = 200 // inside the third replay
	if code, out, _ := run(t, Deps{InProcess: fakeInProcess(flip)}, "demo", "--log", log); code != ExitNo {
		t.Errorf("flipped demo: got exit %d, want %d\n%s", code, ExitNo, out)
	}
}

func TestResolveLogSearchesParents(t *testing.T) {
	t.Parallel()
	// The tests run in cmd/ringlimit/internal/cli; the bundled log is at the
	// repository root, four levels up.
	p, err := resolveLog(DefaultLog, true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(p, filepath.Join("testdata", "apache_logs")) || !filepath.IsAbs(p) {
		t.Errorf("got %q, want the repository's testdata/apache_logs", p)
	}
	if _, err := resolveLog(DefaultLog, false); err == nil {
		t.Errorf("without search: got nil error from the package directory")
	}
}

func TestBenchInProcessFake(t *testing.T) {
	t.Parallel()
	code, out, stderr := run(t, Deps{InProcess: fakeInProcess(newExact())}, "bench", "--duration", "200ms", "--concurrency", "4", "--keys", "10", "--dist", "zipf", "--limit", "5", "--period", "100ms", "--burst", "2")
	if code != ExitOK {
		t.Fatalf("got exit %d, want 0\n%s%s", code, out, stderr)
	}
	for _, want := range []string{"closed loop, 4 callers, 3 targets", "p99.9", ": ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if stderr != "" {
		t.Errorf("got stderr %q, want none (not a terminal: no progress bar)", stderr)
	}
}

// fakeLimiter answers the gRPC Limiter service for check's tests.
type fakeLimiter struct{ allowed bool }

func (f fakeLimiter) Check(ctx context.Context, c transport.Check) (transport.Result, error) {
	d := algo.Decision{Allowed: f.allowed, Limit: 6, Remaining: 5, ResetAfter: 6 * time.Second}
	if !f.allowed {
		d.Remaining, d.RetryAfter = 0, 2*time.Second
	}
	return transport.Result{Decision: d, Route: transport.RouteForwarded}, nil
}

func startLimiter(t *testing.T, allowed bool) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := transport.NewServer(transport.ServerConfig{}, nil, fakeLimiter{allowed: allowed})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestCheckOverGRPC(t *testing.T) {
	t.Parallel()
	yes, deny := startLimiter(t, true), startLimiter(t, false)
	code, out, _ := run(t, Deps{}, "check", "--addr", yes, "user:1")
	if code != ExitOK || !strings.HasPrefix(out, "allowed  key=user:1 algorithm=gcra limit=6 remaining=5") || !strings.Contains(out, "route=forwarded") {
		t.Errorf("allowed: got exit %d, output %q", code, out)
	}
	code, out, _ = run(t, Deps{}, "check", "--addr", deny, "--json", "--algorithm", "fixed_window", "user:1")
	var got checkJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	want := checkJSON{Key: "user:1", Algorithm: "fixed_window", Limit: 6, RetryAfterNS: int64(2 * time.Second), ResetAfterNS: int64(6 * time.Second), Route: "forwarded"}
	if code != ExitNo || got != want {
		t.Errorf("denied: got exit %d, %+v; want %d, %+v", code, got, ExitNo, want)
	}
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := lis.Addr().String()
	lis.Close()
	if code, _, stderr := run(t, Deps{}, "check", "--addr", dead, "--timeout", "2s", "k"); code != ExitError || !strings.Contains(stderr, "unavailable") {
		t.Errorf("unreachable: got exit %d, stderr %q; want %d and an unavailable error", code, stderr, ExitError)
	}
}

func TestMembers(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/members" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`[{"name":"a","addr":"10.0.0.1:8081","gossip_addr":"10.0.0.1:7946","id":"x1","self":true},{"name":"b","addr":"10.0.0.2:8081","gossip_addr":"10.0.0.2:7946","id":"x2","self":false}]`))
	}))
	defer srv.Close()
	code, out, stderr := run(t, Deps{}, "members", "--addr", strings.TrimPrefix(srv.URL, "http://"))
	if code != ExitOK {
		t.Fatalf("got exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "10.0.0.1:7946") || !strings.HasSuffix(lines[1], "*") {
		t.Errorf("got table:\n%s", out)
	}
	code, out, _ = run(t, Deps{}, "members", "--addr", srv.URL+"/", "--json")
	var ms []member
	if code != ExitOK || json.Unmarshal([]byte(out), &ms) != nil || len(ms) != 2 || ms[1].Name != "b" {
		t.Errorf("--json: got exit %d, %q", code, out)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	if code, _, stderr := run(t, Deps{}, "members", "--addr", bad.URL); code != ExitError || !strings.Contains(stderr, "503") {
		t.Errorf("503: got exit %d, stderr %q", code, stderr)
	}
}

// TestHelpListsOnlyAcceptedFlags is issue 13's second point: demo runs every
// algorithm, so its --help must not offer --algorithm.
func TestHelpListsOnlyAcceptedFlags(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, Deps{}, "demo", "--help")
	if code != ExitOK || !strings.Contains(out, "--limit") {
		t.Fatalf("demo --help: got exit %d, output:\n%s", code, out)
	}
	if strings.Contains(out, "--algorithm") {
		t.Errorf("demo --help lists --algorithm, which demo does not accept:\n%s", out)
	}
	for _, c := range []string{"replay", "bench", "check"} {
		if _, out, _ := run(t, Deps{}, c, "--help"); !strings.Contains(out, "--algorithm") {
			t.Errorf("%s --help: got no --algorithm, want it listed", c)
		}
	}
}
