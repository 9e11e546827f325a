// Package accesslog parses Apache access logs in the combined format (and the
// common format, its prefix) into Entries that ringlimit replay sends through a
// cluster.
//
// A line flows through ParseLine field by field, left to right:
//
//	%h %l %u [%t] "%r" %>s %b "%{Referer}i" "%{User-agent}i"
//	83.149.9.216 - - [17/May/2015:10:05:03 +0000] "GET /x.png HTTP/1.1" 200 203023 "http://r/" "Mozilla/5.0"
//
// The first field that does not fit stops the parse with a *ParseError naming the
// line and the field; the error wraps ErrMalformed. Read applies ParseLine to a
// whole log, keeps every well-formed entry, and counts (rather than stops at)
// malformed lines, so one bad line does not hide the rest of a real log.
package accesslog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ErrMalformed is wrapped by every *ParseError: the line is not an Apache common
// or combined log line.
var ErrMalformed = errors.New("accesslog: malformed line")

// TimeLayout is the layout of the %t field between its brackets, as in
// "17/May/2015:10:05:03 +0000".
const TimeLayout = "02/Jan/2006:15:04:05 -0700"

// MaxLineLen is the longest line, in bytes without its newline, that Read
// accepts (64 KiB). A longer line is counted as malformed and skipped.
const MaxLineLen = 64 << 10

// MaxErrors is the number of *ParseError values Read keeps in Log.Errors; the
// rest are only counted in Log.Malformed.
const MaxErrors = 10

// Entry is one parsed request.
type Entry struct {
	// Line is the 1-based line number in the log (0 when parsed by ParseLine).
	Line int
	// ClientIP is the %h field: the client address (or host name when the server
	// ran with HostnameLookups). Never empty.
	ClientIP string
	// Ident and User are the %l and %u fields, "-" when absent.
	Ident, User string
	// Time is the %t field in Unix nanoseconds (UTC; the log's offset applied).
	Time int64
	// Request is the %r field, unescaped (\" and \\); Method, Path and Proto are
	// its space-separated parts, empty when the request line has fewer parts
	// (a malformed request is still a request the server logged).
	Request, Method, Path, Proto string
	// Status is the %>s field, in [100, 999].
	Status int
	// Bytes is the %b field, the response size in bytes; -1 when logged as "-".
	Bytes int64
	// Referer and UserAgent are the quoted combined-format fields, unescaped;
	// empty for a common-format line.
	Referer, UserAgent string
	// Truncated reports that the line ended inside the user-agent field (its
	// closing quote is missing); UserAgent holds the rest of the line.
	Truncated bool
}

// ParseError describes a malformed line. It wraps ErrMalformed.
type ParseError struct {
	// Line is the 1-based line number (0 when the error comes from ParseLine).
	Line int
	// Field names the field that did not parse: "line", "client", "ident",
	// "user", "time", "request", "status", "bytes", "referer" or "user-agent".
	Field string
	// Reason says what was wrong with the field.
	Reason string
}

// Error returns "accesslog: malformed line 12: time: ...".
func (e *ParseError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%v %d: %s: %s", ErrMalformed, e.Line, e.Field, e.Reason)
	}
	return fmt.Sprintf("%v: %s: %s", ErrMalformed, e.Field, e.Reason)
}

// Unwrap returns ErrMalformed.
func (e *ParseError) Unwrap() error { return ErrMalformed }

// ParseLine parses one line (without its newline; a trailing "\r" is ignored).
// It returns a *ParseError (wrapping ErrMalformed) when the line is not an
// Apache common or combined log line. Fields after the user-agent are ignored.
func ParseLine(line string) (Entry, error) {
	var e Entry
	p := parser{s: strings.TrimSuffix(line, "\r")}
	fail := func(field, format string, args ...any) (Entry, error) {
		return Entry{}, &ParseError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	var ok bool
	if e.ClientIP, ok = p.token(); !ok {
		return fail("client", "missing")
	}
	if e.Ident, ok = p.token(); !ok {
		return fail("ident", "missing")
	}
	if e.User, ok = p.token(); !ok {
		return fail("user", "missing")
	}
	ts, err := p.bracketed()
	if err != nil {
		return fail("time", "%v", err)
	}
	t, err := time.Parse(TimeLayout, ts)
	if err != nil {
		return fail("time", "%q does not match %q", ts, TimeLayout)
	}
	e.Time = t.UnixNano()
	req, closed, err := p.quoted()
	if err != nil {
		return fail("request", "%v", err)
	}
	if !closed {
		return fail("request", "missing closing quote")
	}
	e.Request = req
	parts := strings.SplitN(req, " ", 3)
	if len(parts) >= 2 {
		e.Method, e.Path = parts[0], parts[1]
	}
	if len(parts) == 3 {
		e.Proto = parts[2]
	}
	st, ok := p.token()
	if !ok {
		return fail("status", "missing")
	}
	if len(st) != 3 || st[0] < '1' || st[0] > '9' {
		return fail("status", "%q is not a 3-digit HTTP status", st)
	}
	if e.Status, err = strconv.Atoi(st); err != nil {
		return fail("status", "%q is not a 3-digit HTTP status", st)
	}
	b, ok := p.token()
	if !ok {
		return fail("bytes", "missing")
	}
	if b == "-" {
		e.Bytes = -1
	} else if e.Bytes, err = strconv.ParseInt(b, 10, 64); err != nil || e.Bytes < 0 || b[0] == '+' {
		return fail("bytes", "%q is neither a byte count nor \"-\"", b)
	}
	if p.done() { // common log format
		return e, nil
	}
	ref, closed, err := p.quoted()
	if err != nil {
		return fail("referer", "%v", err)
	}
	if !closed {
		return fail("referer", "missing closing quote")
	}
	e.Referer = ref
	ua, closed, err := p.quoted()
	if err != nil {
		return fail("user-agent", "%v", err)
	}
	e.UserAgent, e.Truncated = ua, !closed
	return e, nil
}

// parser walks a line left to right; fields are separated by single or
// repeated spaces.
type parser struct {
	s string
	i int
}

func (p *parser) skipSpaces() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *parser) done() bool {
	p.skipSpaces()
	return p.i >= len(p.s)
}

