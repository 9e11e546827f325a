// Package redistest is a test helper (like net/http/httptest): it starts a real redis-server (Debian's /usr/bin/redis-server,
// or the one on PATH) for a test: on a free loopback port, with persistence off
// (--save "" --appendonly no), stopped at the test's cleanup. It can kill
// (SIGKILL) and restart the server on the same port, and freeze it (SIGSTOP) and
// thaw it (SIGCONT), for failover tests.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Start starts a redis-server for t and registers its stop at t's cleanup. It
// skips t with a message when redis-server is not installed (.ci/run installs
// it) and fails t when the server does not answer PING within 10 s.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server; .ci/run does it): skipping the real-Redis test")
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	var last error
	for range 20 { // a free port may be taken between Listen and redis's bind: retry
		s.port, err = freePort()
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		if last = s.start(); last == nil {
			t.Cleanup(s.stop)
			return s
		}
	}
	t.Fatalf("redis-server did not start: %v", last)
	return nil
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns redis://host:port/0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Client returns a go-redis client to the server, closed at t's cleanup.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	s.t.Cleanup(func() { c.Close() })
	return c
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs redis-server on s.port and waits until it answers PING.
func (s *Server) start() error {
	cmd := exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--daemonize", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-done:
			return fmt.Errorf("redis-server on port %d exited: %v", s.port, err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.mu.Lock()
			s.cmd = cmd
			s.mu.Unlock()
			go func() { <-done }() // reaped by Wait above; keep the channel drained
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return errors.Join(fmt.Errorf("redis-server on port %d: no PING answer", s.port), err)
		}
		time.Sleep(20 * time.Millisecond) // polling a process that is starting: no event to wait on
	}
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		if err := s.cmd.Process.Signal(sig); err != nil {
			s.t.Errorf("signal %v to redis-server: %v", sig, err)
		}
	}
}

// Kill sends SIGKILL and waits until the port is free again.
func (s *Server) Kill() {
	s.signal(syscall.SIGKILL)
	s.mu.Lock()
	s.cmd = nil
	s.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		l, err := net.Listen("tcp", s.Addr())
		if err == nil {
			l.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Errorf("port %d still busy after SIGKILL", s.port)
}

// Restart starts a new redis-server on the same port (empty: no persistence).
func (s *Server) Restart() {
	if err := s.start(); err != nil {
		s.t.Fatalf("restart redis-server: %v", err)
	}
}

// Freeze sends SIGSTOP: the server keeps its connections but answers nothing.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw sends SIGCONT.
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
	}
}
