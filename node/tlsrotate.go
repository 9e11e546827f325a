package node

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ringlimit/ringlimit/transport/pki"
	"github.com/ringlimit/ringlimit/transport/rotate"
)

// TLS rotation (secure mode): the node reads its material from a
// rotate.Source at every handshake, so a new certificate, key or CA bundle
// takes effect without a restart; the peer connections it accepted are
// closed by a sweep once the material they were authenticated with is no
// longer trusted (see Config.TLSSweepInterval), and the dialling member
// reconnects with the current material.

// defaultCertExpiryWarning is Config.CertExpiryWarning's default.
const defaultCertExpiryWarning = 14 * 24 * time.Hour

// ErrNoFiles is returned by ReloadTLS when the node's material does not come
// from files (PEM fields, TLSSource, or insecure mode).
var ErrNoFiles = errors.New("node: TLS material does not come from files")

// openTLS returns this member's TLS source: Config.TLSSource, a rotate.Files
// over the TLS*File fields (watched once the node runs, see watchTLS), or a
// static source of the PEM fields (or the test CA). Every version must name
// cfg.Name and chain to its own bundle.
func (n *Node) openTLS() (rotate.Source, error) {
	cfg := n.cfg
	check := func(m *rotate.Material) error {
		if name, _ := pki.MemberName(m.Cert.Leaf); name != cfg.Name && !cfg.anyCertName {
			if name == "" {
				return fmt.Errorf("%w: certificate %q is not a node certificate (no %s://%s/ URI or usages)", rotate.ErrInvalid, m.Cert.Leaf.Subject.CommonName, pki.Scheme, pki.MemberHost)
			}
			return fmt.Errorf("%w: TLS certificate names member %q, but Name is %q", rotate.ErrInvalid, name, cfg.Name)
		}
		return rotate.CheckChain(m)
	}
	switch {
	case cfg.TLSSource != nil:
		m := cfg.TLSSource.Material()
		if m == nil || m.Cert == nil || m.Cert.Leaf == nil || m.Roots == nil {
			return nil, fmt.Errorf("%w: TLSSource gave no material (want Cert with Leaf, Roots)", ErrInvalidConfig)
		}
		if err := check(m); err != nil {
			return nil, fmt.Errorf("%w: TLSSource: %w", ErrInvalidConfig, err)
		}
		return cfg.TLSSource, nil
	case cfg.TLSCAFile != "" || cfg.TLSCertFile != "" || cfg.TLSKeyFile != "":
		if cfg.TLSCAFile == "" || cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" {
			return nil, fmt.Errorf("%w: TLSCAFile, TLSCertFile and TLSKeyFile go together (mixing files and PEM fields does not rotate)", ErrInvalidConfig)
		}
		f, err := rotate.NewFiles(rotate.FilesConfig{CAFile: cfg.TLSCAFile, CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile,
			Check: check, Logger: n.log.With("component", "tls")})
		if err != nil {
			return nil, fmt.Errorf("%w: TLS: %w", ErrInvalidConfig, err)
		}
		n.tlsFiles = f
		return f, nil
	}
	caPEM, certPEM, keyPEM, err := cfg.tlsMaterial(os.ReadFile)
	if err != nil {
		return nil, err
	}
	m, err := rotate.NewMaterial(caPEM, certPEM, keyPEM)
	if err == nil {
		err = check(m)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: TLS: %w", ErrInvalidConfig, err)
	}
	return rotate.Static{M: m}, nil
}

// watchTLS starts, once the node runs, the watch of the TLS files (when the
// material comes from files) and the sweep loop: at every TLSSweepInterval and
// right after each change of a notifying source it closes the accepted peer
// connections whose material is no longer trusted and warns of a coming
// expiry. Both stop with the node.
func (n *Node) watchTLS() error {
	if n.tlsFiles != nil {
		f := n.tlsFiles
		if err := rotate.Watch([]string{n.cfg.TLSCAFile, n.cfg.TLSCertFile, n.cfg.TLSKeyFile}, n.stop, n.log, func() { _ = f.Reload() }); err != nil {
			return fmt.Errorf("node: TLS files: %w", err)
		}
	}
	interval := n.cfg.TLSSweepInterval
	if interval == 0 {
		interval = rotate.DefaultSweepInterval
	}
	kick := make(chan struct{}, 1)
	if nt, ok := n.tlsSrc.(rotate.Notifier); ok {
		nt.OnChange(func() {
			select {
			case kick <- struct{}{}:
			default:
			}
		})
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		// After a change, one more sweep once the grace has passed.
		again := time.NewTimer(time.Hour)
		again.Stop()
		defer again.Stop()
		for {
			n.sweepTLS(time.Now())
			select {
			case <-n.stop:
				return
			case <-t.C:
			case <-again.C:
			case <-kick:
				again.Reset(n.tracker.Grace + 10*time.Millisecond)
				// New material: dial every peer again with it, letting the
				// old connections finish what they carry.
				if r, ok := n.peers.(interface{ RetireAll() }); ok {
					r.RetireAll()
				}
			}
		}
	}()
	return nil
}

// sweepTLS closes the peer connections the current material no longer
// trusts and warns when it expires within CertExpiryWarning.
func (n *Node) sweepTLS(now time.Time) {
	m := n.tlsSrc.Material()
	if closed := n.tracker.Sweep(m, now); closed > 0 {
		n.log.Info("closed peer connections whose TLS material is no longer trusted; their members reconnect", "closed", closed)
	}
	warn := n.cfg.CertExpiryWarning
	if warn == 0 {
		warn = defaultCertExpiryWarning
	}
	// A certificate in the first half of its life is not renewed late
	// (short-lived ones, such as the tests', live less than the warning).
	left, life := m.NotAfter().Sub(now), m.NotAfter().Sub(m.NotBefore())
	if warn > 0 && left < warn && left < life/2 && now.After(n.expiryWarned.Add(time.Hour)) {
		n.expiryWarned = now
		n.log.Warn("TLS material expires soon: renew the certificate or the CA", "not_after", m.NotAfter(), "left", left.Round(time.Second).String(),
			"certificate", m.Cert.Leaf.Subject.CommonName)
	}
}

// ReloadTLS reads the TLS*File material again (what the node does when the
// files change; the daemon calls it on SIGHUP). A version that cannot be used
// (unreadable, bad PEM, a key that does not match, a certificate that does
// not name this member or chain to the bundle) is logged, counted
// (Stats.TLSReloadFailures) and returned, wrapping rotate.ErrInvalid or the
// os error, and the previous material stays. Without TLS files it returns
// ErrNoFiles.
func (n *Node) ReloadTLS() error {
	if n.tlsFiles == nil {
		return ErrNoFiles
	}
	return n.tlsFiles.Reload()
}

// TLSSource returns the source of this member's TLS material (nil in insecure
// mode): the daemon serves its client ports from it.
func (n *Node) TLSSource() rotate.Source { return n.tlsSrc }

// tlsStats fills the TLS fields of s.
func (n *Node) tlsStats(s *Stats) {
	if n.tlsSrc == nil {
		return
	}
	s.TLSNotAfter = n.tlsSrc.Material().NotAfter()
	s.TLSConnsClosed = n.tracker.Closed()
	if n.tlsFiles != nil {
		s.TLSReloads, s.TLSReloadFailures = n.tlsFiles.Reloads(), n.tlsFiles.Failures()
	}
}
