package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// fake is a Limiter that validates like the node does (node.Check.Validate),
// records the valid checks it receives and answers from a function, so handler
// tests need no cluster.
type fake struct {
	mu     sync.Mutex
	checks []node.Check
	answer func(node.Check) (node.Decision, error)
	ready  bool
}

func (f *fake) Check(_ context.Context, c node.Check) (node.Decision, error) {
	if err := c.Validate(0); err != nil {
		return node.Decision{}, err
	}
	f.mu.Lock()
	f.checks = append(f.checks, c)
	f.mu.Unlock()
	if f.answer != nil {
		return f.answer(c)
	}
	return node.Decision{
		Decision: algo.Decision{Allowed: true, Limit: c.Limit.Limit, Remaining: c.Limit.Limit - c.Hits, ResetAfter: time.Second},
		Route:    node.RouteForwarded,
		Owner:    "node-2",
	}, nil
}

func (f *fake) Members() []Member {
	return []Member{{Name: "node-1", Addr: "127.0.0.1:1", GossipAddr: "127.0.0.1:2", ID: "a", Self: true, State: "admitted"},
		{Name: "node-2", State: "refused", Reason: "certificate names no member"}}
}

func (f *fake) Ready() bool { return f.ready }

func (f *fake) got() []node.Check {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]node.Check(nil), f.checks...)
}

func do(t *testing.T, h http.Handler, method, path, body string) (int, http.Header, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code, w.Header(), w.Body.String()
}

func TestCheckGood(t *testing.T) {
	t.Parallel()
	f := &fake{ready: true}
	h := NewHandler(f, Options{})
	code, hdr, body := do(t, h, http.MethodPost, "/v1/check",
		`{"key":"user:1","algorithm":"gcra","limit":30,"period":"1m","burst":15,"hits":2,"created_at_unix_ns":1700000000000000000}`)
	if code != http.StatusOK {
		t.Fatalf("status: got %d, want 200 (body %s)", code, body)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type: got %q, want application/json", ct)
	}
	var resp CheckResponse
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	want := CheckResponse{Allowed: true, Limit: 30, Remaining: 28, ResetAfterNS: int64(time.Second), Route: "forwarded", Owner: "node-2"}
	if resp != want {
		t.Errorf("response: got %+v, want %+v", resp, want)
	}
	// Every field of the JSON contract is present, even when zero.
	for _, k := range []string{"allowed", "limit", "remaining", "retry_after_ns", "reset_after_ns", "route", "owner"} {
		if !strings.Contains(body, `"`+k+`":`) {
			t.Errorf("body %s lacks %q", body, k)
		}
	}
	gotChecks := f.got()
	wantCheck := node.Check{
		Key:       "user:1",
		Limit:     algo.Limit{Kind: algo.GCRA, Limit: 30, Period: time.Minute, Burst: 15},
		Hits:      2,
		CreatedAt: 1700000000000000000,
	}
	if len(gotChecks) != 1 || gotChecks[0] != wantCheck {
		t.Errorf("checks passed to the node: got %+v, want [%+v]", gotChecks, wantCheck)
	}
}

func TestCheckDefaultsAndPeriodNS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body string
		want node.Check
	}{
		// No "burst": 0, as over gRPC and in the CLI.
		{`{"key":"k","algorithm":"gcra","limit":5,"period":"1s"}`,
			node.Check{Key: "k", Limit: algo.Limit{Kind: algo.GCRA, Limit: 5, Period: time.Second, Burst: 0}, Hits: 1}},
		{`{"key":"k","algorithm":"token_bucket","limit":5,"period_ns":1000000000,"burst":5}`,
			node.Check{Key: "k", Limit: algo.Limit{Kind: algo.TokenBucket, Limit: 5, Period: time.Second, Burst: 5}, Hits: 1}},
		{`{"key":"k","algorithm":"fixed_window","limit":5,"period":"250ms","hits":0}`,
			node.Check{Key: "k", Limit: algo.Limit{Kind: algo.FixedWindow, Limit: 5, Period: 250 * time.Millisecond}, Hits: 0}},
		{"  {\"key\":\"k\",\"algorithm\":\"sliding_window_log\",\"limit\":1,\"period\":\"1h\"}\n\n",
			node.Check{Key: "k", Limit: algo.Limit{Kind: algo.SlidingWindowLog, Limit: 1, Period: time.Hour}, Hits: 1}},
	}
	for _, tt := range tests {
		f := &fake{}
		code, _, body := do(t, NewHandler(f, Options{}), http.MethodPost, "/v1/check", tt.body)
		if code != http.StatusOK {
			t.Errorf("%s: status got %d, want 200 (body %s)", tt.body, code, body)
			continue
		}
		if got := f.got(); len(got) != 1 || got[0] != tt.want {
			t.Errorf("%s: check got %+v, want %+v", tt.body, got, tt.want)
		}
	}
}

