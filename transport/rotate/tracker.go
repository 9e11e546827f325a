package rotate

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSweepInterval is how often a Tracker started by Run sweeps besides
// the sweeps a change of its Source triggers (1 min): the bound for a
// connection whose certificate expires, and for material changed by a Source
// that is not a Notifier.
const DefaultSweepInterval = time.Minute

// Tracker records the TLS connections a server accepted and the certificate
// chains both sides presented, and closes those whose material was withdrawn
// (Sweep). Connections are tracked when they come from a listener wrapped by
// Listener and are served with a tls.Config passed to Track. Safe for
// concurrent use.
type Tracker struct {
	// Grace is how long a connection stays open once a Sweep found its
	// material withdrawn: the time the dialling side has to replace it
	// without failing what it carries (the node retires its own connections
	// when its material changes). A later Sweep closes it. Default 0: the
	// first Sweep closes it.
	Grace  time.Duration
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed atomic.Uint64
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker { return &Tracker{conns: map[*trackedConn]struct{}{}} }

// Listener wraps ln so that the connections it accepts are tracked from their
// TLS handshake to their Close.
func (t *Tracker) Listener(ln net.Listener) net.Listener { return &trackedListener{Listener: ln, t: t} }

// Track sets cfg.GetConfigForClient so that every handshake on a tracked
// connection records the chains presented by both sides. The previous
// GetConfigForClient, if any, still builds the configuration used; without
// one, cfg itself (a clone read at each handshake, so later changes to its
// VerifyConnection apply) is used. Call it before cfg serves.
func (t *Tracker) Track(cfg *tls.Config) {
	inner := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		tc, ok := h.Conn.(*trackedConn)
		var c *tls.Config
		if inner != nil {
			var err error
			if c, err = inner(h); err != nil || !ok {
				return c, err
			}
		}
		if !ok {
			return nil, nil
		}
		if c == nil {
			c = cfg.Clone()
			c.GetConfigForClient = nil
		}
		var local *tls.Certificate
		if c.GetCertificate != nil {
			cert, err := c.GetCertificate(h)
			if err != nil {
				return nil, err
			}
			c.Certificates, c.GetCertificate = []tls.Certificate{*cert}, nil
			local = cert
		} else if len(c.Certificates) > 0 {
			local = &c.Certificates[0]
		}
		prev := c.VerifyConnection
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if prev != nil {
				if err := prev(cs); err != nil {
					return err
				}
			}
			tc.handshaken(certChain(local), cs.PeerCertificates)
			return nil
		}
		return c, nil
	}
}

// Sweep closes every tracked connection whose material m no longer trusts at
// now (the remote's certificate, when it gave one, or this side's does not
// chain to a CA of m's bundle, or has expired) and has not for Grace. It
// returns how many it closed.
func (t *Tracker) Sweep(m *Material, now time.Time) int {
	t.mu.Lock()
	var drop []*trackedConn
	for c := range t.conns {
		local, peer, done := c.chains()
		switch {
		case !done || m.Trusted(peer, now) && m.Trusted(local, now):
			c.withdrawn = time.Time{}
		case c.withdrawn.IsZero() && t.Grace > 0:
			c.withdrawn = now
		case !now.Before(c.withdrawn.Add(t.Grace)):
			drop = append(drop, c)
		}
	}
	t.mu.Unlock()
	for _, c := range drop {
		_ = c.Close()
	}
	t.closed.Add(uint64(len(drop)))
	return len(drop)
}

// Len returns the number of tracked connections.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// Closed counts the connections Sweep closed.
func (t *Tracker) Closed() uint64 { return t.closed.Load() }

// Run sweeps with src's material every interval (DefaultSweepInterval when
// <= 0) and, when src is a Notifier, at once after each change, until stop
// is closed. Each sweep that closes connections is logged (Info).
func (t *Tracker) Run(src Source, interval time.Duration, stop <-chan struct{}, log *slog.Logger) {
	if interval <= 0 {
		interval = DefaultSweepInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kick := make(chan struct{}, 1)
	if n, ok := src.(Notifier); ok {
		n.OnChange(func() {
			select {
			case kick <- struct{}{}:
			default:
			}
		})
	}
	go func() {
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			case <-kick:
			}
			if n := t.Sweep(src.Material(), time.Now()); n > 0 {
				log.Info("closed connections whose TLS material is no longer trusted", "closed", n)
			}
		}
	}()
}

type trackedListener struct {
	net.Listener
	t *Tracker
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: l.t}
	l.t.mu.Lock()
	l.t.conns[tc] = struct{}{}
	l.t.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	t           *Tracker
	mu          sync.Mutex
	local, peer []*x509.Certificate
	done        bool
	once        sync.Once
	withdrawn   time.Time // when a Sweep first found it withdrawn; under Tracker.mu
}

func (c *trackedConn) handshaken(local, peer []*x509.Certificate) {
	c.mu.Lock()
	c.local, c.peer, c.done = local, peer, true
	c.mu.Unlock()
}

func (c *trackedConn) chains() (local, peer []*x509.Certificate, done bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.local, c.peer, c.done
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}
