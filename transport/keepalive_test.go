package transport

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// grpc-go raises a client's keepalive Time below 10s to 10s, so a test cannot
// make a grpc-go client ping fast. These tests ping the server from a raw
// HTTP/2 connection instead, at a 50ms client "Time", and check what the
// server's enforcement policy does with it.

// pingServer opens an HTTP/2 connection to addr, sends a ping every interval
// for d, then one more, and reports whether that last ping was acknowledged and
// the GOAWAY debug data the server sent, if any.
func pingServer(t *testing.T, addr string, interval, d time.Duration) (alive bool, goAway string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	var wmu sync.Mutex // the reader acks settings while the test pings
	write := func(f func() error) error {
		wmu.Lock()
		defer wmu.Unlock()
		return f()
	}
	if err := write(func() error { return fr.WriteSettings() }); err != nil {
		t.Fatal(err)
	}
	last := [8]byte{'l', 'a', 's', 't'}
	acked := make(chan struct{})
	away := make(chan string, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = write(func() error { return fr.WriteSettingsAck() })
				}
			case *http2.PingFrame:
				if f.IsAck() && bytes.Equal(f.Data[:], last[:]) {
					close(acked)
				}
			case *http2.GoAwayFrame:
				away <- string(f.DebugData())
				return
			}
		}
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	end := time.After(d)
	n := uint64(0)
loop:
	for {
		select {
		case <-tick.C:
			n++
			var data [8]byte
			data[0] = byte(n)
			if err := write(func() error { return fr.WritePing(false, data) }); err != nil {
				break loop
			}
		case <-end:
			break loop
		case g := <-away:
			return false, g
		}
	}
	if err := write(func() error { return fr.WritePing(false, last) }); err != nil {
		return false, <-away
	}
	select {
	case <-acked:
		return true, ""
	case g := <-away:
		return false, g
	case <-time.After(5 * time.Second):
		return false, ""
	}
}

func TestKeepaliveWithinMinTimeKeepsConnection(t *testing.T) {
	t.Parallel()
	// Client Time 50ms, server MinTime 25ms: at most half the client interval,
	// as the defaults are (5s vs 10s), so scheduling jitter never looks like
	// abuse.
	addr, _ := startServer(t, ServerConfig{KeepaliveMinTime: 25 * time.Millisecond}, &fakePeer{}, nil)
	alive, goAway := pingServer(t, addr, 50*time.Millisecond, 400*time.Millisecond)
	if !alive || goAway != "" {
		t.Fatalf("got alive=%v goaway=%q, want the connection to survive 400ms of 50ms pings", alive, goAway)
	}
}

func TestKeepaliveFasterThanMinTimeIsRefused(t *testing.T) {
	t.Parallel()
	// The same pings against a server that wants 1s between pings: proves
	// pingServer detects too_many_pings.
	addr, _ := startServer(t, ServerConfig{KeepaliveMinTime: time.Second}, &fakePeer{}, nil)
	_, goAway := pingServer(t, addr, 50*time.Millisecond, 400*time.Millisecond)
	if goAway != "too_many_pings" {
		t.Fatalf("got goaway %q, want too_many_pings", goAway)
	}
}

func TestKeepaliveDefaultsAgree(t *testing.T) {
	t.Parallel()
	if DefaultServerKeepaliveMinTime > DefaultKeepaliveTime/2 {
		t.Fatalf("server MinTime %v must be <= half the client Time %v", DefaultServerKeepaliveMinTime, DefaultKeepaliveTime)
	}
	if got := (ServerConfig{}).withDefaults().KeepaliveMinTime; got != DefaultServerKeepaliveMinTime {
		t.Fatalf("got MinTime %v, want %v", got, DefaultServerKeepaliveMinTime)
	}
	cfg, err := (ClientConfig{}).withDefaults()
	if err != nil || cfg.KeepaliveTime != DefaultKeepaliveTime {
		t.Fatalf("got Time %v, %v, want %v", cfg.KeepaliveTime, err, DefaultKeepaliveTime)
	}
}
