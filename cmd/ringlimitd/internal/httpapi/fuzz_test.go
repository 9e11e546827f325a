package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/transport"
)

// FuzzCheckBody sends arbitrary bodies to POST /v1/check, against a limiter that
// validates like the node does. The handler must never panic, must answer 200
// only for a check that transport.ValidateCheck accepts, and a 4xx with a JSON
// error otherwise.
func FuzzCheckBody(f *testing.F) {
	for _, seed := range []string{
		`{"key":"k","algorithm":"gcra","limit":30,"period":"1m","burst":15}`,
		`{"key":"k","algorithm":"sliding_window_log","limit":5,"period_ns":1000000000,"hits":2}`,
		`{"key":"","algorithm":"gcra","limit":1,"period":"1s"}`,
		`{"key":"k","algorithm":"token_bucket","limit":-1,"period":"-1s","burst":-3}`,
		`{"key":"k","algorithm":"fixed_window","limit":9223372036854775807,"period":"2562047h"}`,
		`{"key":"k","algorithm":"nope"}`, `{`, `[]`, `null`, `{"key":"k"} trailing`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		lim := &fake{ready: true}
		var valid bool
		lim.answer = func(c transport.Check) (transport.Result, error) {
			if err := transport.ValidateCheck(c, transport.DefaultMaxKeyLen); err != nil {
				return transport.Result{}, err
			}
			valid = true
			return transport.Result{Route: transport.RouteOwner}, nil
		}
		h := NewHandler(lim, Options{})
		req := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch {
		case w.Code == http.StatusOK:
			if !valid {
				t.Fatalf("200 for a check the limiter refused: %q", body)
			}
			var resp CheckResponse
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatalf("200 with a body that is not a CheckResponse: %v: %q", err, w.Body.String())
			}
		case w.Code >= 400 && w.Code < 500:
			var e Error
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("%d without a JSON error naming the problem: %q", w.Code, w.Body.String())
			}
		default:
			t.Fatalf("status %d for body %q", w.Code, body)
		}
	})
}
