package node

import (
	"errors"
	"fmt"
	"os"

	"github.com/ringlimit/ringlimit/node/internal/tlsrotate"
	"github.com/ringlimit/ringlimit/transport/rotate"
)

// TLS rotation (secure mode): the node reads its material from a
// rotate.Source at every handshake, so a new certificate, key or CA bundle
// takes effect without a restart; the peer connections it accepted are
// closed by a sweep once the material they were authenticated with is no
// longer trusted (see Config.TLSSweepInterval), and the dialling member
// reconnects with the current material.

// ErrNoFiles is returned by ReloadTLS when the node's material does not come
// from files (PEM fields, TLSSource, or insecure mode).
var ErrNoFiles = errors.New("node: TLS material does not come from files")

// tlsSpec is where Config says this member's TLS material comes from.
func (c *Config) tlsSpec() tlsrotate.Spec {
	return tlsrotate.Spec{Name: c.Name, AnyName: c.anyCertName, Source: c.TLSSource,
		CAFile: c.TLSCAFile, CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile,
		CAPEM: c.TLSCAPEM, CertPEM: c.TLSCertPEM, KeyPEM: c.TLSKeyPEM,
		Issue: c.IssueCert, SecretKeyLen: len(c.SecretKey), Insecure: c.Insecure}
}

// openTLS returns this member's TLS source: Config.TLSSource, a rotate.Files
// over the TLS*File fields (watched once the node runs, see watchTLS), or a
// static source of the PEM fields (or the test CA). Every version must name
// cfg.Name and chain to its own bundle. Errors wrap ErrInvalidConfig.
func (n *Node) openTLS() (rotate.Source, error) {
	spec := n.cfg.tlsSpec()
	src, files, err := spec.Open(os.ReadFile, n.log)
	n.tlsFiles = files
	return src, err
}

// watchTLS starts, once the node runs, the watch of the TLS files (when the
// material comes from files) and the sweep loop: at every TLSSweepInterval and
// right after each change of a notifying source it closes the accepted peer
// connections whose material is no longer trusted and warns of a coming
// expiry (CertExpiryWarning). Both stop with the node.
func (n *Node) watchTLS() error {
	if f := n.tlsFiles; f != nil {
		if err := rotate.Watch([]string{n.cfg.TLSCAFile, n.cfg.TLSCertFile, n.cfg.TLSKeyFile}, n.stop, n.log, func() { _ = f.Reload() }); err != nil {
			return fmt.Errorf("node: TLS files: %w", err)
		}
	}
	sw := &tlsrotate.Sweeper{Src: n.tlsSrc, Tracker: n.tracker, Warn: n.cfg.CertExpiryWarning, Log: n.log}
	sw.Run(n.cfg.TLSSweepInterval, n.stop, &n.wg, func() {
		if r, ok := n.peers.(interface{ RetireAll() }); ok {
			r.RetireAll()
		}
	})
	return nil
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
