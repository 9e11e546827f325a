package middleware

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/textproto"
	"sync"
	"testing"
	"time"
)

// fakeLimiter admits `capacity` requests per key, then denies with a fixed
// RetryAfter; err, when set, is returned instead.
type fakeLimiter struct {
	mu       sync.Mutex
	capacity int64
	used     map[string]int64
	keys     []string
	err      error
}

func (f *fakeLimiter) Limit(_ context.Context, key string) (Verdict, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, key)
	if f.err != nil {
		return Verdict{}, f.err
	}
	if f.used == nil {
		f.used = map[string]int64{}
	}
	v := Verdict{Limited: true, Limit: f.capacity, Window: time.Minute, Policy: "per-ip", ResetAfter: 30 * time.Second}
	if f.used[key] < f.capacity {
		f.used[key]++
		v.Allowed = true
		v.Remaining = f.capacity - f.used[key]
		return v, nil
	}
	v.RetryAfter = 1500 * time.Millisecond
	return v, nil
}

func (f *fakeLimiter) lastKey() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.keys) == 0 {
		return ""
	}
	return f.keys[len(f.keys)-1]
}

type reached struct {
	mu sync.Mutex
	n  int
}

func (r *reached) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		r.n++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
}

func (r *reached) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func mustHTTP(t testing.TB, l Limiter, opts ...Option) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := HTTP(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func serve(h http.Handler, remote string, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.RemoteAddr = remote
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHTTPAllowsThenDenies(t *testing.T) {
	t.Parallel()
	f := &fakeLimiter{capacity: 2}
	var hit reached
	h := mustHTTP(t, f)(hit.handler())
	for i, want := range []string{`"per-ip";r=1;t=30`, `"per-ip";r=0;t=30`} {
		w := serve(h, "192.0.2.1:1234", nil)
		if w.Code != http.StatusOK || w.Header().Get(HeaderRateLimit) != want ||
			w.Header().Get(HeaderRateLimitPolicy) != `"per-ip";q=2;w=60` || w.Header().Get(HeaderRetryAfter) != "" {
			t.Fatalf("request %d: got %d %v, want 200 with RateLimit %s", i, w.Code, w.Header(), want)
		}
	}
	w := serve(h, "192.0.2.1:1234", nil)
	if w.Code != http.StatusTooManyRequests || w.Header().Get(HeaderRetryAfter) != "2" ||
		w.Header().Get(HeaderRateLimit) != `"per-ip";r=0;t=30` || hit.count() != 2 {
		t.Fatalf("denied: got %d %v, handler reached %d times; want 429, Retry-After 2, handler reached twice", w.Code, w.Header(), hit.count())
	}
	if f.lastKey() != "192.0.2.1" {
		t.Fatalf("key: got %q, want the client IP", f.lastKey())
	}
}

// TestHTTPNestedSetsOnce: two layers of middleware leave one value per field
// (Header().Set, not Add).
func TestHTTPNestedSetsOnce(t *testing.T) {
	t.Parallel()
	var hit reached
	h := mustHTTP(t, &fakeLimiter{capacity: 5})(mustHTTP(t, &fakeLimiter{capacity: 5})(hit.handler()))
	w := serve(h, "192.0.2.1:1", nil)
	if got := w.Header().Values(HeaderRateLimit); len(got) != 1 {
		t.Fatalf("RateLimit values: got %q, want one", got)
	}
}

func TestHTTPDenyHandler(t *testing.T) {
	t.Parallel()
	var hit reached
	deny := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := VerdictFrom(r.Context())
		if !ok || v.Allowed {
			t.Errorf("VerdictFrom: got %+v %v, want a denied verdict", v, ok)
		}
		w.WriteHeader(http.StatusTeapot)
	})
	h := mustHTTP(t, &fakeLimiter{capacity: 0}, WithDenyHandler(deny))(hit.handler())
	if w := serve(h, "192.0.2.1:1", nil); w.Code != http.StatusTeapot || hit.count() != 0 || w.Header().Get(HeaderRetryAfter) != "2" {
		t.Fatalf("got %d, reached %d, Retry-After %q; want 418 from the deny handler, not reached, Retry-After 2", w.Code, hit.count(), w.Header().Get(HeaderRetryAfter))
	}
}

func TestHTTPLimiterErrorFailsOpenOrClosed(t *testing.T) {
	t.Parallel()
	f := &fakeLimiter{err: errors.New("owner down")}
	var open, closed reached
	if w := serve(mustHTTP(t, f)(open.handler()), "192.0.2.1:1", nil); w.Code != http.StatusOK || open.count() != 1 || w.Header().Get(HeaderRateLimit) != "" {
		t.Fatalf("fail open: got %d, reached %d; want 200 reached, no fields", w.Code, open.count())
	}
	if w := serve(mustHTTP(t, f, WithFailClosed())(closed.handler()), "192.0.2.1:1", nil); w.Code != http.StatusServiceUnavailable || closed.count() != 0 {
		t.Fatalf("fail closed: got %d, reached %d; want 503 not reached", w.Code, closed.count())
	}
}

