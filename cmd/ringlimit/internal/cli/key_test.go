package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyCommands: key inspect|reset|unban|top send the daemon's requests
// with the caller's token and print the answer; a 403 (no admin scope) is an
// error naming it.
func TestKeyCommands(t *testing.T) {
	t.Parallel()
	const admin = "admin-token-xxxxxxxxxxxx"
	var got []string
	sec := newSecureDir(t)
	caOnly := t.TempDir()
	ca, _ := os.ReadFile(filepath.Join(sec.dir, "ca.crt"))
	os.WriteFile(filepath.Join(caOnly, "ca.crt"), ca, 0o644)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+admin {
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"error":"scope \"x\": may not inspect, reset or unban keys (the scope has no admin permission)"}`))
			return
		}
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+string(b))
		if r.URL.Path == "/v1/keys/top" {
			w.Write([]byte(`[{"key":"k","denials":3,"error":0}]`))
			return
		}
		w.Write([]byte(`{"found":true,"remaining":2}`))
	}))
	srv.TLS = sec.serverTLS
	srv.StartTLS()
	defer srv.Close()
	for _, args := range [][]string{
		{"key", "inspect", "--algorithm", "fixed_window", "--limit", "5", "--period", "1m", "user:1"},
		{"key", "reset", "--limit", "5", "user:1"},
		{"key", "unban", "user:1"},
		{"key", "top", "--n", "3"},
	} {
		code, out, stderr := run(t, Deps{}, append(args, "--certs-dir", caOnly, "--addr", srv.URL, "--token", admin)...)
		var v any
		if code != ExitOK || json.Unmarshal([]byte(out), &v) != nil {
			t.Errorf("%v: exit %d, out %q, stderr %q", args, code, out, stderr)
		}
	}
	want := []string{
		`POST /v1/keys/inspect {"algorithm":"fixed_window","burst":0,"key":"user:1","limit":5,"period_ns":60000000000}`,
		`POST /v1/keys/reset {"algorithm":"gcra","burst":0,"key":"user:1","limit":5,"period_ns":1000000000}`,
		`POST /v1/keys/unban {"key":"user:1"}`,
		`GET /v1/keys/top?n=3 `,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	code, _, stderr := run(t, Deps{}, "key", "reset", "user:1", "--certs-dir", caOnly, "--addr", srv.URL, "--token", "other-token-xxxxxxxxxxxx")
	if code != ExitError || !strings.Contains(stderr, "403") || !strings.Contains(stderr, "no admin permission") {
		t.Errorf("without admin: exit %d, stderr %q; want 2 naming 403 and the admin permission", code, stderr)
	}
}