func TestCheckDenied(t *testing.T) {
	t.Parallel()
	f := &fake{answer: func(node.Check) (node.Decision, error) {
		return node.Decision{
			Decision: algo.Decision{Allowed: false, Limit: 16, RetryAfter: algo.RetryNever, ResetAfter: 2 * time.Second},
			Route:    node.RouteFallback,
		}, nil
	}}
	code, _, body := do(t, NewHandler(f, Options{}), http.MethodPost, "/v1/check", `{"key":"k","algorithm":"gcra","limit":1,"period":"1s","hits":100}`)
	if code != http.StatusOK {
		t.Fatalf("status: got %d, want 200 (a denial is an answer, not an error); body %s", code, body)
	}
	want := `{"allowed":false,"limit":16,"remaining":0,"retry_after_ns":-1,"reset_after_ns":2000000000,"route":"fallback","owner":""}` + "\n"
	if body != want {
		t.Errorf("body: got %s, want %s", body, want)
	}
}

func TestCheckBadRequests(t *testing.T) {
	t.Parallel()
	good := `"key":"k","algorithm":"gcra","limit":10,"period":"1s"`
	tests := []struct {
		name   string
		method string
		body   string
		status int
		want   string // substring of the error message
	}{
		{"wrong method", http.MethodGet, "", http.StatusMethodNotAllowed, "method GET not allowed"},
		{"put", http.MethodPut, "{" + good + "}", http.StatusMethodNotAllowed, "want POST"},
		{"empty body", http.MethodPost, "", http.StatusBadRequest, "empty body"},
		{"malformed", http.MethodPost, `{"key":`, http.StatusBadRequest, "malformed JSON"},
		{"syntax", http.MethodPost, `{"key" "k"}`, http.StatusBadRequest, "malformed JSON"},
		{"not an object", http.MethodPost, `[1,2]`, http.StatusBadRequest, "body: want a JSON object, got JSON array"},
		{"unknown field", http.MethodPost, `{` + good + `,"limt":3}`, http.StatusBadRequest, `unknown field "limt"`},
		{"trailing data", http.MethodPost, `{` + good + `}{}`, http.StatusBadRequest, "trailing data"},
		{"wrong type", http.MethodPost, `{"key":"k","algorithm":"gcra","limit":"10","period":"1s"}`, http.StatusBadRequest, `field "limit": want an integer, got JSON string`},
		{"missing key", http.MethodPost, `{"algorithm":"gcra","limit":10,"period":"1s"}`, http.StatusBadRequest, `"key" (or "key_base64") is required`},
		{"missing algorithm", http.MethodPost, `{"key":"k","limit":10,"period":"1s"}`, http.StatusBadRequest, `"algorithm" is required`},
		{"unknown algorithm", http.MethodPost, `{"key":"k","algorithm":"leaky","limit":10,"period":"1s"}`, http.StatusBadRequest, `field algorithm value "leaky": must be one of sliding_window_log, `},
		{"zero limit", http.MethodPost, `{"key":"k","algorithm":"gcra","limit":0,"period":"1s"}`, http.StatusBadRequest, `field limit value 0: must be > 0`},
		{"negative limit", http.MethodPost, `{"key":"k","algorithm":"gcra","limit":-4,"period":"1s"}`, http.StatusBadRequest, `field limit value -4`},
		{"missing period", http.MethodPost, `{"key":"k","algorithm":"gcra","limit":10}`, http.StatusBadRequest, `"period"`},
		{"bad period", http.MethodPost, `{"key":"k","algorithm":"gcra","limit":10,"period":"soon"}`, http.StatusBadRequest, `"period" = "soon"`},
		{"overflowing period", http.MethodPost, `{"key":"k","algorithm":"gcra","limit":10,"period":"10000000h"}`, http.StatusBadRequest, `"period" = "10000000h": too long, the maximum is 2562047h47m16.854775807s`},
		{"negative period", http.MethodPost, `{"key":"k","algorithm":"gcra","limit":10,"period":"-1s"}`, http.StatusBadRequest, "field period value -1000000000 ns"},
		{"both periods", http.MethodPost, `{` + good + `,"period_ns":5}`, http.StatusBadRequest, "not both"},
		{"negative burst", http.MethodPost, `{` + good + `,"burst":-1}`, http.StatusBadRequest, `field burst value -1: must be >= 0`},
		{"negative hits", http.MethodPost, `{` + good + `,"hits":-1}`, http.StatusBadRequest, `field hits value -1: must be in 0..2147483648`},
		{"huge hits", http.MethodPost, `{` + good + `,"hits":9999999999999}`, http.StatusBadRequest, `field hits value 9999999999999`},
		{"negative created_at", http.MethodPost, `{` + good + `,"created_at_unix_ns":-5}`, http.StatusBadRequest, "field created_at value -5 ns"},
		{"too big", http.MethodPost, `{"key":"` + strings.Repeat("a", MaxBody) + `"}`, http.StatusRequestEntityTooLarge, "larger than 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fake{}
			code, hdr, body := do(t, NewHandler(f, Options{}), tt.method, "/v1/check", tt.body)
			if code != tt.status {
				t.Errorf("status: got %d, want %d (body %s)", code, tt.status, body)
			}
			var e Error
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
				t.Fatalf("body %q: want a JSON error (decode error %v)", body, err)
			}
			if !strings.Contains(e.Error, tt.want) {
				t.Errorf("error: got %q, want it to contain %q", e.Error, tt.want)
			}
			if tt.status == http.StatusMethodNotAllowed && hdr.Get("Allow") != "POST" {
				t.Errorf("Allow header: got %q, want POST", hdr.Get("Allow"))
			}
			if n := len(f.got()); n != 0 {
				t.Errorf("node received %d checks, want 0", n)
			}
		})
	}
}

func TestCheckNodeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		res    node.Decision
		err    error
		status int
		want   string
	}{
		{"invalid limit", node.Decision{}, (algo.Limit{Kind: algo.TokenBucket, Limit: 1, Period: 1}).Validate(), http.StatusBadRequest, `{"error":"field burst value 0: token_bucket needs a capacity >= 1"}`},
		{"invalid check", node.Decision{}, &node.InputError{Field: "key", Value: "2000 bytes", Allowed: "must be 1..1024 bytes"}, http.StatusBadRequest, "field key value 2000 bytes"},
		{"refused by owner", node.Decision{}, fmt.Errorf("%w: refused by n2: created_at refused", node.ErrInvalid), http.StatusBadRequest, "created_at refused"},
		{"stopped", node.Decision{}, node.ErrStopped, http.StatusServiceUnavailable, "stopped"},
		{"too many keys", node.Decision{}, node.ErrTooManyKeys, http.StatusServiceUnavailable, "too many keys"},
		{"unavailable err", node.Decision{}, fmt.Errorf("%w: node stopped", node.ErrUnavailable), http.StatusServiceUnavailable, "node stopped"},
		{"deadline", node.Decision{}, context.DeadlineExceeded, http.StatusGatewayTimeout, "deadline"},
		{"other", node.Decision{}, fmt.Errorf("boom"), http.StatusInternalServerError, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fake{answer: func(node.Check) (node.Decision, error) { return tt.res, tt.err }}
			code, _, body := do(t, NewHandler(f, Options{}), http.MethodPost, "/v1/check", `{"key":"k","algorithm":"gcra","limit":10,"period":"1s"}`)
			if code != tt.status {
				t.Errorf("status: got %d, want %d (body %s)", code, tt.status, body)
			}
			if !strings.Contains(body, tt.want) {
				t.Errorf("body: got %s, want it to contain %q", body, tt.want)
			}
		})
	}
}

