// Package door is what every listener of ringlimitd has in common before a
// caller is known: connection caps (in total and per source address), a
// deadline to authenticate, throttling of failed credentials, and metrics of
// what was refused. A front door (gRPC, HTTP, RESP, admin) serves on a
// *Listener and tells it when a connection authenticated (Authenticated) or
// failed to (Refused); everything else is here, written once.
//
// Data flow: Pool.Listen wraps a net.Listener. Each Accept of the wrapper takes
// a connection from the kernel and admits it into the Pool, which may be shared
// by several listeners (the client doors share one, so their sum stays below
// the file-descriptor limit with room left for the admin and peer ports):
//
//   - over Limits.MaxConnsPerIP for its source address (IPv4 address, or IPv6
//     /64): closed at once;
//   - at Limits.MaxConns: the pool closes its oldest connection that has not
//     authenticated yet to make room; when every open connection has
//     authenticated, the new one is closed instead;
//   - admitted: a timer closes it unless the door calls Authenticated within
//     Limits.AuthTimeout (this deadline covers the TLS handshake too).
//
// An admitted connection that fails authentication Limits.MaxAuthFailures times
// is closed; each refusal waits Limits.AuthFailureDelay first (Refused sleeps in
// the caller's goroutine, so only that caller waits). Idle deadlines of
// authenticated connections belong to each protocol's server (HTTP IdleTimeout,
// gRPC keepalive MaxConnectionIdle, redcon's idle close) and are set by the
// daemon from the same configuration.
package door

