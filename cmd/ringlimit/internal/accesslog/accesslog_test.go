package accesslog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The first lines of testdata/apache_logs, verbatim.
const (
	line1 = `83.149.9.216 - - [17/May/2015:10:05:03 +0000] "GET /presentations/logstash-monitorama-2013/images/kibana-search.png HTTP/1.1" 200 203023 "http://semicomplete.com/presentations/logstash-monitorama-2013/" "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/32.0.1700.77 Safari/537.36"`
	line2 = `83.149.9.216 - - [17/May/2015:10:05:43 +0000] "GET /presentations/logstash-monitorama-2013/images/kibana-dashboard3.png HTTP/1.1" 200 171717 "http://semicomplete.com/presentations/logstash-monitorama-2013/" "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/32.0.1700.77 Safari/537.36"`
	// line 8899: the user-agent's closing quote is missing.
	line8899 = `46.118.127.106 - - [20/May/2015:12:05:17 +0000] "GET /scripts/grok-py-test/configlib.py HTTP/1.1" 200 235 "-" "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html`
)

func unix(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixNano()
}

func TestParseLine(t *testing.T) {
	t.Parallel()
	const mozilla = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/32.0.1700.77 Safari/537.36"
	tests := []struct {
		name string
		line string
		want Entry
	}{
		{"first line", line1, Entry{
			ClientIP: "83.149.9.216", Ident: "-", User: "-", Time: unix("2015-05-17T10:05:03Z"),
			Request: "GET /presentations/logstash-monitorama-2013/images/kibana-search.png HTTP/1.1",
			Method:  "GET", Path: "/presentations/logstash-monitorama-2013/images/kibana-search.png", Proto: "HTTP/1.1",
			Status: 200, Bytes: 203023, Referer: "http://semicomplete.com/presentations/logstash-monitorama-2013/", UserAgent: mozilla,
		}},
		{"second line", line2, Entry{
			ClientIP: "83.149.9.216", Ident: "-", User: "-", Time: unix("2015-05-17T10:05:43Z"),
			Request: "GET /presentations/logstash-monitorama-2013/images/kibana-dashboard3.png HTTP/1.1",
			Method:  "GET", Path: "/presentations/logstash-monitorama-2013/images/kibana-dashboard3.png", Proto: "HTTP/1.1",
			Status: 200, Bytes: 171717, Referer: "http://semicomplete.com/presentations/logstash-monitorama-2013/", UserAgent: mozilla,
		}},
		{"truncated user-agent", line8899, Entry{
			ClientIP: "46.118.127.106", Ident: "-", User: "-", Time: unix("2015-05-20T12:05:17Z"),
			Request: "GET /scripts/grok-py-test/configlib.py HTTP/1.1", Method: "GET", Path: "/scripts/grok-py-test/configlib.py", Proto: "HTTP/1.1",
			Status: 200, Bytes: 235, Referer: "-", UserAgent: "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html", Truncated: true,
		}},
		{"common format, bytes dash, offset, CRLF", `::1 ident frank [10/Oct/2000:13:55:36 -0700] "HEAD / HTTP/1.0" 304 -` + "\r", Entry{
			ClientIP: "::1", Ident: "ident", User: "frank", Time: unix("2000-10-10T20:55:36Z"),
			Request: "HEAD / HTTP/1.0", Method: "HEAD", Path: "/", Proto: "HTTP/1.0", Status: 304, Bytes: -1,
		}},
		{"escaped quotes, odd request, extra fields", `10.0.0.1 - - [01/Jan/2020:00:00:00 +0000] "\"x\\" 400 0 "-" "a \"b\"" 1234 extra`, Entry{
			ClientIP: "10.0.0.1", Ident: "-", User: "-", Time: unix("2020-01-01T00:00:00Z"),
			Request: `"x\`, Status: 400, Bytes: 0, Referer: "-", UserAgent: `a "b"`,
		}},
		{"HTTP/0.9 request", `10.0.0.1 - - [01/Jan/2020:00:00:00 +0000] "GET /" 200 1 "" ""`, Entry{
			ClientIP: "10.0.0.1", Ident: "-", User: "-", Time: unix("2020-01-01T00:00:00Z"),
			Request: "GET /", Method: "GET", Path: "/", Status: 200, Bytes: 1,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseLine(tt.line)
			if err != nil {
				t.Fatalf("ParseLine: %v", err)
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseLineErrors(t *testing.T) {
	t.Parallel()
	const ok = `1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 5 "-" "ua"`
	tests := []struct {
		line  string
		field string
	}{
		{"", "client"},
		{"1.2.3.4", "ident"},
		{"1.2.3.4 -", "user"},
		{"1.2.3.4 - -", "time"},
		{`1.2.3.4 - - 17/May/2015:10:05:03 "GET / HTTP/1.1" 200 5`, "time"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000 "GET / HTTP/1.1" 200 5`, "time"},
		{`1.2.3.4 - - [2015-05-17T10:05:03Z] "GET / HTTP/1.1" 200 5`, "time"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000]`, "request"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] GET / 200 5`, "request"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1 200 5`, "request"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1"x 200 5`, "request"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1"`, "status"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" OK 5`, "status"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 2000 5`, "status"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200`, "bytes"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 -5`, "bytes"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 5k`, "bytes"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 5 -`, "referer"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 5 "-`, "referer"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 5 "-"`, "user-agent"},
		{`1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 5 "-" ua`, "user-agent"},
	}
	if _, err := ParseLine(ok); err != nil {
		t.Fatalf("control line: %v", err)
	}
	for _, tt := range tests {
		_, err := ParseLine(tt.line)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("ParseLine(%q): got error %v, want a *ParseError", tt.line, err)
			continue
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseLine(%q): got %v, want it to wrap ErrMalformed", tt.line, err)
		}
		if pe.Field != tt.field {
			t.Errorf("ParseLine(%q): got field %q (%v), want %q", tt.line, pe.Field, err, tt.field)
		}
	}
}