func TestMembers(t *testing.T) {
	t.Parallel()
	h := NewHandler(&fake{}, Options{})
	code, _, body := do(t, h, http.MethodGet, "/v1/members", "")
	var ms []Member
	if code != http.StatusOK || json.Unmarshal([]byte(body), &ms) != nil || len(ms) != 2 || !ms[0].Self || ms[0].GossipAddr != "127.0.0.1:2" ||
		ms[1].State != "refused" || ms[1].Reason == "" {
		t.Errorf("/v1/members: got %d %s, want 200 and the two members with state and reason", code, body)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		code, hdr, _ := do(t, h, m, "/v1/members", "{}")
		if code != http.StatusMethodNotAllowed || hdr.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s /v1/members: got %d Allow %q, want 405 Allow \"GET, HEAD\"", m, code, hdr.Get("Allow"))
		}
	}
	// The admin paths are not on the client API.
	for _, p := range []string{"/metrics", "/healthz", "/readyz", "/nope"} {
		if code, _, body := do(t, h, http.MethodGet, p, ""); code != http.StatusNotFound || !strings.Contains(body, p) {
			t.Errorf("client API GET %s: got %d %s, want a 404 JSON error naming it", p, code, body)
		}
	}
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	f := &fake{}
	scraped := 0
	h := NewAdminHandler(f, AdminOptions{Extra: map[string]http.Handler{
		"/metrics": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { scraped++; io.WriteString(w, "m 1\n") }),
	}})
	if code, _, _ := do(t, h, http.MethodGet, "/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz: got %d, want 200", code)
	}
	if code, _, body := do(t, h, http.MethodGet, "/readyz", ""); code != http.StatusServiceUnavailable || strings.Contains(body, "insecure") {
		t.Errorf("/readyz before ready: got %d %s, want 503 without insecure", code, body)
	}
	f.mu.Lock()
	f.ready = true
	f.mu.Unlock()
	if code, _, _ := do(t, h, http.MethodGet, "/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz when ready: got %d, want 200", code)
	}
	if code, _, body := do(t, h, http.MethodGet, "/metrics", ""); code != http.StatusOK || body != "m 1\n" {
		t.Errorf("/metrics: got %d %q, want the extra handler", code, body)
	}
	// Read-only: every other method is 405 on every path and reaches nothing.
	before := scraped
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			code, hdr, body := do(t, h, m, p, "x")
			if code != http.StatusMethodNotAllowed || hdr.Get("Allow") != "GET, HEAD" || !strings.Contains(body, `"error"`) {
				t.Errorf("%s %s: got %d Allow %q %s, want 405 with Allow \"GET, HEAD\" and a JSON error", m, p, code, hdr.Get("Allow"), body)
			}
		}
	}
	if scraped != before {
		t.Errorf("a refused method reached the metrics handler")
	}
	if code, _, body := do(t, h, http.MethodGet, "/v1/check", ""); code != http.StatusNotFound || !strings.Contains(body, "/metrics") {
		t.Errorf("admin GET /v1/check: got %d %s, want 404 listing the admin paths", code, body)
	}
	hi := NewAdminHandler(f, AdminOptions{Insecure: true})
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _, body := do(t, hi, http.MethodGet, p, ""); code != http.StatusOK || !strings.Contains(body, `"insecure":true`) {
			t.Errorf("insecure %s: got %d %s, want 200 saying insecure", p, code, body)
		}
	}
}

