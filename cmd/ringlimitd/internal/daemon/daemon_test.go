package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/config"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/metrics"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/transport"
	"github.com/ringlimit/ringlimit/transport/pki"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// testToken is listed in every testPKI's token file.
const testToken = "tT5-qW8zRk2Lx9Nv4Bm7Pc3Hs6Jd"

// testPKI is a cluster's security material in a temporary directory, made
// with pki as `ringlimit cert` would: a CA, one certs directory per member
// (ca.crt, node.crt, node.key), a gossip key file, a token file, and TLS
// configurations for callers.
type testPKI struct {
	t          testing.TB
	dir        string
	ca         *nodetest.TestCA
	gossipKey  string
	tokens     string
	certClient *http.Client // presents the client certificate "tester"
	anon       *http.Client // verifies the daemon, presents nothing
	clientTLS  *tls.Config
	anonTLS    *tls.Config
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	ca, err := nodetest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca}
	p.gossipKey = p.write("gossip.key", []byte(base64.StdEncoding.EncodeToString(ca.GossipKey)), 0o600)
	p.tokens = p.write("tokens", []byte("# test tokens\n"+testToken+",tester-token\n"), 0o600)
	cert, key, err := ca.ClientPEM("tester")
	if err != nil {
		t.Fatal(err)
	}
	if p.clientTLS, err = pki.ClientTLS(ca.CertPEM, cert, key); err != nil {
		t.Fatal(err)
	}
	if p.anonTLS, err = pki.ClientTLS(ca.CertPEM, nil, nil); err != nil {
		t.Fatal(err)
	}
	p.certClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: p.clientTLS}}
	p.anon = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: p.anonTLS}}
	t.Cleanup(p.certClient.CloseIdleConnections)
	t.Cleanup(p.anon.CloseIdleConnections)
	return p
}