func TestHTTPKeyErrorNeverPasses(t *testing.T) {
	t.Parallel()
	var hit reached
	h := mustHTTP(t, &fakeLimiter{capacity: 5}, WithKeyFunc(KeyFromHeader("X-Api-Key")))(hit.handler())
	if w := serve(h, "192.0.2.1:1", nil); w.Code != http.StatusInternalServerError || hit.count() != 0 {
		t.Fatalf("missing header: got %d, reached %d; want 500, not reached", w.Code, hit.count())
	}
	if w := serve(h, "192.0.2.1:1", map[string]string{"X-Api-Key": "k1"}); w.Code != http.StatusOK {
		t.Fatalf("with header: got %d, want 200", w.Code)
	}
}

func TestHTTPKeyFromRoute(t *testing.T) {
	t.Parallel()
	f := &fakeLimiter{capacity: 5}
	mw := mustHTTP(t, f, WithKeyFunc(KeyFromRoute()))
	var hit reached
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", mw(hit.handler()))
	r := httptest.NewRequest(http.MethodGet, "/items/42", nil)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	if w.Code != http.StatusOK || f.lastKey() != "GET /items/{id}" {
		t.Fatalf("got %d key %q, want 200 keyed by the pattern", w.Code, f.lastKey())
	}
}

func TestClientIP(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	tests := []struct {
		name, remote string
		hdr          map[string]string
		want         string
	}{
		{"direct", "198.51.100.7:5555", nil, "198.51.100.7"},
		{"untrusted peer's XFF ignored", "198.51.100.7:5555", map[string]string{"X-Forwarded-For": "1.1.1.1"}, "198.51.100.7"},
		{"trusted proxy", "10.0.0.2:80", map[string]string{"X-Forwarded-For": "203.0.113.9"}, "203.0.113.9"},
		{"spoofed leftmost skipped", "10.0.0.2:80", map[string]string{"X-Forwarded-For": "6.6.6.6, 203.0.113.9"}, "203.0.113.9"},
		{"two trusted hops", "10.0.0.2:80", map[string]string{"X-Forwarded-For": "6.6.6.6, 203.0.113.9, 10.1.1.1"}, "203.0.113.9"},
		{"garbage stops at last trusted", "10.0.0.2:80", map[string]string{"X-Forwarded-For": "203.0.113.9, nonsense"}, "10.0.0.2"},
		{"Forwarded preferred", "10.0.0.2:80", map[string]string{"Forwarded": `for=6.6.6.6, for="[2001:db8:cafe::17]:4711", for=192.0.2.60;proto=http`, "X-Forwarded-For": "7.7.7.7"}, "192.0.2.60"},
		{"Forwarded through trusted v6", "10.0.0.2:80", map[string]string{"Forwarded": `for=192.0.2.61, for="[2001:db8:cafe::17]:4711"`}, "192.0.2.61"},
		{"Forwarded obfuscated", "10.0.0.2:80", map[string]string{"Forwarded": `for=_hidden`}, "10.0.0.2"},
		{"ipv6 peer", "[2001:db9::1]:443", nil, "2001:db9::1"},
		{"v4-mapped peer", "[::ffff:198.51.100.7]:1", nil, "198.51.100.7"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tt.remote
		for k, v := range tt.hdr {
			r.Header.Set(k, v)
		}
		got, err := ClientIP(r, proxies)
		if err != nil || got.String() != tt.want {
			t.Errorf("%s: got %v, %v; want %s", tt.name, got, err, tt.want)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "not an address"
	if _, err := ClientIP(r, proxies); !errors.Is(err, ErrNoKey) {
		t.Errorf("bad RemoteAddr: got %v, want ErrNoKey", err)
	}
}

func TestConstructorsRejectNil(t *testing.T) {
	t.Parallel()
	if _, err := HTTP(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("HTTP(nil): got %v", err)
	}
	if _, err := HTTP(&fakeLimiter{}, WithKeyFunc(nil)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil key func: got %v", err)
	}
	if _, err := HTTPDescriptors(nil, "d", nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("HTTPDescriptors(nil): got %v", err)
	}
	if _, err := UnaryServerInterceptor(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("UnaryServerInterceptor(nil): got %v", err)
	}
	if _, err := NodeLimiter(nil, hourly(1), "", ""); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NodeLimiter(nil): got %v", err)
	}
}

func TestSFString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"a": `"a"`, `q"b\c`: `"q\"b\\c"`, "é\n": `"???"`} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q): got %s, want %s", in, got, want)
		}
	}
}

func TestHeaderKeysAreCanonical(t *testing.T) {
	t.Parallel()
	for k, want := range map[string]string{HeaderRateLimitPolicy: keyRateLimitPolicy, HeaderRateLimit: keyRateLimit} {
		if got := textproto.CanonicalMIMEHeaderKey(k); got != want {
			t.Errorf("CanonicalMIMEHeaderKey(%q): got %q, want %q", k, got, want)
		}
	}
}
