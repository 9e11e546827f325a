package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/config"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/metrics"
)

// testConfig is a daemon on loopback with free ports and fast gossip.
func testConfig(t *testing.T, name string, extra ...string) config.Config {
	t.Helper()
	args := append([]string{"--node-name", name, "--bind-addr", "127.0.0.1", "--gossip-port", "0", "--grpc-port", "0",
		"--peer-port", "0", "--insecure", "--http-port", "0", "--gossip-profile", "fast", "--rejoin-interval", "500ms", "--shutdown-timeout", "5s"}, extra...)
	c, err := config.Load(args, func(string) (string, bool) { return "", false })
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

func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
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

// TestSingleNode drives the HTTP API of a real single node.
func TestSingleNode(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, testConfig(t, "solo", "--accept-caller-timestamps"))
	base := "http://" + d.HTTPAddr()
	waitUntil(t, 5*time.Second, "readyz", func() bool { c, _ := httpDo(t, "GET", base+"/readyz", ""); return c == 200 })

	if code, _ := httpDo(t, "GET", base+"/healthz", ""); code != 200 {
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
		{"POST", `{"key":"k","algorithm":"bucket","limit":1,"period":"1s"}`, 400, "unknown algorithm"},
		{"POST", `{"key":"k","algorithm":"gcra","limit":-1,"period":"1s"}`, 400, `\"limit\" = -1`},
		// Valid JSON, refused by algo: a token bucket needs burst >= 1.
		{"POST", `{"key":"k","algorithm":"token_bucket","limit":1,"period":"1s","burst":0}`, 400, "invalid"},
		// Refused by algo: the emission interval is below 1 ns.
		{"POST", `{"key":"k","algorithm":"gcra","limit":1000,"period_ns":10}`, 400, "invalid"},
		{"POST", `{"key":"` + strings.Repeat("k", 2000) + `","algorithm":"gcra","limit":1,"period":"1s"}`, 400, "key"},
		{"POST", `{"key":"` + strings.Repeat("k", 70000) + `"}`, 413, "larger than"},
	}
	for _, b := range bad {
		code, body := httpDo(t, b.method, base+"/v1/check", b.body)
		if code != b.status || !strings.Contains(body, b.want) || !strings.HasPrefix(body, `{"error":`) {
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

	code, body = httpDo(t, "GET", base+"/metrics", "")
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
	d := startDaemon(t, testConfig(t, "strict"))
	code, body := httpDo(t, "POST", "http://"+d.HTTPAddr()+"/v1/check",
		`{"key":"k","algorithm":"gcra","limit":1,"period":"1s","created_at_unix_ns":5}`)
	if code != 400 || !strings.Contains(body, "created_at") {
		t.Errorf("caller timestamp without --accept-caller-timestamps: got %d %s, want 400 naming created_at", code, body)
	}
}

// TestTwoDaemons checks that daemons joined by --join form a cluster: both list
// two members, and a key reports the same owner through either.
func TestTwoDaemons(t *testing.T) {
	t.Parallel()
	a := startDaemon(t, testConfig(t, "a"))
	b := startDaemon(t, testConfig(t, "b", "--join", a.Node().GossipAddr()))
	urls := []string{"http://" + a.HTTPAddr(), "http://" + b.HTTPAddr()}
	waitUntil(t, 10*time.Second, "both list two members", func() bool {
		for _, u := range urls {
			_, body := httpDo(t, "GET", u+"/v1/members", "")
			if strings.Count(body, `"name":`) != 2 {
				return false
			}
		}
		return true
	})
	waitUntil(t, 10*time.Second, "b ready", func() bool { c, _ := httpDo(t, "GET", urls[1]+"/readyz", ""); return c == 200 })
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
	env := map[string]string{
		"RINGLIMIT_NODE_NAME": "main-test", "RINGLIMIT_BIND_ADDR": "127.0.0.1", "RINGLIMIT_GOSSIP_PORT": "0",
		"RINGLIMIT_GRPC_PORT": "0", "RINGLIMIT_PEER_PORT": "0", "RINGLIMIT_INSECURE": "true",
		"RINGLIMIT_HTTP_PORT": "1", // overridden by the flag below
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
	re := regexp.MustCompile(`"msg":"started".*"http":"([^"]+)"`)
	waitUntil(t, 10*time.Second, "started log line", func() bool {
		m := re.FindStringSubmatch(stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	if !strings.Contains(stderr.String(), `"node":"main-test"`) {
		t.Errorf("log lacks the node name from RINGLIMIT_NODE_NAME:\n%s", stderr.String())
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
		{[]string{"--gossip-key-file", "/nonexistent/key", "--http-port", "0", "--grpc-port", "0", "--gossip-port", "0", "--bind-addr", "127.0.0.1"}, nil, "--gossip-key-file"},
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
	// The default URL follows RINGLIMIT_HTTP_PORT, and RINGLIMIT_HEALTHCHECK_URL wins.
	port := srv.Listener.Addr().(interface{ String() string }).String()
	port = port[strings.LastIndex(port, ":")+1:]
	mu.Lock()
	status = 200
	mu.Unlock()
	env := func(k string) (string, bool) {
		if k == "RINGLIMIT_HTTP_PORT" {
			return port, true
		}
		return "", false
	}
	if code := Main(context.Background(), []string{"healthcheck"}, env, io.Discard, io.Discard); code != ExitOK {
		t.Errorf("default URL on RINGLIMIT_HTTP_PORT: got exit %d, want 0", code)
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
