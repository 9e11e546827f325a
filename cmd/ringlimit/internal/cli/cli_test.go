package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/inprocess"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/transport"
	"github.com/ringlimit/ringlimit/transport/pki"
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

func (c *exactCluster) Check(ctx context.Context, chk node.Check) (node.Decision, error) {
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
		return node.Decision{}, err
	}
	if c.n == c.flipN {
		d.Allowed = !d.Allowed
	}
	return node.Decision{Decision: d, Route: node.RouteOwner, Owner: "fake-0"}, nil
}

func fakeInProcess(c target.Checker) InProcessFunc {
	return func(ctx context.Context, o inprocess.Options) ([]target.Target, func() error, error) {
		var ts []target.Target
		for i := range o.Nodes {
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
		{[]string{"replay", "--algorithm", "leaky"}, `--algorithm: field algorithm value "leaky": must be one of sliding_window_log, `},
		{[]string{"replay", "--limit", "0"}, "--limit/--period/--burst for gcra: field limit value 0: must be > 0"},
		{[]string{"bench", "--period", "-1s"}, "field period value -1000000000 ns"},
		{[]string{"check", "k", "--period", "10000000h"}, `"10000000h" is longer than the maximum 2562047h47m16.854775807s`},
		{[]string{"bench", "--algorithm", "token_bucket", "--burst", "0"}, "--limit/--period/--burst for token_bucket: field burst value 0"},
		{[]string{"bench", "--hits", "-1"}, "--hits"},
		{[]string{"bench", "--dist", "pareto"}, "--dist"},
		{[]string{"bench", "--dist", "zipf", "--zipf-s", "1"}, "--zipf-s 1: must be > 1"},
		{[]string{"bench", "--duration", "0s"}, "--duration 0s"},
		{[]string{"bench", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"bench", "--addr", "127.0.0.1:1", "--nodes", "5"}, "--addr sends to daemons"},
		{[]string{"bench", "--target", "k8s"}, `--target "k8s"`},
		{[]string{"replay", "--nodes", "0"}, "--nodes 0"},
		{[]string{"replay", "--log", "/nonexistent/log"}, "/nonexistent/log"},
		{[]string{"replay", "--addr", "127.0.0.1:1", "--insecure", "--token", "x"}, "--insecure excludes --token"},
		{[]string{"replay", "--addr", "127.0.0.1:1", "--certs-dir", "/nonexistent"}, "--certs-dir: open /nonexistent/ca.crt"},
		{[]string{"check", "k", "--addr", "127.0.0.1:1", "--certs-dir", "/nonexistent"}, "pass --insecure for a daemon run with --insecure"},
		{[]string{"cert", "create-ca", "--certs-dir", "/tmp/x"}, "--ca-key: required"},
		{[]string{"cert", "create-node", "n", "--ca-key", "k"}, "--host: at least one"},
		{[]string{"cert", "create-node", "bad/name", "--host", "h", "--ca-key", "k"}, "NAME: pki: invalid input"},
		{[]string{"demo", "--algorithm", "gcra"}, "unknown flag: --algorithm"},
		{[]string{"check"}, "accepts 1 arg"},
		{[]string{"check", "k", "--algorithm", "x"}, "--algorithm"},
		{[]string{"members", "--insecure", "--addr", "ftp://x"}, "want host:port or an http(s) URL"},
		{[]string{"bench", "--no-such-flag"}, "unknown flag"},
		{[]string{"bench", "--dist", "hot", "--hot-share", "0"}, "--hot-share 0: want a share in (0, 1]"},
		{[]string{"bench", "--dist", "hot", "--hot-share", "1.5"}, "--hot-share 1.5: want a share in (0, 1]"},
		{[]string{"bench", "--dist", "hot", "--hot-share", "NaN"}, "--hot-share NaN: want a share in (0, 1]"},
		{[]string{"bench", "--dist", "hot", "--hot-keys", "0"}, "--hot-keys 0: want 1..1000 (--keys)"},
		{[]string{"bench", "--dist", "hot", "--keys", "10", "--hot-keys", "11"}, "--hot-keys 11: want 1..10 (--keys)"},
		{[]string{"bench", "--hot-keys", "3"}, "--hot-keys and --hot-share apply to --dist hot, not --dist uniform"},
		{[]string{"bench", "--zipf-s", "1.5"}, "--zipf-s applies to --dist zipf, not --dist uniform"},
		{[]string{"bench", "--dist", "hot", "--zipf-s", "1.5"}, "--zipf-s applies to --dist zipf, not --dist hot"},
		{[]string{"bench", "--dist", "zipf", "--hot-share", "0.5"}, "apply to --dist hot, not --dist zipf"},
		{[]string{"bench", "--replication", "eventual"}, `--replication "eventual": want off, async or sync`},
		{[]string{"bench", "--addr", "127.0.0.1:1", "--replication", "off"}, "excludes --target, --nodes, --replication and --leases"},
		{[]string{"bench", "--addr", "127.0.0.1:1", "--leases", "1024"}, "excludes --target, --nodes, --replication and --leases"},
		{[]string{"bench", "--redis", "redis://127.0.0.1:1/0", "--replication", "off"}, "--redis sends to Redis"},
		{[]string{"replay", "--replication", "on"}, `--replication "on"`},
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

// TestBenchHotAndReplication: --dist hot and --replication are accepted, the
// replication reaches the in-process cluster (async when not given, as a
// node's default), and the report names the distribution and has one row per
// target.
func TestBenchHotAndReplication(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		flags []string
		want  node.Replication
	}{
		{nil, node.ReplicationAsync},
		{[]string{"--replication", "off"}, node.ReplicationOff},
		{[]string{"--replication", "sync"}, node.ReplicationSync},
		{[]string{"--replication", "async"}, node.ReplicationAsync},
	} {
		var mu sync.Mutex
		var got []inprocess.Options
		fake := fakeInProcess(newExact())
		deps := Deps{InProcess: func(ctx context.Context, o inprocess.Options) ([]target.Target, func() error, error) {
			mu.Lock()
			got = append(got, o)
			mu.Unlock()
			return fake(ctx, o)
		}}
		args := append([]string{"bench", "--duration", "100ms", "--concurrency", "4", "--nodes", "2", "--dist", "hot", "--hot-keys", "2", "--hot-share", "0.5", "--limit", "1000", "--period", "1s", "--burst", "10"}, tt.flags...)
		code, out, stderr := run(t, deps, args...)
		if code != ExitOK {
			t.Fatalf("%v: got exit %d, want 0\n%s%s", tt.flags, code, out, stderr)
		}
		if len(got) != 1 || got[0] != (inprocess.Options{Nodes: 2, Replication: tt.want}) {
			t.Errorf("%v: got in-process options %+v, want one start of 2 nodes with replication %v", tt.flags, got, tt.want)
		}
		for _, want := range []string{"hot (50% of checks to the first 2 keys", "per target  decided", "fake-0", "fake-1"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: output lacks %q:\n%s", tt.flags, want, out)
			}
		}
	}
}

// TestBenchPrefillFlag: --prefill sends every key a check before the timed
// phase and reports it.
func TestBenchPrefillFlag(t *testing.T) {
	t.Parallel()
	code, out, stderr := run(t, Deps{InProcess: fakeInProcess(newExact())}, "bench", "--prefill", "--duration", "100ms", "--concurrency", "4", "--keys", "50", "--limit", "5", "--period", "1h")
	if code != ExitOK {
		t.Fatalf("got exit %d, want 0\n%s%s", code, out, stderr)
	}
	for _, want := range []string{"prefill            50 keys", "50 decided", "50 used", ": ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// fakeLimiter answers the gRPC Limiter service for check's tests.
type fakeLimiter struct{ allowed bool }

func (f fakeLimiter) Check(ctx context.Context, c node.Check) (node.Decision, error) {
	d := algo.Decision{Allowed: f.allowed, Limit: 6, Remaining: 5, ResetAfter: 6 * time.Second}
	if !f.allowed {
		d.Remaining, d.RetryAfter = 0, 2*time.Second
	}
	return node.Decision{Decision: d, Route: node.RouteForwarded}, nil
}

// secureDir is a certs directory made with `ringlimit cert`: ca.crt, a node
// certificate for 127.0.0.1 (what a daemon serves), a client certificate
// "root", and a token file.
type secureDir struct {
	dir, caKey, token, tokenFile string
	serverTLS                    *tls.Config
}

func newSecureDir(t *testing.T) *secureDir {
	t.Helper()
	s := &secureDir{dir: t.TempDir(), token: "cli-Gx4Rt8Lq2Zw7Mk9Vn3Bp6Hc"}
	s.caKey = filepath.Join(t.TempDir(), "ca.key")
	nodeDir := filepath.Join(s.dir, "node")
	for _, args := range [][]string{
		{"cert", "create-ca", "--certs-dir", s.dir, "--ca-key", s.caKey},
		{"cert", "create-client", "root", "--certs-dir", s.dir, "--ca-key", s.caKey},
	} {
		if code, out, stderr := run(t, Deps{}, args...); code != ExitOK {
			t.Fatalf("%q: exit %d %s%s", args, code, out, stderr)
		}
	}
	if err := os.MkdirAll(nodeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(s.dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nodeDir, "ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := run(t, Deps{}, "cert", "create-node", "d1", "--host", "127.0.0.1,localhost", "--certs-dir", nodeDir, "--ca-key", s.caKey); code != ExitOK {
		t.Fatalf("create-node: exit %d %s%s", code, out, stderr)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(nodeDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if s.serverTLS, err = pki.ServerTLS(read("ca.crt"), read("node.crt"), read("node.key")); err != nil {
		t.Fatal(err)
	}
	s.tokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(s.tokenFile, []byte("# mine\n"+s.token+",cli\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// authorized reports whether a caller presented the client certificate
// "root" (verified by the TLS handshake) or the bearer token.
func (s *secureDir) authorized(cs *tls.ConnectionState, authz string) bool {
	if cs != nil && len(cs.VerifiedChains) > 0 {
		if name, ok := pki.ClientName(cs.VerifiedChains[0][0]); ok && name == "root" {
			return true
		}
	}
	return authz == "Bearer "+s.token
}

// startLimiter serves fakeLimiter over gRPC: TLS with the node certificate of
// sec and its caller check when sec is not nil, plaintext otherwise.
func startLimiter(t *testing.T, allowed bool, sec *secureDir) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := transport.ServerConfig{}
	if sec != nil {
		cfg.TLS = sec.serverTLS
		cfg.ServerOptions = []grpc.ServerOption{grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			var cs *tls.ConnectionState
			if p, ok := peer.FromContext(ctx); ok {
				if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
					cs = &ti.State
				}
			}
			md, _ := metadata.FromIncomingContext(ctx)
			var authz string
			if v := md.Get("authorization"); len(v) > 0 {
				authz = v[0]
			}
			if !sec.authorized(cs, authz) {
				return nil, status.Error(codes.Unauthenticated, "who are you")
			}
			return h(ctx, req)
		})}
	}
	s := transport.NewLimiterServer(cfg, node.LimiterHandler(fakeLimiter{allowed: allowed}))
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestCheckOverGRPC(t *testing.T) {
	t.Parallel()
	sec := newSecureDir(t)
	yes, deny := startLimiter(t, true, sec), startLimiter(t, false, sec)
	code, out, stderr := run(t, Deps{}, "check", "--addr", yes, "--certs-dir", sec.dir, "user:1")
	if code != ExitOK || !strings.HasPrefix(out, "allowed  key=user:1 algorithm=gcra limit=6 remaining=5") || !strings.Contains(out, "route=forwarded") {
		t.Errorf("allowed: got exit %d, output %q %s", code, out, stderr)
	}
	code, out, _ = run(t, Deps{}, "check", "--addr", deny, "--certs-dir", sec.dir, "--json", "--algorithm", "fixed_window", "user:1")
	var got checkJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	want := checkJSON{Key: "user:1", Algorithm: "fixed_window", Limit: 6, RetryAfterNS: int64(2 * time.Second), ResetAfterNS: int64(6 * time.Second), Route: "forwarded"}
	if code != ExitNo || got != want {
		t.Errorf("denied: got exit %d, %+v; want %d, %+v", code, got, ExitNo, want)
	}
	// A token instead of the certificate: a certs dir with only ca.crt.
	caOnly := t.TempDir()
	ca, _ := os.ReadFile(filepath.Join(sec.dir, "ca.crt"))
	os.WriteFile(filepath.Join(caOnly, "ca.crt"), ca, 0o644)
	for _, args := range [][]string{{"--token-file", sec.tokenFile}, {"--token", sec.token}} {
		if code, out, stderr := run(t, Deps{}, append([]string{"check", "--addr", yes, "--certs-dir", caOnly, "k"}, args...)...); code != ExitOK {
			t.Errorf("token %q: got exit %d %s%s, want 0", args[0], code, out, stderr)
		}
	}
	if code, _, stderr := run(t, Deps{}, "check", "--addr", yes, "--certs-dir", caOnly, "k"); code != ExitError || !strings.Contains(stderr, "no credential") {
		t.Errorf("no credential: got exit %d %q, want 2 naming the missing credential", code, stderr)
	}
	if code, _, stderr := run(t, Deps{}, "check", "--addr", yes, "--certs-dir", caOnly, "--token", "wrong-token-xxxxxxxxxx", "k"); code != ExitError || !strings.Contains(stderr, "Unauthenticated") {
		t.Errorf("wrong token: got exit %d %q, want 2 and Unauthenticated", code, stderr)
	}
	if code, _, _ := run(t, Deps{}, "check", "--addr", yes, "--insecure", "--timeout", "2s", "k"); code != ExitError {
		t.Errorf("--insecure against a TLS daemon: got exit %d, want 2", code)
	}
	plain := startLimiter(t, true, nil)
	if code, out, stderr := run(t, Deps{}, "check", "--addr", plain, "--insecure", "k"); code != ExitOK {
		t.Errorf("--insecure against an insecure daemon: got exit %d %s%s", code, out, stderr)
	}
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := lis.Addr().String()
	lis.Close()
	if code, _, stderr := run(t, Deps{}, "check", "--addr", dead, "--insecure", "--timeout", "2s", "k"); code != ExitError || !strings.Contains(stderr, "Unavailable") {
		t.Errorf("unreachable: got exit %d, stderr %q; want %d and an unavailable error", code, stderr, ExitError)
	}
}

func TestMembers(t *testing.T) {
	t.Parallel()
	sec := newSecureDir(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !sec.authorized(r.TLS, r.Header.Get("Authorization")) {
			http.Error(w, `{"error":"unauthenticated"}`, http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/v1/members" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`[{"name":"a","addr":"10.0.0.1:7947","gossip_addr":"10.0.0.1:7946","id":"x1","self":true,"state":"alive"},` +
			`{"name":"b","addr":"10.0.0.2:7947","gossip_addr":"10.0.0.2:7946","id":"x2","self":false,"state":"refused","reason":"certificate from another CA"}]`))
	}))
	srv.TLS = sec.serverTLS
	srv.StartTLS()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "https://")
	code, out, stderr := run(t, Deps{}, "members", "--addr", addr, "--certs-dir", sec.dir)
	if code != ExitOK {
		t.Fatalf("got exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "10.0.0.1:7946") || !strings.Contains(lines[1], "*") ||
		!strings.Contains(lines[2], "refused") || !strings.Contains(lines[2], "certificate from another CA") {
		t.Errorf("got table:\n%s", out)
	}
	code, out, _ = run(t, Deps{}, "members", "--addr", srv.URL+"/", "--certs-dir", sec.dir, "--user", "root", "--json")
	var ms []member
	if code != ExitOK || json.Unmarshal([]byte(out), &ms) != nil || len(ms) != 2 || ms[1].Name != "b" || ms[1].State != "refused" {
		t.Errorf("--json: got exit %d, %q", code, out)
	}
	caOnly := t.TempDir()
	ca, _ := os.ReadFile(filepath.Join(sec.dir, "ca.crt"))
	os.WriteFile(filepath.Join(caOnly, "ca.crt"), ca, 0o644)
	if code, _, stderr := run(t, Deps{}, "members", "--addr", addr, "--certs-dir", caOnly, "--token", "wrong-token-xxxxxxxxxx"); code != ExitError || !strings.Contains(stderr, "401") {
		t.Errorf("wrong token: got exit %d, stderr %q, want 2 naming 401", code, stderr)
	}
	if code, _, stderr := run(t, Deps{}, "members", "--addr", addr, "--certs-dir", caOnly, "--token-file", sec.tokenFile); code != ExitOK {
		t.Errorf("token file: got exit %d, stderr %q", code, stderr)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	if code, _, stderr := run(t, Deps{}, "members", "--insecure", "--addr", bad.URL); code != ExitError || !strings.Contains(stderr, "503") {
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

// TestCert runs `ringlimit cert` as an operator would: the files it writes,
// their modes, what the certificates name, and the refusal to replace files.
func TestCert(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs")
	caKey := filepath.Join(t.TempDir(), "safe", "ca.key")
	ok := func(args ...string) string {
		t.Helper()
		code, out, stderr := run(t, Deps{}, args...)
		if code != ExitOK {
			t.Fatalf("%q: exit %d %s", args, code, stderr)
		}
		return out
	}
	ok("cert", "create-ca", "--certs-dir", dir, "--ca-key", caKey)
	ok("cert", "create-node", "ringlimit-1", "--host", "ringlimit-1, 10.1.2.3", "--certs-dir", dir, "--ca-key", caKey)
	ok("cert", "create-client", "ops", "--certs-dir", dir, "--ca-key", caKey)
	ok("cert", "create-gossip-key", "--certs-dir", dir)
	for name, mode := range map[string]os.FileMode{
		caKey: 0o600, filepath.Join(dir, "ca.crt"): 0o644, filepath.Join(dir, "node.crt"): 0o644, filepath.Join(dir, "node.key"): 0o600,
		filepath.Join(dir, "client.ops.crt"): 0o644, filepath.Join(dir, "client.ops.key"): 0o600, filepath.Join(dir, "gossip.key"): 0o600,
	} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	nodeCert, err := pki.ParseCertificate(read("node.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := pki.MemberName(nodeCert); !ok || name != "ringlimit-1" || len(nodeCert.DNSNames) != 1 || nodeCert.DNSNames[0] != "ringlimit-1" ||
		len(nodeCert.IPAddresses) != 1 || nodeCert.IPAddresses[0].String() != "10.1.2.3" {
		t.Errorf("node.crt: member %q %v, DNS %v, IP %v", name, ok, nodeCert.DNSNames, nodeCert.IPAddresses)
	}
	if _, _, err := pki.PeerTLS(read("ca.crt"), read("node.crt"), read("node.key")); err != nil {
		t.Errorf("node.crt does not serve a peer port: %v", err)
	}
	clientCert, err := pki.ParseCertificate(read("client.ops.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := pki.ClientName(clientCert); !ok || name != "ops" {
		t.Errorf("client.ops.crt names client %q %v, want ops", name, ok)
	}
	if _, isMember := pki.MemberName(clientCert); isMember {
		t.Errorf("client certificate names a member")
	}
	if key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(read("gossip.key")))); err != nil || len(key) != 32 {
		t.Errorf("gossip.key: %d bytes of base64 (%v), want 32", len(key), err)
	}

	// Existing files are refused, and left as they were; --overwrite replaces.
	before := read("node.key")
	for _, args := range [][]string{
		{"cert", "create-ca", "--certs-dir", dir, "--ca-key", caKey},
		{"cert", "create-node", "ringlimit-1", "--host", "h", "--certs-dir", dir, "--ca-key", caKey},
		{"cert", "create-client", "ops", "--certs-dir", dir, "--ca-key", caKey},
		{"cert", "create-gossip-key", "--certs-dir", dir},
	} {
		code, _, stderr := run(t, Deps{}, args...)
		if code != ExitError || !strings.Contains(stderr, "exists: refusing to replace it (pass --overwrite") {
			t.Errorf("%q again: got exit %d %q, want 2 refusing to replace", args[1], code, stderr)
		}
	}
	if !bytes.Equal(before, read("node.key")) {
		t.Errorf("a refused create-node changed node.key")
	}
	ok("cert", "create-node", "ringlimit-1", "--host", "h", "--certs-dir", dir, "--ca-key", caKey, "--overwrite")
	if bytes.Equal(before, read("node.key")) {
		t.Errorf("--overwrite kept the old node.key")
	}
	if fi, _ := os.Stat(filepath.Join(dir, "node.key")); fi.Mode().Perm() != 0o600 {
		t.Errorf("overwritten node.key: mode %v, want 0600", fi.Mode().Perm())
	}
	// A certificate of another CA's key is refused.
	otherKey := filepath.Join(t.TempDir(), "other.key")
	ok("cert", "create-ca", "--certs-dir", t.TempDir(), "--ca-key", otherKey)
	if code, _, stderr := run(t, Deps{}, "cert", "create-client", "x", "--certs-dir", dir, "--ca-key", otherKey); code != ExitError || !strings.Contains(stderr, "CA key pair") {
		t.Errorf("CA key of another CA: got exit %d %q, want 2", code, stderr)
	}
}

// recordingLimiter answers every check allowed and records it.
type recordingLimiter struct {
	mu     sync.Mutex
	checks []node.Check
}

func (r *recordingLimiter) Check(_ context.Context, c node.Check) (node.Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, c)
	return node.Decision{Decision: algo.Decision{Allowed: true, Limit: 1}, Route: node.RouteOwner}, nil
}

// TestDefaultBurst checks that a check without --burst carries DefaultBurst
// (0), as a missing "burst" over HTTP and burst 0 over gRPC do, and that a
// token bucket without a burst is refused naming the burst.
func TestDefaultBurst(t *testing.T) {
	t.Parallel()
	rec := &recordingLimiter{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := transport.NewLimiterServer(transport.ServerConfig{}, node.LimiterHandler(rec))
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	if code, out, stderr := run(t, Deps{}, "check", "--addr", lis.Addr().String(), "--insecure", "k"); code != ExitOK {
		t.Fatalf("check: exit %d %s%s", code, out, stderr)
	}
	rec.mu.Lock()
	got := rec.checks
	rec.mu.Unlock()
	if len(got) != 1 || got[0].Limit.Burst != DefaultBurst || DefaultBurst != 0 {
		t.Errorf("check without --burst sent %+v, want burst %d (= 0, the HTTP and gRPC default)", got, DefaultBurst)
	}
	if code, _, stderr := run(t, Deps{}, "check", "--addr", lis.Addr().String(), "--insecure", "--algorithm", "token_bucket", "k"); code != ExitError || !strings.Contains(stderr, "field burst value 0") {
		t.Errorf("token_bucket without --burst: got exit %d %q, want 2 naming the burst", code, stderr)
	}
	for _, cmd := range []string{"bench", "replay"} {
		c := NewRoot(io.Discard, io.Discard, Deps{})
		sub, _, err := c.Find([]string{cmd})
		if err != nil {
			t.Fatal(err)
		}
		if def := sub.Flags().Lookup("burst").DefValue; def != "0" {
			t.Errorf("%s --burst default: got %s, want 0", cmd, def)
		}
	}
}

// TestCertCreateToken: create-token writes "token,NAME" lines of strong
// tokens to <certs-dir>/tokens (0600), appends, refuses a NAME twice, and
// never prints a token.
func TestCertCreateToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	for _, name := range []string{"operator", "billing"} {
		code, stdout, stderr := run(t, Deps{}, "cert", "create-token", name, "--certs-dir", dir)
		if code != ExitOK {
			t.Fatalf("create-token %s: exit %d %s", name, code, stderr)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
			tok, _, _ := strings.Cut(line, ",")
			if strings.Contains(stdout+stderr, tok) {
				t.Errorf("create-token printed the token")
			}
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("tokens: got %d lines, want 2: %q", len(lines), b)
	}
	for i, want := range []string{"operator", "billing"} {
		tok, name, _ := strings.Cut(lines[i], ",")
		if name != want || len(tok) != 43 || pki.TokenBits(tok) < pki.MinTokenBits {
			t.Errorf("line %d: name %q, %d characters, %.0f bits; want %s, 43, >= %d", i+1, name, len(tok), pki.TokenBits(tok), want, pki.MinTokenBits)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("tokens: mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if code, _, stderr := run(t, Deps{}, "cert", "create-token", "billing", "--certs-dir", dir); code != ExitError || !strings.Contains(stderr, `already has a token named "billing"`) {
		t.Errorf("create-token billing again: exit %d %q, want refused", code, stderr)
	}
	if code, _, _ := run(t, Deps{}, "cert", "create-token", "billing", "--certs-dir", dir, "--overwrite"); code != ExitOK {
		t.Errorf("--overwrite: exit %d, want 0", code)
	}
	if b, _ := os.ReadFile(path); strings.Count(string(b), "\n") != 1 {
		t.Errorf("after --overwrite: %d lines, want 1", strings.Count(string(b), "\n"))
	}
}