func TestReadCountsMalformedWithLineNumbers(t *testing.T) {
	t.Parallel()
	in := strings.Join([]string{
		line1,
		"garbage",
		"",
		line2,
		`1.2.3.4 - - [bad time] "GET / HTTP/1.1" 200 5 "-" "ua"`,
		"x" + strings.Repeat("y", MaxLineLen),
		line8899, // no trailing newline
	}, "\n")
	l, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if got, want := len(l.Entries), 3; got != want {
		t.Fatalf("got %d entries, want %d", got, want)
	}
	for i, want := range []int{1, 4, 7} {
		if got := l.Entries[i].Line; got != want {
			t.Errorf("entry %d: got line %d, want %d", i, got, want)
		}
	}
	if l.Lines != 7 || l.Blank != 1 || l.Malformed != 3 {
		t.Errorf("got lines=%d blank=%d malformed=%d, want 7, 1, 3", l.Lines, l.Blank, l.Malformed)
	}
	wantErr := []struct {
		line  int
		field string
	}{{2, "ident"}, {5, "time"}, {6, "line"}}
	if len(l.Errors) != len(wantErr) {
		t.Fatalf("got %d errors, want %d", len(l.Errors), len(wantErr))
	}
	for i, w := range wantErr {
		var pe *ParseError
		if !errors.As(l.Errors[i], &pe) || pe.Line != w.line || pe.Field != w.field {
			t.Errorf("error %d: got %v, want line %d field %s", i, l.Errors[i], w.line, w.field)
		}
		if !strings.Contains(l.Errors[i].Error(), "line ") {
			t.Errorf("error %d: got %q, want the line number in the message", i, l.Errors[i])
		}
	}
}

func TestReadKeepsFirstErrorsOnly(t *testing.T) {
	t.Parallel()
	l, err := Read(strings.NewReader(strings.Repeat("bad\n", MaxErrors+5)))
	if err != nil {
		t.Fatal(err)
	}
	if l.Malformed != MaxErrors+5 || len(l.Errors) != MaxErrors {
		t.Errorf("got malformed=%d errors=%d, want %d, %d", l.Malformed, len(l.Errors), MaxErrors+5, MaxErrors)
	}
}

// TestBundledLog asserts the facts testdata/README.md states about the log.
func TestBundledLog(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join("..", "..", "..", "..", "testdata", "apache_logs"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if l.Malformed != 0 {
		t.Errorf("got %d malformed lines (%v), want 0", l.Malformed, l.Errors)
	}
	if got, want := len(l.Entries), 10000; got != want {
		t.Errorf("got %d requests, want %d", got, want)
	}
	ips := map[string]bool{}
	truncated := 0
	first, last := l.Entries[0].Time, l.Entries[0].Time
	backwards := 0
	for i, e := range l.Entries {
		ips[e.ClientIP] = true
		if e.Truncated {
			truncated++
		}
		first, last = min(first, e.Time), max(last, e.Time)
		if i > 0 && e.Time < l.Entries[i-1].Time {
			backwards++
		}
	}
	if got, want := len(ips), 1753; got != want {
		t.Errorf("got %d distinct client IPs, want %d", got, want)
	}
	if truncated != 1 {
		t.Errorf("got %d truncated lines, want 1", truncated)
	}
	if backwards == 0 {
		t.Errorf("got monotonic timestamps, want some going backwards (README says so)")
	}
	if got, want := time.Unix(0, first).UTC().Format(time.DateOnly), "2015-05-17"; got != want {
		t.Errorf("got first day %s, want %s", got, want)
	}
	if got, want := time.Unix(0, last).UTC().Format(time.DateOnly), "2015-05-20"; got != want {
		t.Errorf("got last day %s, want %s", got, want)
	}
}

func FuzzParseLine(f *testing.F) {
	for _, s := range []string{line1, line2, line8899, "", `"`, `a b c [`, `a b c [x] "`, `::1 - - [10/Oct/2000:13:55:36 -0700] "\"" 200 -`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		e, err := ParseLine(line)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("got error %v, want it to wrap ErrMalformed", err)
			}
			return
		}
		if e.ClientIP == "" || strings.Contains(e.ClientIP, " ") {
			t.Errorf("got client %q, want a non-empty token", e.ClientIP)
		}
		if e.Status < 100 || e.Status > 999 {
			t.Errorf("got status %d, want 100..999", e.Status)
		}
		if e.Bytes < -1 {
			t.Errorf("got bytes %d, want >= -1", e.Bytes)
		}
		// Read must agree with ParseLine on a single line.
		if !strings.ContainsAny(line, "\n") && strings.TrimSpace(line) != "" && len(line) <= MaxLineLen {
			l, err := Read(strings.NewReader(line))
			if err != nil || len(l.Entries) != 1 {
				t.Fatalf("Read(%q): got %d entries, err %v; want 1 entry", line, len(l.Entries), err)
			}
		}
	})
}