func (p *testPKI) write(name string, b []byte, mode os.FileMode) string {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(path, b, mode); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// certsDir writes the certs directory of member (certificate naming certName)
// and returns it.
func (p *testPKI) certsDir(member, certName string) string {
	p.t.Helper()
	cert, key, err := p.ca.NodePEM(certName)
	if err != nil {
		p.t.Fatal(err)
	}
	p.write(filepath.Join(member, "ca.crt"), p.ca.CertPEM, 0o644)
	p.write(filepath.Join(member, "node.crt"), cert, 0o644)
	p.write(filepath.Join(member, "node.key"), key, 0o600)
	return filepath.Join(p.dir, member)
}

// args returns the security flags of member.
func (p *testPKI) args(member string) []string {
	return []string{"--certs-dir", p.certsDir(member, member), "--gossip-key-file", p.gossipKey, "--client-token-file", p.tokens}
}

// testConfig is a daemon on loopback with free ports and fast gossip, secure
// under p (nil: --insecure).
func testConfig(t testing.TB, p *testPKI, name string, extra ...string) config.Config {
	t.Helper()
	args := []string{"--node-name", name, "--bind-addr", "127.0.0.1", "--gossip-port", "0", "--grpc-port", "0",
		"--peer-port", "0", "--http-port", "0", "--admin-port", "0", "--gossip-profile", "fast", "--rejoin-interval", "500ms", "--shutdown-timeout", "5s"}
	if p == nil {
		args = append(args, "--insecure")
	} else {
		args = append(args, p.args(name)...)
	}
	c, err := config.Load(append(args, extra...), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startDaemon(t *testing.T, cfg config.Config) *Daemon {
	t.Helper()
	d, err := Start(cfg, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return d
}

// httpDo sends a request with http.DefaultClient (plaintext: the admin port,
// or an insecure daemon).
func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	return httpDoWith(t, http.DefaultClient, method, url, body, "")
}

// httpDoWith sends a request with c and, when authz is not empty, an
// Authorization header; a transport error fails the test.
func httpDoWith(t *testing.T, c *http.Client, method, url, body, authz string) (int, string) {
	t.Helper()
	code, b, err := httpTry(c, method, url, body, authz)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return code, b
}

func httpTry(c *http.Client, method, url, body, authz string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// waitUntil polls cond until it holds or within passes.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSingleNode drives the HTTP API of a real single secure node, as a
// caller with a client certificate.
func TestSingleNode(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	d := startDaemon(t, testConfig(t, p, "solo", "--accept-caller-timestamps"))
	base := "https://" + d.HTTPAddr()
	httpDo := func(t *testing.T, method, url, body string) (int, string) {
		t.Helper()
		if strings.HasPrefix(url, "https:") {
			return httpDoWith(t, p.certClient, method, url, body, "")
		}
		return httpDoWith(t, http.DefaultClient, method, url, body, "")
	}
	admin := "http://" + d.AdminAddr()
	waitUntil(t, 5*time.Second, "readyz", func() bool { c, _ := httpDo(t, "GET", admin+"/readyz", ""); return c == 200 })

	if code, _ := httpDo(t, "GET", admin+"/healthz", ""); code != 200 {
		t.Errorf("/healthz: got %d, want 200", code)
	}

	// redis-cell: CL.THROTTLE user123 15 30 60 on a fresh key -> 0, 16, 15, -1, 2.
	code, body := httpDo(t, "POST", base+"/v1/check",
		`{"key":"user123","algorithm":"gcra","limit":30,"period":"60s","burst":15,"created_at_unix_ns":1700000000000000000}`)
	if code != 200 {
		t.Fatalf("good check: got %d %s, want 200", code, body)
	}
	var dec struct {
		Allowed      bool   `json:"allowed"`
		Limit        int64  `json:"limit"`
		Remaining    int64  `json:"remaining"`
		RetryAfterNS int64  `json:"retry_after_ns"`
		ResetAfterNS int64  `json:"reset_after_ns"`
		Route        string `json:"route"`
		Owner        string `json:"owner"`
	}
	if err := json.Unmarshal([]byte(body), &dec); err != nil {
		t.Fatal(err)
	}
	if !dec.Allowed || dec.Limit != 16 || dec.Remaining != 15 || dec.RetryAfterNS != 0 || dec.ResetAfterNS != int64(2*time.Second) ||
		dec.Route != "owner" || dec.Owner != "solo" {
		t.Errorf("good check: got %s, want allowed 16/15, reset 2s, route owner, owner solo", body)
	}

	bad := []struct {
		method, body string
		status       int
		want         string
	}{
		{"GET", "", 405, "method GET"},
		{"POST", `{"key":`, 400, "malformed JSON"},
		{"POST", `{"key":"k","algorithm":"gcra","limit":1,"period":"1s","colour":1}`, 400, `unknown field \"colour\"`},
		{"POST", `{"key":"k","algorithm":"bucket","limit":1,"period":"1s"}`, 400, `field algorithm value \"bucket\"`},
		{"POST", `{"key":"k","algorithm":"gcra","limit":-1,"period":"1s"}`, 400, "field limit value -1: must be > 0"},
		// Valid JSON, refused by algo: a token bucket needs burst >= 1.
		{"POST", `{"key":"k","algorithm":"token_bucket","limit":1,"period":"1s","burst":0}`, 400, "field burst value 0"},
		// Refused by algo: the emission interval is below 1 ns.
		{"POST", `{"key":"k","algorithm":"gcra","limit":1000,"period_ns":10}`, 400, "field limit value 1000"},
		{"POST", `{"key":"` + strings.Repeat("k", 2000) + `","algorithm":"gcra","limit":1,"period":"1s"}`, 400, "key"},
		{"POST", `{"key":"` + strings.Repeat("k", 70000) + `"}`, 413, "larger than"},
	}
	for _, b := range bad {
		code, body := httpDo(t, b.method, base+"/v1/check", b.body)
		// Internal package names stay in the logs, out of client answers.
		if code != b.status || !strings.Contains(body, b.want) || !strings.HasPrefix(body, `{"error":`) ||
			strings.Contains(body, "algo:") || strings.Contains(body, "transport:") {
			t.Errorf("%s %.60s: got %d %.200s, want %d with %q", b.method, b.body, code, body, b.status, b.want)
		}
	}
	// Still serving after the bad requests.
	if code, body := httpDo(t, "POST", base+"/v1/check", `{"key":"k2","algorithm":"fixed_window","limit":2,"period":"1m","hits":0}`); code != 200 {
		t.Errorf("check after bad requests: got %d %s, want 200", code, body)
	}

	code, body = httpDo(t, "GET", base+"/v1/members", "")
	if code != 200 || !strings.Contains(body, `"name":"solo"`) || !strings.Contains(body, `"self":true`) {
		t.Errorf("/v1/members: got %d %s", code, body)
	}

	code, body = httpDo(t, "GET", admin+"/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: got %d", code)
	}
	// ForwardSeconds has a series per peer: none on a single node.
	for _, name := range []string{metrics.ChecksTotal, metrics.ForwardBatchSize, metrics.KeysResident,
		metrics.FallbackKeysResident, metrics.Members, metrics.HandoffsTotal, metrics.HandoffKeysTotal, metrics.EvictionsTotal} {
		if !strings.Contains(body, "# TYPE "+name+" ") {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	for _, line := range []string{
		`ringlimit_checks_total{algorithm="gcra",result="allowed",route="owner"} 1`,
		`ringlimit_checks_total{algorithm="fixed_window",result="allowed",route="owner"} 1`,
		`ringlimit_members 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	// user123 is held; whether the peek on k2 stored a state is node's business.
	if !regexp.MustCompile(`(?m)^ringlimit_keys_resident [12]$`).MatchString(body) {
		t.Errorf("/metrics: want ringlimit_keys_resident 1 or 2")
	}
}

func TestCallerTimestampRefused(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	d := startDaemon(t, testConfig(t, p, "strict"))
	code, body := httpDoWith(t, p.anon, "POST", "https://"+d.HTTPAddr()+"/v1/check",
		`{"key":"k","algorithm":"gcra","limit":1,"period":"1s","created_at_unix_ns":5}`, "Bearer "+testToken)
	if code != 400 || !strings.Contains(body, "created_at") {
		t.Errorf("caller timestamp without --accept-caller-timestamps: got %d %s, want 400 naming created_at", code, body)
	}
}

// TestTwoDaemons checks that secure daemons joined by --join form a cluster:
// both list two admitted members, and a key reports the same owner through
// either.
func TestTwoDaemons(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	a := startDaemon(t, testConfig(t, p, "a"))
	b := startDaemon(t, testConfig(t, p, "b", "--join", a.Node().GossipAddr()))
	urls := []string{"https://" + a.HTTPAddr(), "https://" + b.HTTPAddr()}
	httpDo := func(t *testing.T, method, url, body string) (int, string) {
		t.Helper()
		if strings.HasPrefix(url, "https:") {
			return httpDoWith(t, p.certClient, method, url, body, "")
		}
		return httpDoWith(t, http.DefaultClient, method, url, body, "")
	}
	adminB := "http://" + b.AdminAddr()
	waitUntil(t, 10*time.Second, "both list two members", func() bool {
		for _, u := range urls {
			_, body := httpDo(t, "GET", u+"/v1/members", "")
			if strings.Count(body, `"name":`) != 2 || strings.Count(body, `"state":"alive"`) != 2 {
				return false
			}
		}
		return true
	})
	waitUntil(t, 10*time.Second, "b ready", func() bool { c, _ := httpDo(t, "GET", adminB+"/readyz", ""); return c == 200 })
	routes := map[string]int{}
	for i := range 20 {
		var owners []string
		for _, u := range urls {
			code, body := httpDo(t, "POST", u+"/v1/check", fmt.Sprintf(`{"key":"k%d","algorithm":"sliding_window_counter","limit":100,"period":"1m"}`, i))
			var r struct{ Route, Owner string }
			if code != 200 || json.Unmarshal([]byte(body), &r) != nil {
				t.Fatalf("check: got %d %s", code, body)
			}
			routes[r.Route]++
			owners = append(owners, r.Owner)
		}
		if owners[0] != owners[1] {
			t.Errorf("key k%d: owners %v differ", i, owners)
		}
	}
	if routes["owner"] == 0 || routes["forwarded"] == 0 {
		t.Errorf("routes %v: want both owner and forwarded", routes)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader in two goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMainLifecycle runs Main as the binary does: environment and flags, ready,
// then a cancelled context (SIGTERM) makes it stop gracefully with status 0.
func TestMainLifecycle(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	env := map[string]string{
		"RINGLIMIT_NODE_NAME": "main-test", "RINGLIMIT_BIND_ADDR": "127.0.0.1", "RINGLIMIT_GOSSIP_PORT": "0",
		"RINGLIMIT_GRPC_PORT": "0", "RINGLIMIT_PEER_PORT": "0", "RINGLIMIT_ADMIN_PORT": "0",
		"RINGLIMIT_HTTP_PORT":       "1", // overridden by the flag below
		"RINGLIMIT_CERTS_DIR":       p.certsDir("main-test", "main-test"),
		"RINGLIMIT_GOSSIP_KEY_FILE": p.gossipKey,
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"--http-port", "0", "--log-level", "debug"}, lookup, io.Discard, &stderr)
	}()

	var addr string
	re := regexp.MustCompile(`"msg":"started".*"admin":"([^"]+)"`)
	waitUntil(t, 10*time.Second, "started log line", func() bool {
		m := re.FindStringSubmatch(stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	if !strings.Contains(stderr.String(), `"node":"main-test"`) || !strings.Contains(stderr.String(), `"insecure":false`) {
		t.Errorf("log lacks the node name from RINGLIMIT_NODE_NAME or insecure false:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "INSECURE") {
		t.Errorf("a secure daemon logged the insecure warning:\n%s", stderr.String())
	}
	waitUntil(t, 5*time.Second, "healthcheck passes", func() bool {
		return Main(ctx, []string{"healthcheck", "--url", "http://" + addr + "/readyz"}, lookup, io.Discard, io.Discard) == ExitOK
	})
	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Errorf("exit status after cancel: got %d, want 0\n%s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Main did not return within 15 s of the cancel")
	}
	if !strings.Contains(stderr.String(), `"msg":"stopped"`) {
		t.Errorf("log lacks the stopped line:\n%s", stderr.String())
	}
	if Main(context.Background(), []string{"healthcheck", "--url", "http://" + addr + "/readyz", "--timeout", "1s"}, lookup, io.Discard, io.Discard) != ExitFailure {
		t.Errorf("healthcheck after stop: want exit 1")
	}
}

func TestMainUsageErrors(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	freePorts := []string{"--http-port", "0", "--grpc-port", "0", "--peer-port", "0", "--admin-port", "0", "--gossip-port", "0", "--bind-addr", "127.0.0.1"}
	none := func(string) (string, bool) { return "", false }
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--nope"}, nil, "unknown flag: --nope"},
		{[]string{"--http-port", "x"}, nil, "http-port"},
		{[]string{"--owner-unreachable", "maybe"}, nil, "--owner-unreachable"},
		{nil, map[string]string{"RINGLIMIT_MAX_KEYS": "-3"}, "--max-keys (RINGLIMIT_MAX_KEYS) = -3"},
		{nil, map[string]string{"RINGLIMIT_GOSSIP_PORT": "lots"}, "RINGLIMIT_GOSSIP_PORT"},
		{[]string{"--gossip-key-file", "/nonexistent/key", "--certs-dir", p.certsDir("n", "n"), "--node-name", "n", "--http-port", "0",
			"--grpc-port", "0", "--peer-port", "0", "--admin-port", "0", "--gossip-port", "0", "--bind-addr", "127.0.0.1"}, nil, "--gossip-key-file"},
		// Secure by default: no material and no --insecure is a refused start.
		{[]string{"--node-name", "n"}, nil, "needs --certs-dir (RINGLIMIT_CERTS_DIR) and --gossip-key-file"},
		{[]string{"--insecure", "--certs-dir", "x"}, nil, "--insecure with --certs-dir"},
		// A certificate that names another member.
		{append([]string{"--node-name", "n2", "--certs-dir", p.certsDir("n2", "someone-else"), "--gossip-key-file", p.gossipKey}, freePorts...), nil,
			`node.crt names member "someone-else", not --node-name "n2"`},
		{append([]string{"--node-name", "n3", "--certs-dir", filepath.Join(p.dir, "empty"), "--gossip-key-file", p.gossipKey}, freePorts...), nil,
			"--certs-dir: open"},
		{append([]string{"--node-name", "n4", "--certs-dir", p.certsDir("n4", "n4"), "--gossip-key-file", p.gossipKey,
			"--client-token-file", p.write("short-tokens", []byte("# ok\nshort\n"), 0o600)}, freePorts...), nil,
			"short-tokens: auth: invalid token file: line 2: token of 5 bytes, want at least 16"},
		{[]string{"serve"}, nil, `unknown command "serve"`},
	}
	for _, tt := range tests {
		lookup := none
		if tt.env != nil {
			lookup = func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
		}
		var stderr bytes.Buffer
		code := Main(context.Background(), tt.args, lookup, io.Discard, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("Main(%q, %v): got %d %q, want 2 and %q", tt.args, tt.env, code, stderr.String(), tt.want)
		}
	}
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, none, &out, io.Discard); code != ExitOK || !strings.Contains(out.String(), "--accept-caller-timestamps") {
		t.Errorf("--help: got %d, want 0 and the flags", code)
	}
}

func TestHealthcheck(t *testing.T) {
	t.Parallel()
	status := 200
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	none := func(string) (string, bool) { return "", false }
	if code := Main(context.Background(), []string{"healthcheck", "--url", srv.URL}, none, io.Discard, io.Discard); code != ExitOK {
		t.Errorf("200: got exit %d, want 0", code)
	}
	mu.Lock()
	status = 503
	mu.Unlock()
	var stderr bytes.Buffer
	if code := Main(context.Background(), []string{"healthcheck", "--url", srv.URL}, none, io.Discard, &stderr); code != ExitFailure || !strings.Contains(stderr.String(), "503") {
		t.Errorf("503: got exit %d %q, want 1 naming 503", code, stderr.String())
	}
	// The default URL follows RINGLIMIT_ADMIN_PORT, and RINGLIMIT_HEALTHCHECK_URL wins.
	port := srv.Listener.Addr().(interface{ String() string }).String()
	port = port[strings.LastIndex(port, ":")+1:]
	mu.Lock()
	status = 200
	mu.Unlock()
	env := func(k string) (string, bool) {
		if k == "RINGLIMIT_ADMIN_PORT" {
			return port, true
		}
		return "", false
	}
	if code := Main(context.Background(), []string{"healthcheck"}, env, io.Discard, io.Discard); code != ExitOK {
		t.Errorf("default URL on RINGLIMIT_ADMIN_PORT: got exit %d, want 0", code)
	}
	env2 := func(k string) (string, bool) {
		if k == "RINGLIMIT_HEALTHCHECK_URL" {
			return "http://127.0.0.1:1/readyz", true
		}
		return env(k)
	}
	if code := Main(context.Background(), []string{"healthcheck", "--timeout", "1s"}, env2, io.Discard, io.Discard); code != ExitFailure {
		t.Errorf("RINGLIMIT_HEALTHCHECK_URL to a closed port: got exit %d, want 1", code)
	}
}

// TestClientPortsRefuseUnauthenticated attacks a secure daemon's client ports
// the way the issue did: plaintext, no credential, a wrong token, a client
// certificate from another CA and a member's certificate are all refused on
// HTTP and gRPC, and a Peer RPC on the client gRPC port is Unimplemented even
// for an authenticated caller. The admin port answers only GET.
func TestClientPortsRefuseUnauthenticated(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	d := startDaemon(t, testConfig(t, p, "guarded"))
	checkBody := `{"key":"k","algorithm":"gcra","limit":10,"period":"1s"}`
	url := "https://" + d.HTTPAddr() + "/v1/check"

	// A second CA: its client certificate must not get in.
	other, err := nodetest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	fcert, fkey, err := other.ClientPEM("tester")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := tls.X509KeyPair(fcert, fkey)
	if err != nil {
		t.Fatal(err)
	}
	foreignTLS := p.anonTLS.Clone()
	foreignTLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreign, nil }
	// A member's certificate from the right CA: a peer identity, not a caller.
	mcert, mkey, err := p.ca.NodePEM("guarded")
	if err != nil {
		t.Fatal(err)
	}
	memberTLS, err := pki.ClientTLS(p.ca.CertPEM, mcert, mkey)
	if err != nil {
		t.Fatal(err)
	}
	client := func(c *tls.Config) *http.Client {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: c}}
		t.Cleanup(hc.CloseIdleConnections)
		return hc
	}

	// HTTP.
	if code, body := httpDoWith(t, p.certClient, "POST", url, checkBody, ""); code != 200 {
		t.Errorf("client certificate: got %d %s, want 200", code, body)
	}
	if code, body := httpDoWith(t, p.anon, "POST", url, checkBody, "Bearer "+testToken); code != 200 {
		t.Errorf("bearer token: got %d %s, want 200", code, body)
	}
	if code, body, err := httpTry(http.DefaultClient, "POST", "http://"+d.HTTPAddr()+"/v1/check", checkBody, "Bearer "+testToken); err == nil && code != 400 {
		t.Errorf("plaintext HTTP to the client port: got %d %s, want refused", code, body)
	}
	for _, c := range []struct {
		name  string
		hc    *http.Client
		authz string
		want  string
	}{
		{"no credential", p.anon, "", "no client certificate and no bearer token"},
		{"wrong token", p.anon, "Bearer " + strings.Repeat("x", 26), "unknown bearer token"},
		{"basic auth", p.anon, "Basic dGVzdGVyOnB3", `Bearer <token>`},
		{"member certificate", client(memberTLS), "", "not a client certificate"},
	} {
		for _, path := range []string{"/v1/check", "/v1/members"} {
			method := "POST"
			if path == "/v1/members" {
				method = "GET"
			}
			code, body := httpDoWith(t, c.hc, method, "https://"+d.HTTPAddr()+path, checkBody, c.authz)
			if code != http.StatusUnauthorized || !strings.Contains(body, c.want) || !strings.HasPrefix(body, `{"error":`) {
				t.Errorf("%s %s: got %d %s, want 401 with %q", c.name, path, code, body, c.want)
			}
		}
	}
	if code, body, err := httpTry(client(foreignTLS), "POST", url, checkBody, ""); err == nil {
		t.Errorf("client certificate from another CA: got %d %s, want a failed TLS handshake", code, body)
	}

	// gRPC.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	chk := transport.Check{Key: "g", Limit: algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second}, Hits: 1}
	grpcCheck := func(tlsCfg *tls.Config, token string) error {
		c, err := transport.Dial(d.GRPCAddr(), tlsCfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cctx := ctx
		if token != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		_, err = c.Check(cctx, chk)
		return err
	}
	if err := grpcCheck(p.clientTLS, ""); err != nil {
		t.Errorf("gRPC with a client certificate: %v", err)
	}
	if err := grpcCheck(p.anonTLS, testToken); err != nil {
		t.Errorf("gRPC with a bearer token: %v", err)
	}
	if err := grpcCheck(nil, testToken); err == nil {
		t.Errorf("plaintext gRPC to the client port: got nil error, want refused")
	}
	for _, c := range []struct {
		name  string
		tls   *tls.Config
		token string
	}{{"no credential", p.anonTLS, ""}, {"wrong token", p.anonTLS, strings.Repeat("y", 26)}, {"member certificate", memberTLS, ""}} {
		if err := grpcCheck(c.tls, c.token); status.Code(err) != codes.Unauthenticated {
			t.Errorf("gRPC %s: got %v, want Unauthenticated", c.name, err)
		}
	}
	if err := grpcCheck(foreignTLS, ""); err == nil || status.Code(err) == codes.OK {
		t.Errorf("gRPC with a client certificate from another CA: got %v, want a failed handshake", err)
	}

	// The Peer service is not on the client port, even for an authenticated caller.
	conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(p.clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	peer := pb.NewPeerClient(conn)
	if _, err := peer.Transfer(ctx, &pb.TransferRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Peer.Transfer on the client gRPC port: got %v, want Unimplemented", err)
	}
	if _, err := peer.Forward(ctx, &pb.ForwardRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Peer.Forward on the client gRPC port: got %v, want Unimplemented", err)
	}

	// Admin: read-only.
	admin := "http://" + d.AdminAddr()
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if code, body := httpDo(t, "POST", admin+path, "x"); code != http.StatusMethodNotAllowed {
			t.Errorf("POST %s on the admin port: got %d %s, want 405", path, code, body)
		}
	}
	_, metrics := httpDo(t, "GET", admin+"/metrics", "")
	for _, line := range []string{`ringlimit_auth_failures_total{listener="http"} 8`, `ringlimit_auth_failures_total{listener="grpc"} 3`, "ringlimit_insecure 0"} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	// The admin port is not the client API.
	if code, _ := httpDo(t, "POST", admin+"/v1/check", checkBody); code != http.StatusNotFound {
		t.Errorf("POST /v1/check on the admin port: got %d, want 404", code)
	}
}

// TestInsecureMode runs Main with --insecure: it starts, warns, and says so on
// /healthz, /readyz and in ringlimit_insecure; the client ports are plaintext
// and open, and Peer RPCs are still not on the client gRPC port.
func TestInsecureMode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"--insecure", "--node-name", "lax", "--bind-addr", "127.0.0.1", "--gossip-port", "0", "--grpc-port", "0",
			"--peer-port", "0", "--http-port", "0", "--admin-port", "0", "--gossip-profile", "fast"}, func(string) (string, bool) { return "", false }, io.Discard, &stderr)
	}()
	var admin, httpAddr, grpcAddr string
	re := regexp.MustCompile(`"msg":"started".*"grpc":"([^"]+)","http":"([^"]+)","admin":"([^"]+)"`)
	waitUntil(t, 10*time.Second, "started log line", func() bool {
		m := re.FindStringSubmatch(stderr.String())
		if m != nil {
			grpcAddr, httpAddr, admin = m[1], m[2], m[3]
		}
		return m != nil
	})
	if !strings.Contains(stderr.String(), `"level":"WARN","msg":"running INSECURE`) {
		t.Errorf("no WARN line about insecure mode:\n%s", stderr.String())
	}
	waitUntil(t, 5*time.Second, "readyz", func() bool { c, _ := httpDo(t, "GET", "http://"+admin+"/readyz", ""); return c == 200 })
	if _, body := httpDo(t, "GET", "http://"+admin+"/readyz", ""); !strings.Contains(body, `"insecure":true`) {
		t.Errorf("/readyz: got %s, want it to say insecure", body)
	}
	if _, body := httpDo(t, "GET", "http://"+admin+"/metrics", ""); !strings.Contains(body, "\nringlimit_insecure 1\n") {
		t.Errorf("/metrics lacks ringlimit_insecure 1")
	}
	if code, body := httpDo(t, "POST", "http://"+httpAddr+"/v1/check", `{"key":"k","algorithm":"gcra","limit":10,"period":"1s"}`); code != 200 {
		t.Errorf("insecure check: got %d %s, want 200", code, body)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if _, err := pb.NewPeerClient(conn).Transfer(rctx, &pb.TransferRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Peer.Transfer on the insecure client gRPC port: got %v, want Unimplemented", err)
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Errorf("exit: got %d, want 0", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Main did not return")
	}
}