import (
	"container/list"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Limits.
const (
	// DefaultMaxConnsCeiling bounds the MaxConns that DefaultMaxConns derives
	// from the file-descriptor limit: an idle connection costs a door about
	// 20–25 KiB (an 8 KiB goroutine stack, redcon's three 4 KiB buffers, TLS
	// state), so 6,000 held by an attacker cost about 150 MB (measured by the
	// daemon's TestDoorsUnderConnectionFlood). Raise it with --max-conns.
	DefaultMaxConnsCeiling = 6000
	// DefaultMaxConnsPerIP is the default Limits.MaxConnsPerIP.
	DefaultMaxConnsPerIP = 1024
	// DefaultAuthTimeout is the default Limits.AuthTimeout.
	DefaultAuthTimeout = 10 * time.Second
	// DefaultMaxAuthFailures is the default Limits.MaxAuthFailures.
	DefaultMaxAuthFailures = 3
	// DefaultAuthFailureDelay is the default Limits.AuthFailureDelay.
	DefaultAuthFailureDelay = 250 * time.Millisecond
)

// ErrLimits is wrapped by NewPool's error for invalid Limits.
var ErrLimits = errors.New("door: invalid limits")

// Limits bounds the connections of a Pool. Zero fields take the defaults
// named on each; negative values are invalid.
type Limits struct {
	// MaxConns bounds the open connections of every listener of the pool
	// together. Default DefaultMaxConns(fd limit) when zero.
	MaxConns int
	// MaxConnsPerIP bounds the open connections from one source address (an
	// IPv4 address or an IPv6 /64), in every state. Default
	// DefaultMaxConnsPerIP.
	MaxConnsPerIP int
	// AuthTimeout is the time from accept within which a connection must
	// complete its TLS handshake and present a valid credential (the door
	// calls Authenticated); it is closed otherwise. Default DefaultAuthTimeout.
	AuthTimeout time.Duration
	// MaxAuthFailures closes a connection at its Nth refused credential.
	// Default DefaultMaxAuthFailures.
	MaxAuthFailures int
	// AuthFailureDelay is how long Refused waits before the door answers a
	// refused credential. Default DefaultAuthFailureDelay.
	AuthFailureDelay time.Duration
}

// DefaultMaxConns is the default Limits.MaxConns for a process that may open
// nofile descriptors: nofile less a reserve of max(256, nofile/8) for the
// admin and peer ports, the gossip port, outgoing peer connections and files,
// and at most DefaultMaxConnsCeiling; at least 16.
func DefaultMaxConns(nofile uint64) int {
	reserve := max(256, nofile/8)
	if nofile <= reserve+16 {
		return 16
	}
	return int(min(nofile-reserve, DefaultMaxConnsCeiling))
}

func (l *Limits) applyDefaults(nofile uint64) error {
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxConns", &l.MaxConns, DefaultMaxConns(nofile)},
		{"MaxConnsPerIP", &l.MaxConnsPerIP, DefaultMaxConnsPerIP},
		{"MaxAuthFailures", &l.MaxAuthFailures, DefaultMaxAuthFailures},
	} {
		if *f.v < 0 {
			return fmt.Errorf("%w: %s %d must be >= 0 (0: default)", ErrLimits, f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"AuthTimeout", &l.AuthTimeout, DefaultAuthTimeout},
		{"AuthFailureDelay", &l.AuthFailureDelay, DefaultAuthFailureDelay},
	} {
		if *f.v < 0 {
			return fmt.Errorf("%w: %s %v must be >= 0 (0: default)", ErrLimits, f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return nil
}

// Reasons a connection is closed by the pool, the "reason" label of
// ringlimit_door_closed_total.
const (
	ReasonPerIP        = "per_ip"        // over MaxConnsPerIP at accept
	ReasonFull         = "full"          // at MaxConns, every connection authenticated
	ReasonEvicted      = "evicted"       // unauthenticated, closed to admit a newer one at MaxConns
	ReasonAuthTimeout  = "auth_timeout"  // not authenticated within AuthTimeout
	ReasonAuthFailures = "auth_failures" // MaxAuthFailures refused credentials
)

// Pool admits the connections of one or more Listeners within one Limits.
// Safe for concurrent use.
type Pool struct {
	lim Limits

	mu     sync.Mutex
	total  int
	perIP  map[string]int
	unauth *list.List // of *Conn not yet authenticated, oldest first
	// conns finds a connection by door and remote address: written once per
	// connection, read on every request (Authenticated's fast path).
	conns sync.Map // connKey -> *Conn

	accepted atomic.Int64

	open   *prometheus.GaugeVec
	closed *prometheus.CounterVec
}

type connKey struct {
	door, remote string
}

// NewPool returns a Pool enforcing lim (zero fields: defaults; MaxConns'
// default derives from nofile, the process's file-descriptor limit). Its
// metrics are registered with reg when reg is not nil; the error then wraps
// the registry's. Invalid limits wrap ErrLimits.
func NewPool(lim Limits, nofile uint64, reg prometheus.Registerer, name string) (*Pool, error) {
	if err := lim.applyDefaults(nofile); err != nil {
		return nil, err
	}
	p := &Pool{
		lim:    lim,
		perIP:  map[string]int{},
		unauth: list.New(),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "ringlimit_door_connections",
			Help:        "Open connections by door and state (\"authenticated\" or \"unauthenticated\").",
			ConstLabels: prometheus.Labels{"pool": name},
		}, []string{"door", "state"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "ringlimit_door_closed_total",
			Help:        "Connections closed by the door layer, by door and reason (per_ip, full, evicted, auth_timeout, auth_failures).",
			ConstLabels: prometheus.Labels{"pool": name},
		}, []string{"door", "reason"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{p.open, p.closed} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("door: register metrics: %w", err)
			}
		}
	}
	return p, nil
}

// Limits returns the pool's limits with the defaults applied.
func (p *Pool) Limits() Limits { return p.lim }

// Accepted returns how many connections the pool's listeners took from the
// kernel so far, admitted or not.
func (p *Pool) Accepted() int64 { return p.accepted.Load() }

// Open returns the connections open on every listener of the pool.
func (p *Pool) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// Listen wraps ln: its Accept returns only connections the pool admitted.
// door names the listener in metrics and in Authenticated and Refused.
func (p *Pool) Listen(door string, ln net.Listener) *Listener {
	return &Listener{Listener: ln, pool: p, door: door}
}

// Listener is a net.Listener whose connections the pool admitted. The door
// serving it reports each connection's authentication by its remote address.
type Listener struct {
	net.Listener
	pool *Pool
	door string
}

// Accept waits for the next connection the pool admits; connections it
// refuses are closed and counted without returning.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.pool.admit(l.door, nc); c != nil {
			return c, nil
		}
	}
}

// Authenticated marks the connection from remote (its RemoteAddr().String())
// as authenticated: no longer subject to AuthTimeout nor evicted at MaxConns.
// Unknown addresses are ignored. Cheap when already marked.
func (l *Listener) Authenticated(remote string) {
	l.pool.authenticated(l.door, remote)
}

// Refused records a refused credential on the connection from remote: it
// sleeps Limits.AuthFailureDelay, then closes the connection if this was its
// MaxAuthFailures-th refusal, and reports whether it did.
func (l *Listener) Refused(remote string) (closed bool) {
	time.Sleep(l.pool.lim.AuthFailureDelay)
	return l.pool.refused(l.door, remote)
}

// Conn is an admitted connection.
type Conn struct {
	net.Conn
	pool     *Pool
	key      connKey
	ip       string
	authed   atomic.Bool
	failures int           // under pool.mu
	elem     *list.Element // in pool.unauth while not authenticated; under pool.mu
	timer    *time.Timer
	once     sync.Once
}

