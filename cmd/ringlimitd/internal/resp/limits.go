package resp

import (
	"errors"
	"net"
	"strconv"
	"sync/atomic"
)

// errLimit is returned by limitedConn.Read after a request broke a limit and
// its error reply was written; redcon then closes that connection only.
var errLimit = errors.New("resp: request over a limit")

// scanner follows the RESP request stream as it is read, without buffering it,
// and reports the first header that breaks a limit: a multibulk count above
// maxArgs, a bulk length above maxBulk, or an inline command longer than
// maxInline. Anything it cannot follow (a malformed header) is left to redcon's
// own parser, which answers "Protocol error" and closes the connection.
type scanner struct {
	maxArgs, maxBulk, maxInline int64
	// preAuth bounds the bytes of one request while the connection has not
	// authenticated (0: no bound); limitedConn clears it at AUTH.
	preAuth int64
	req     int64 // bytes of the current request so far
	lost    int64 // bytes since the last '\n' once lost

	state    uint8
	line     []byte // current header line, without '\r\n' (at most 32 bytes)
	inline   int64  // bytes of the current inline command
	argsLeft int64  // bulk arguments still expected in the current multibulk
	skip     int64  // payload bytes (plus CRLF) still to pass
}

const (
	stStart  = iota // at the start of a request
	stHeader        // inside a '*' or '$' header line
	stInline        // inside an inline command
	stBulk          // expecting a '$' header of the next argument
	stSkip          // inside a bulk payload
	stLost          // malformed: stop following, redcon will reject it
)

// scan advances over b and returns the offset of the first byte of a request
// that breaks a limit with the error text to reply, or -1 when b is within the
// limits.
func (s *scanner) scan(b []byte) (int, string) {
	for i := 0; i < len(b); i++ {
		switch s.state {
		case stStart:
			s.req = 1
		case stSkip:
			s.req += min(int64(len(b)-i), s.skip)
		default:
			s.req++
		}
		if s.preAuth > 0 && s.req > s.preAuth {
			return i, "ERR Protocol error: request over " + strconv.FormatInt(s.preAuth, 10) + " bytes before AUTH"
		}
		switch s.state {
		case stLost:
			// redcon buffers a header line until its '\n': bound it.
			if b[i] == '\n' {
				s.lost = 0
				continue
			}
			if s.lost++; s.lost > s.maxInline {
				return i, "ERR Protocol error: too big request line (max " + strconv.FormatInt(s.maxInline, 10) + " bytes)"
			}
		case stSkip:
			n := min(int64(len(b)-i), s.skip)
			s.skip -= n
			i += int(n) - 1
			if s.skip == 0 {
				s.state = stBulk
				if s.argsLeft == 0 {
					s.state = stStart
				}
			}
		case stStart:
			switch b[i] {
			case '*':
				s.state, s.line = stHeader, append(s.line[:0], '*')
			case '\r', '\n':
			default:
				s.state, s.inline = stInline, 1
			}
		case stBulk:
			if b[i] != '$' {
				s.state = stLost
				continue
			}
			s.state, s.line = stHeader, append(s.line[:0], '$')
		case stInline:
			if b[i] == '\n' {
				s.state = stStart
				continue
			}
			s.inline++
			if s.inline > s.maxInline {
				return i, "ERR Protocol error: too big inline request (max " + strconv.FormatInt(s.maxInline, 10) + " bytes)"
			}
		case stHeader:
			if b[i] == '\r' {
				continue
			}
			if b[i] != '\n' {
				if len(s.line) >= 32 {
					s.state = stLost
					continue
				}
				s.line = append(s.line, b[i])
				continue
			}
			n, err := strconv.ParseInt(string(s.line[1:]), 10, 64)
			if err != nil {
				s.state = stLost
				continue
			}
			if s.line[0] == '*' {
				if n > s.maxArgs {
					return i, "ERR Protocol error: too many arguments (" + strconv.FormatInt(n, 10) + ", max " + strconv.FormatInt(s.maxArgs, 10) + ")"
				}
				if n <= 0 {
					s.state = stStart
					continue
				}
				s.argsLeft, s.state = n, stBulk
				continue
			}
			if n > s.maxBulk {
				return i, "ERR Protocol error: invalid bulk length (" + strconv.FormatInt(n, 10) + " bytes, max " + strconv.FormatInt(s.maxBulk, 10) + ")"
			}
			if n < 0 {
				s.state = stLost
				continue
			}
			s.argsLeft--
			s.skip, s.state = n+2, stSkip
		}
	}
	return -1, ""
}

// limitedConn passes the bytes of requests within the limits to redcon. At the
// first request over a limit it passes what came before it, so the earlier
// requests are answered; at the next Read (redcon has flushed those answers by
// then) it writes the error reply and fails, and redcon closes this connection.
type limitedConn struct {
	net.Conn
	sc      scanner
	failMsg string
	// authed is set by the server at AUTH: from then on the request bound of
	// an unauthenticated connection (scanner.preAuth) no longer applies.
	authed atomic.Bool
}

func (c *limitedConn) Read(b []byte) (int, error) {
	if c.sc.preAuth > 0 && c.authed.Load() {
		c.sc.preAuth = 0
	}
	if c.failMsg != "" {
		c.Conn.Write([]byte("-" + c.failMsg + "\r\n"))
		return 0, errLimit
	}
	n, err := c.Conn.Read(b)
	if n > 0 {
		if at, msg := c.sc.scan(b[:n]); at >= 0 {
			c.failMsg = msg
			return at, nil
		}
	}
	return n, err
}

// limitedListener wraps every accepted connection in a limitedConn.
type limitedListener struct {
	net.Listener
	maxArgs, maxBulk, maxInline, preAuth int64
}

func (l *limitedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &limitedConn{Conn: c, sc: scanner{maxArgs: l.maxArgs, maxBulk: l.maxBulk, maxInline: l.maxInline, preAuth: l.preAuth}}, nil
}
