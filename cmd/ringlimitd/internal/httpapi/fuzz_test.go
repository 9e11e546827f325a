package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ringlimit/ringlimit/node"
)

// FuzzCheckBody sends arbitrary bodies to POST /v1/check, against a limiter that
// validates like the node does. The handler must never panic, must answer 200
// only for a check that node.Check.Validate accepts, and a 4xx with a JSON
// error otherwise. A body that is not valid UTF-8 is never accepted (400 naming
// the byte offset), and a key taken from "key" is exactly the JSON string's
// text, so it is valid UTF-8.
func FuzzCheckBody(f *testing.F) {
	for _, seed := range []string{
		`{"key":"k","algorithm":"gcra","limit":30,"period":"1m","burst":15}`,
		`{"key":"k","algorithm":"sliding_window_log","limit":5,"period_ns":1000000000,"hits":2}`,
		`{"key":"","algorithm":"gcra","limit":1,"period":"1s"}`,
		`{"key":"k","algorithm":"token_bucket","limit":-1,"period":"-1s","burst":-3}`,
		`{"key":"k","algorithm":"fixed_window","limit":9223372036854775807,"period":"2562047h"}`,
		`{"key":"k","algorithm":"nope"}`, `{`, `[]`, `null`, `{"key":"k"} trailing`,
		"{\"key\":\"utf\xff\",\"algorithm\":\"gcra\",\"limit\":1,\"period\":\"1s\"}",
		`{"key":"a\ud800","algorithm":"gcra","limit":1,"period":"1s"}`,
		`{"key":"\ud83d\ude00","algorithm":"gcra","limit":1,"period":"1s"}`,
		`{"key_base64":"/w==","algorithm":"gcra","limit":1,"period":"1s"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		lim := &fake{ready: true}
		var valid bool
		var key string
		lim.answer = func(c node.Check) (node.Decision, error) {
			if err := c.Validate(0); err != nil {
				return node.Decision{}, err
			}
			valid, key = true, c.Key
			return node.Decision{Route: node.RouteOwner}, nil
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
			if !utf8.ValidString(body) {
				t.Fatalf("200 for a body that is not valid UTF-8: %q", body)
			}
			if !utf8.ValidString(key) && !strings.Contains(body, "key_base64") {
				t.Fatalf("key %q is not UTF-8 but came from \"key\": %q", key, body)
			}
		case w.Code >= 400 && w.Code < 500:
			var e Error
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("%d without a JSON error naming the problem: %q", w.Code, w.Body.String())
			}
			if !utf8.ValidString(body) && !strings.Contains(e.Error, "byte offset") {
				t.Fatalf("body not valid UTF-8 refused without naming the offset: %q: %s", body, e.Error)
			}
		default:
			t.Fatalf("status %d for body %q", w.Code, body)
		}
	})
}

// FuzzCheckText checks checkText against encoding/json on arbitrary JSON string
// literals: whenever checkText accepts the text and encoding/json decodes it,
// the decoded string has exactly as many U+FFFD as the text spells out (the
// raw bytes EF BF BD or a \ufffd escape), i.e. nothing was rewritten to U+FFFD
// behind the caller's back; and a literal holding bytes that are not UTF-8 is
// refused.
func FuzzCheckText(f *testing.F) {
	for _, seed := range []string{"abc", "utf\xff", `a\ud800`, `\ud83d\ude00`, `\uDBFF\uDFFF`, `\ufffd`, "\xef\xbf\xbd", `\\ud800`, `\"\ud800`, `\ud800\u`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, inner string) {
		lit := []byte(`"` + inner + `"`)
		err := checkText(lit)
		if !utf8.Valid(lit) && err == nil {
			t.Fatalf("accepted text that is not UTF-8: %q", lit)
		}
		var s string
		if err != nil || json.Unmarshal(lit, &s) != nil {
			return
		}
		spelled := strings.Count(inner, "\ufffd") + countFold(inner, `\ufffd`)
		if got := strings.Count(s, "\ufffd"); got != spelled {
			t.Fatalf("%q decodes to %q with %d U+FFFD, but spells out %d", lit, s, got, spelled)
		}
	})
}

// countFold counts the \ufffd escapes of s, any hex case, that are not
// themselves escaped backslashes (an even run of backslashes before the u).
func countFold(s, esc string) int {
	n := 0
	for i := 0; i+len(esc) <= len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		if strings.EqualFold(s[i:i+len(esc)], esc) {
			n++
			i += len(esc) - 1
			continue
		}
		i++ // skip the escaped character (\\, \", ...)
	}
	return n
}