// TestKeyBytes checks that keys are taken byte for byte: bodies encoding/json
// would rewrite to U+FFFD are refused naming the offset, key_base64 carries any
// bytes, and the 1..1024-byte rule holds for both forms.
func TestKeyBytes(t *testing.T) {
	t.Parallel()
	rest := `,"algorithm":"gcra","limit":10,"period":"1s"}`
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name   string
		body   string
		status int
		want   string // error substring, or the key for 200
	}{
		{"invalid byte ff", "{\"key\":\"utf\xff\"" + rest, 400, "byte offset 11"},
		{"invalid byte fe", "{\"key\":\"utf\xfe\"" + rest, 400, "byte offset 11"},
		{"truncated sequence", "{\"key\":\"\xe2\x82\"" + rest, 400, "byte offset 8"},
		{"overlong encoding", "{\"key\":\"\xc0\xaf\"" + rest, 400, "byte offset 8"},
		{"encoded surrogate", "{\"key\":\"\xed\xa0\x80\"" + rest, 400, "byte offset 8"},
		{"lone high surrogate escape", `{"key":"a\ud800"` + rest, 400, `\ud800 at byte offset 9`},
		{"lone low surrogate escape", `{"key":"a\uDC00b"` + rest, 400, `\udc00 at byte offset 9`},
		{"high then non-low", `{"key":"a\ud800\u0041"` + rest, 400, "byte offset 9"},
		{"invalid in another field", "{\"key\":\"k\",\"algorithm\":\"gc\xffra\",\"limit\":1,\"period\":\"1s\"}", 400, "byte offset 26"},
		{"both forms", `{"key":"k","key_base64":"aw=="` + rest, 400, "not both"},
		{"neither", `{"algorithm":"gcra","limit":10,"period":"1s"}`, 400, `"key" (or "key_base64") is required`},
		{"bad base64", `{"key_base64":"***"` + rest, 400, `"key_base64"`},
		{"non-canonical base64", `{"key_base64":"QR=="` + rest, 400, `"key_base64"`},
		{"empty base64", `{"key_base64":""` + rest, 400, `required`},
		{"too long", `{"key":"` + strings.Repeat("k", MaxKeyLen+1) + `"` + rest, 400, "field key value 1025 bytes: must be 1..1024 bytes"},
		{"too long base64", `{"key_base64":"` + b64(strings.Repeat("k", MaxKeyLen+1)) + `"` + rest, 400, "field key value 1025 bytes"},
		// Accepted, byte for byte.
		{"surrogate pair escape", `{"key":"\ud83d\ude00"` + rest, 200, "\U0001F600"},
		{"escaped replacement char", `{"key":"\ufffd"` + rest, 200, "\uFFFD"},
		{"literal replacement char", "{\"key\":\"\xef\xbf\xbd\"" + rest, 200, "\uFFFD"},
		{"utf8 key", `{"key":"clé"` + rest, 200, "clé"},
		{"base64 ff", `{"key_base64":"` + b64("utf\xff") + `"` + rest, 200, "utf\xff"},
		{"base64 fe", `{"key_base64":"` + b64("utf\xfe") + `"` + rest, 200, "utf\xfe"},
		{"base64 nul", `{"key_base64":"AA=="` + rest, 200, "\x00"},
		{"longest", `{"key":"` + strings.Repeat("k", MaxKeyLen) + `"` + rest, 200, strings.Repeat("k", MaxKeyLen)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fake{}
			code, _, body := do(t, NewHandler(f, Options{}), http.MethodPost, "/v1/check", tt.body)
			if code != tt.status {
				t.Fatalf("status: got %d, want %d (body %s)", code, tt.status, body)
			}
			got := f.got()
			if tt.status != 200 {
				var e Error
				if err := json.Unmarshal([]byte(body), &e); err != nil || !strings.Contains(e.Error, tt.want) || len(got) != 0 {
					t.Errorf("got %s and %d checks, want an error with %q and no check", body, len(got), tt.want)
				}
				return
			}
			if len(got) != 1 || got[0].Key != tt.want {
				t.Errorf("checks: got %+v, want one with key %+q", got, tt.want)
			}
		})
	}
}