// token returns the next space-delimited field.
func (p *parser) token() (string, bool) {
	p.skipSpaces()
	start := p.i
	for p.i < len(p.s) && p.s[p.i] != ' ' {
		p.i++
	}
	return p.s[start:p.i], p.i > start
}

// bracketed returns the text of the next "[...]" field.
func (p *parser) bracketed() (string, error) {
	p.skipSpaces()
	if p.i >= len(p.s) {
		return "", errors.New("missing")
	}
	if p.s[p.i] != '[' {
		return "", fmt.Errorf("want '[', got %q", p.s[p.i])
	}
	end := strings.IndexByte(p.s[p.i:], ']')
	if end < 0 {
		return "", errors.New("missing ']'")
	}
	v := p.s[p.i+1 : p.i+end]
	p.i += end + 1
	return v, nil
}

// quoted returns the unescaped text of the next "..." field and whether its
// closing quote was found (false: the line ended inside the field).
func (p *parser) quoted() (string, bool, error) {
	p.skipSpaces()
	if p.i >= len(p.s) {
		return "", false, errors.New("missing")
	}
	if p.s[p.i] != '"' {
		return "", false, fmt.Errorf("want '\"', got %q", p.s[p.i])
	}
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			if p.i < len(p.s) && p.s[p.i] != ' ' {
				return "", false, fmt.Errorf("want ' ' after closing quote, got %q", p.s[p.i])
			}
			return b.String(), true, nil
		case c == '\\' && p.i+1 < len(p.s) && (p.s[p.i+1] == '"' || p.s[p.i+1] == '\\'):
			b.WriteByte(p.s[p.i+1])
			p.i += 2
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return b.String(), false, nil
}

// Log is the result of Read.
type Log struct {
	// Entries are the well-formed lines in file order.
	Entries []Entry
	// Lines is the number of lines read, blank lines included.
	Lines int
	// Blank is the number of empty (or whitespace-only) lines, which are skipped
	// and not counted as malformed.
	Blank int
	// Malformed is the number of lines skipped because they did not parse.
	Malformed int
	// Errors holds the *ParseError of the first MaxErrors malformed lines.
	Errors []error
}

// Read parses every line of r. Malformed lines (including lines longer than
// MaxLineLen) are skipped and counted in Log.Malformed, the first MaxErrors of
// them kept in Log.Errors; a returned error is an I/O error from r, with the
// Log read so far.
func Read(r io.Reader) (*Log, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	l := &Log{}
	for {
		line, tooLong, err := readLine(br)
		if err == io.EOF && line == "" && !tooLong {
			return l, nil
		}
		if err != nil && err != io.EOF {
			return l, fmt.Errorf("accesslog: read line %d: %w", l.Lines+1, err)
		}
		l.Lines++
		switch {
		case tooLong:
			l.malformed(&ParseError{Line: l.Lines, Field: "line", Reason: fmt.Sprintf("longer than %d bytes", MaxLineLen)})
		case strings.TrimSpace(line) == "":
			l.Blank++
		default:
			e, perr := ParseLine(line)
			if perr != nil {
				pe := perr.(*ParseError)
				pe.Line = l.Lines
				l.malformed(pe)
				break
			}
			e.Line = l.Lines
			l.Entries = append(l.Entries, e)
		}
		if err == io.EOF {
			return l, nil
		}
	}
}

func (l *Log) malformed(err *ParseError) {
	l.Malformed++
	if len(l.Errors) < MaxErrors {
		l.Errors = append(l.Errors, err)
	}
}

// readLine returns the next line without its newline. tooLong reports a line
// over MaxLineLen, whose bytes are discarded. err is io.EOF after the last line.
func readLine(br *bufio.Reader) (line string, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > MaxLineLen+2 { // room for "\r\n"
				tooLong, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		switch err {
		case bufio.ErrBufferFull:
			continue
		case nil:
			s := strings.TrimSuffix(string(buf), "\n")
			if len(strings.TrimSuffix(s, "\r")) > MaxLineLen {
				return "", true, nil
			}
			return s, tooLong, nil
		default:
			if len(buf) > MaxLineLen {
				return "", true, err
			}
			return string(buf), tooLong, err
		}
	}
}
