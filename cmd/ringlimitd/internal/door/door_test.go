package door

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// served accepts on a pool's listener and hands each admitted connection over.
type served struct {
	ln    *Listener
	pool  *Pool
	conns chan net.Conn
}

func serve(t *testing.T, lim Limits) *served {
	t.Helper()
	p, err := NewPool(lim, 1<<16, prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &served{ln: p.Listen("d", raw), pool: p, conns: make(chan net.Conn, 1024)}
	t.Cleanup(func() { s.ln.Close() })
	go func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				close(s.conns)
				return
			}
			s.conns <- c
		}
	}()
	return s
}

// dial connects from source IP from (127.0.0.x) and returns the client side.
func (s *served) dial(t *testing.T, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// next returns the next admitted server-side connection.
func (s *served) next(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-s.conns:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection admitted within 5s")
		return nil
	}
}

// closedByServer reports whether the server closed the client side c within 5 s.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || isReset(err)
}

func isReset(err error) bool {
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// stillOpen reports whether c stays open for 100 ms.
func stillOpen(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestPerIPCap(t *testing.T) {
	t.Parallel()
	s := serve(t, Limits{MaxConnsPerIP: 2, MaxConns: 100})
	a1, a2 := s.dial(t, "127.0.0.1"), s.dial(t, "127.0.0.1")
	s.next(t)
	s.next(t)
	over := s.dial(t, "127.0.0.1")
	if !closedByServer(t, over) {
		t.Errorf("third connection from 127.0.0.1: still open, want closed at MaxConnsPerIP 2")
	}
	other := s.dial(t, "127.0.0.2")
	s.next(t)
	if !stillOpen(other) || !stillOpen(a1) || !stillOpen(a2) {
		t.Errorf("connections within the caps were closed")
	}
	if got := testutil.ToFloat64(s.pool.closed.WithLabelValues("d", ReasonPerIP)); got != 1 {
		t.Errorf("closed{per_ip}: got %v, want 1", got)
	}
}

func TestFullEvictsOldestUnauthenticated(t *testing.T) {
	t.Parallel()
	s := serve(t, Limits{MaxConns: 3, MaxConnsPerIP: 10})
	var clients []net.Conn
	var srv []net.Conn
	for range 3 {
		clients = append(clients, s.dial(t, "127.0.0.1"))
		srv = append(srv, s.next(t))
	}
	// The second authenticates; the first is the oldest unauthenticated.
	s.ln.Authenticated(srv[1].RemoteAddr().String())
	newer := s.dial(t, "127.0.0.1")
	s.next(t)
	if !closedByServer(t, clients[0]) {
		t.Errorf("oldest unauthenticated connection: still open, want evicted")
	}
	if !stillOpen(clients[1]) || !stillOpen(newer) {
		t.Errorf("authenticated or newest connection closed")
	}
	if got := s.pool.Open(); got != 3 {
		t.Errorf("Open: got %d, want 3", got)
	}
	// All authenticated: a new connection is refused instead.
	s.ln.Authenticated(srv[2].RemoteAddr().String())
	s.ln.Authenticated(newer.LocalAddr().String())
	refused := s.dial(t, "127.0.0.1")
	if !closedByServer(t, refused) {
		t.Errorf("connection at MaxConns with all authenticated: still open, want refused")
	}
	if got := testutil.ToFloat64(s.pool.closed.WithLabelValues("d", ReasonFull)); got != 1 {
		t.Errorf("closed{full}: got %v, want 1", got)
	}
	if got := testutil.ToFloat64(s.pool.closed.WithLabelValues("d", ReasonEvicted)); got != 1 {
		t.Errorf("closed{evicted}: got %v, want 1", got)
	}
}

func TestAuthTimeout(t *testing.T) {
	t.Parallel()
	s := serve(t, Limits{AuthTimeout: 50 * time.Millisecond})
	idle, authed := s.dial(t, "127.0.0.1"), s.dial(t, "127.0.0.1")
	s.next(t)
	s.next(t)
	s.ln.Authenticated(authed.LocalAddr().String())
	if !closedByServer(t, idle) {
		t.Errorf("unauthenticated connection: open past AuthTimeout, want closed")
	}
	if !stillOpen(authed) {
		t.Errorf("authenticated connection closed at AuthTimeout")
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.pool.Open() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := s.pool.Open(); got != 1 {
		t.Errorf("Open: got %d, want 1", got)
	}
}

func TestRefusedClosesAtMaxFailures(t *testing.T) {
	t.Parallel()
	s := serve(t, Limits{MaxAuthFailures: 2, AuthFailureDelay: time.Millisecond})
	c := s.dial(t, "127.0.0.1")
	s.next(t)
	remote := c.LocalAddr().String()
	if s.ln.Refused(remote) {
		t.Fatal("first refusal closed the connection, want open until the second")
	}
	if !stillOpen(c) {
		t.Fatal("connection closed after one refusal")
	}
	if !s.ln.Refused(remote) {
		t.Error("second refusal: not closed, want closed at MaxAuthFailures 2")
	}
	if !closedByServer(t, c) {
		t.Error("connection still open after MaxAuthFailures")
	}
}

func TestLimitsDefaultsAndErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		nofile uint64
		want   int
	}{{1024, 768}, {20000, DefaultMaxConnsCeiling}, {4096, 3584}, {100, 16}, {1 << 20, DefaultMaxConnsCeiling}} {
		if got := DefaultMaxConns(tc.nofile); got != tc.want {
			t.Errorf("DefaultMaxConns(%d): got %d, want %d", tc.nofile, got, tc.want)
		}
	}
	if _, err := NewPool(Limits{MaxConnsPerIP: -1}, 1024, nil, "x"); !errors.Is(err, ErrLimits) {
		t.Errorf("MaxConnsPerIP -1: got %v, want ErrLimits", err)
	}
	p, err := NewPool(Limits{}, 1024, nil, "x")
	if err != nil {
		t.Fatal(err)
	}
	if l := p.Limits(); l.MaxConns != 768 || l.MaxConnsPerIP != DefaultMaxConnsPerIP || l.AuthTimeout != DefaultAuthTimeout {
		t.Errorf("defaults: got %+v", l)
	}
}

func TestIPKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ addr, want string }{
		{"10.1.2.3:5", "10.1.2.3"},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:80", "2001:db8:1:2::/64"},
	} {
		a, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := ipKey(a); got != tc.want {
			t.Errorf("ipKey(%s): got %s, want %s", tc.addr, got, tc.want)
		}
	}
}

// BenchmarkAuthenticatedMarked is what every authenticated request adds on
// a door: Authenticated on a connection marked already (a sync.Map lookup
// and an atomic load, no lock), from parallel callers.
//
//	go test -run XXX -bench AuthenticatedMarked -cpu 1,2 ./cmd/ringlimitd/internal/door/
func BenchmarkAuthenticatedMarked(b *testing.B) {
	p, err := NewPool(Limits{}, 1<<16, nil, "bench")
	if err != nil {
		b.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ln := p.Listen("d", raw)
	defer ln.Close()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	sc, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	remote := sc.RemoteAddr().String()
	ln.Authenticated(remote)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ln.Authenticated(remote)
		}
	})
}