// TestServerSurvivesBadRequests sends every kind of bad request to a real HTTP
// server and checks that a good one still works afterwards.
func TestServerSurvivesBadRequests(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(NewHandler(&fake{ready: true}, Options{}))
	t.Cleanup(srv.Close)
	bad := []string{"", "{", "null", `{"key":1}`, strings.Repeat("x", 3*MaxBody)}
	for _, b := range bad {
		resp, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(b))
		if err != nil {
			t.Fatalf("post %.20q: %v", b, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Errorf("post %.20q: got %d, want 4xx", b, resp.StatusCode)
		}
	}
	resp, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(`{"key":"k","algorithm":"gcra","limit":10,"period":"1s"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("good check after bad ones: got %d, want 200", resp.StatusCode)
	}
}

// TestCheckMaxWait: max_wait (or max_wait_ns) reaches the node as
// Check.MaxWait, the answer carries the wait slept as delay_ns, and a wait
// under a window algorithm or given twice is a 400.
func TestCheckMaxWait(t *testing.T) {
	t.Parallel()
	f := &fake{answer: func(c node.Check) (node.Decision, error) {
		return node.Decision{Decision: algo.Decision{Allowed: true, Limit: 1}, Route: node.RouteOwner, Owner: "node-1", Delay: 250 * time.Millisecond}, nil
	}}
	h := NewHandler(f, Options{})
	code, _, body := do(t, h, http.MethodPost, "/v1/check", `{"key":"k","algorithm":"gcra","limit":10,"period":"1s","max_wait":"2s"}`)
	if code != http.StatusOK || !strings.Contains(body, `"delay_ns":250000000`) {
		t.Fatalf("got %d %s, want 200 with delay_ns 250000000", code, body)
	}
	code, _, _ = do(t, h, http.MethodPost, "/v1/check", `{"key":"k","algorithm":"token_bucket","limit":10,"burst":1,"period":"1s","max_wait_ns":5}`)
	if code != http.StatusOK {
		t.Fatalf("max_wait_ns: got %d, want 200", code)
	}
	got := f.got()
	if len(got) != 2 || got[0].MaxWait != 2*time.Second || got[1].MaxWait != 5 {
		t.Fatalf("checks: got %+v, want MaxWait 2s then 5ns", got)
	}
	for _, body := range []string{
		`{"key":"k","algorithm":"fixed_window","limit":10,"period":"1s","max_wait":"2s"}`,
		`{"key":"k","algorithm":"gcra","limit":10,"period":"1s","max_wait":"2s","max_wait_ns":5}`,
		`{"key":"k","algorithm":"gcra","limit":10,"period":"1s","max_wait":"soon"}`,
		`{"key":"k","algorithm":"gcra","limit":10,"period":"1s","max_wait_ns":-1}`,
	} {
		if code, _, resp := do(t, h, http.MethodPost, "/v1/check", body); code != http.StatusBadRequest || !strings.Contains(resp, "max_wait") {
			t.Errorf("%s: got %d %s, want 400 naming max_wait", body, code, resp)
		}
	}
}

// TestCheckErrorClasses: a check outside the caller's scope is 403, a full
// key table 503 with Retry-After (whole seconds, rounded up) and the bound
// named; neither is 400.
func TestCheckErrorClasses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		status int
		retry  string
		want   string
	}{
		{&node.PermissionError{Who: `credential "a"`, Forbids: "may not ask for period 876000h0m0s: above its max_period 744h0m0s"}, http.StatusForbidden, "",
			`{"error":"permission denied: credential \"a\" may not ask for period 876000h0m0s: above its max_period 744h0m0s"}`},
		{&node.KeyTableFullError{Who: "this node", Text: "holds 20000 keys, its MaxKeys, none of them idle", RetryAfter: 4*time.Second + time.Millisecond}, http.StatusServiceUnavailable, "5",
			`{"error":"key table full: this node holds 20000 keys, its MaxKeys, none of them idle; the earliest key frees in 4.001s"}`},
		{fmt.Errorf("scope: %w", &node.KeyTableFullError{Who: `credential "b"`, Text: "holds 10 keys through this node, its max_keys"}), http.StatusServiceUnavailable, "",
			`{"error":"key table full: credential \"b\" holds 10 keys through this node, its max_keys"}`},
	} {
		f := &fake{answer: func(node.Check) (node.Decision, error) { return node.Decision{}, tc.err }}
		code, hdr, body := do(t, NewHandler(f, Options{}), http.MethodPost, "/v1/check", `{"key":"k","algorithm":"gcra","limit":10,"period":"1s"}`)
		if code != tc.status || hdr.Get("Retry-After") != tc.retry || strings.TrimSpace(body) != tc.want {
			t.Errorf("%v: got %d Retry-After %q %s, want %d Retry-After %q %s", tc.err, code, hdr.Get("Retry-After"), body, tc.status, tc.retry, tc.want)
		}
	}
}