// Close closes the connection and releases its place in the pool. Safe to
// call twice.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// NetConn returns the wrapped connection.
func (c *Conn) NetConn() net.Conn { return c.Conn }

func (c *Conn) release() {
	p := c.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	p.total--
	if p.perIP[c.ip]--; p.perIP[c.ip] <= 0 {
		delete(p.perIP, c.ip)
	}
	p.conns.CompareAndDelete(c.key, c)
	state := "authenticated"
	if c.elem != nil {
		p.unauth.Remove(c.elem)
		c.elem = nil
		state = "unauthenticated"
	}
	p.open.WithLabelValues(c.key.door, state).Dec()
}

// ipKey is the per-source key of addr: the IPv4 address, or the /64 of an IPv6
// address (one host commonly holds a whole /64).
func ipKey(addr net.Addr) string {
	var ip net.IP
	switch a := addr.(type) {
	case *net.TCPAddr:
		ip = a.IP
	default:
		host, _, err := net.SplitHostPort(addr.String())
		if err != nil {
			return addr.String()
		}
		ip = net.ParseIP(host)
		if ip == nil {
			return host
		}
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// admit decides on nc: the admitted *Conn, or nil after closing nc.
func (p *Pool) admit(door string, nc net.Conn) *Conn {
	p.accepted.Add(1)
	ip := ipKey(nc.RemoteAddr())
	c := &Conn{Conn: nc, pool: p, key: connKey{door, nc.RemoteAddr().String()}, ip: ip}
	var evict *Conn
	p.mu.Lock()
	if p.perIP[ip] >= p.lim.MaxConnsPerIP {
		p.mu.Unlock()
		p.closed.WithLabelValues(door, ReasonPerIP).Inc()
		nc.Close()
		return nil
	}
	if p.total >= p.lim.MaxConns {
		front := p.unauth.Front()
		if front == nil {
			p.mu.Unlock()
			p.closed.WithLabelValues(door, ReasonFull).Inc()
			nc.Close()
			return nil
		}
		// Make room now, in the count, so that concurrent accepts on other
		// listeners of the pool cannot overshoot; the evicted connection's
		// own release then finds it already taken out.
		evict = front.Value.(*Conn)
		p.unauth.Remove(front)
		evict.elem = nil
		p.total--
		if p.perIP[evict.ip]--; p.perIP[evict.ip] <= 0 {
			delete(p.perIP, evict.ip)
		}
		p.conns.CompareAndDelete(evict.key, evict)
		p.open.WithLabelValues(evict.key.door, "unauthenticated").Dec()
		evict.once.Do(func() {}) // its release is done here
	}
	p.total++
	p.perIP[ip]++
	p.conns.Store(c.key, c)
	c.elem = p.unauth.PushBack(c)
	p.open.WithLabelValues(door, "unauthenticated").Inc()
	c.timer = time.AfterFunc(p.lim.AuthTimeout, func() {
		if !c.authed.Load() {
			p.closed.WithLabelValues(door, ReasonAuthTimeout).Inc()
			c.Close()
		}
	})
	p.mu.Unlock()
	if evict != nil {
		evict.timer.Stop()
		p.closed.WithLabelValues(evict.key.door, ReasonEvicted).Inc()
		evict.Conn.Close()
	}
	return c
}

// lookup returns the admitted connection of door from remote, nil if none.
func (p *Pool) lookup(door, remote string) *Conn {
	v, ok := p.conns.Load(connKey{door, remote})
	if !ok {
		return nil
	}
	return v.(*Conn)
}

func (p *Pool) authenticated(door, remote string) {
	c := p.lookup(door, remote)
	if c == nil || c.authed.Load() {
		return // unknown, or marked already: no lock on the request path
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.authed.Load() {
		return
	}
	c.authed.Store(true)
	c.timer.Stop()
	if c.elem != nil {
		p.unauth.Remove(c.elem)
		c.elem = nil
		p.open.WithLabelValues(door, "unauthenticated").Dec()
		p.open.WithLabelValues(door, "authenticated").Inc()
	}
}

func (p *Pool) refused(door, remote string) bool {
	c := p.lookup(door, remote)
	if c == nil {
		return false
	}
	p.mu.Lock()
	c.failures++
	shut := c.failures >= p.lim.MaxAuthFailures
	p.mu.Unlock()
	if shut {
		p.closed.WithLabelValues(door, ReasonAuthFailures).Inc()
		c.Close()
	}
	return shut
}
