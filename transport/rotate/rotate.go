// Package rotate lets a ringlimit node and daemon change their TLS material
// (certificate, key, CA bundle) and other secret files without a restart.
//
// Data flow: Files (or any Source) holds the current Material: a certificate
// with its key, and a CA bundle that may hold several CAs at once (a
// rollover: the old and the new CA trusted together, then the old removed).
// Files reloads it when one of its files changes (the directories are
// watched, so cert-manager's atomic symlink swap of a Secret volume's "..data"
// directory and editors that rename a new file over the old are seen) and on
// Reload (SIGHUP). A new version that does not parse, whose key does not match
// its certificate, or that the caller's Check refuses is logged and counted
// (Failures) and the previous material stays.
//
// PeerTLS and ServerTLS build tls.Configs that read the Source at every
// handshake (GetCertificate, GetClientCertificate, and chain verification
// against the current bundle in VerifyConnection), so new handshakes use the
// new material at once. Tracker records the connections a server accepted with
// the certificates used on both sides and, at every Sweep, closes those whose
// material was withdrawn: the remote's certificate no longer chains to the
// current bundle or has expired, or the certificate this side presented no
// longer chains to it. Clients then reconnect with the current material.
package rotate

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// ErrInvalid is wrapped by every error about material that cannot be used: a
// CA bundle without a certificate, a key that does not match, a Check that
// refused it.
var ErrInvalid = errors.New("rotate: invalid TLS material")

// Material is one version of a member's TLS material. It is never modified
// once made; a new version is a new Material.
type Material struct {
	// Cert is this side's certificate chain and key; Cert.Leaf is parsed.
	Cert *tls.Certificate
	// Roots holds every CA of the bundle.
	Roots *x509.CertPool
	// CAs are the certificates of the bundle, in file order.
	CAs []*x509.Certificate
}

// NewMaterial parses a CA bundle (one or more PEM certificates) and a
// certificate and key (PEM). Errors wrap ErrInvalid and say which part is bad.
func NewMaterial(caPEM, certPEM, keyPEM []byte) (*Material, error) {
	var cas []*x509.Certificate
	for rest := caPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: CA bundle: %v", ErrInvalid, err)
		}
		cas = append(cas, c)
	}
	if len(cas) == 0 {
		return nil, fmt.Errorf("%w: CA bundle holds no PEM certificate", ErrInvalid)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: key pair: %v", ErrInvalid, err)
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	return &Material{Cert: &cert, Roots: pool, CAs: cas}, nil
}

// NotAfter returns the earliest expiry of the certificate and of the CAs of
// the bundle: the moment something stops working unless it is renewed.
func (m *Material) NotAfter() time.Time { return m.earliest().NotAfter }

// NotBefore returns the start of validity of the certificate or CA that
// expires first (NotAfter): with NotAfter, its lifetime.
func (m *Material) NotBefore() time.Time { return m.earliest().NotBefore }

func (m *Material) earliest() *x509.Certificate {
	e := m.Cert.Leaf
	for _, c := range m.CAs {
		if c.NotAfter.Before(e.NotAfter) {
			e = c
		}
	}
	return e
}

// Trusted reports whether chain (leaf first) chains to a CA of the bundle
// for any usage at now, the test a Tracker's sweep applies to both sides of a
// connection.
func (m *Material) Trusted(chain []*x509.Certificate, now time.Time) bool {
	if len(chain) == 0 {
		return true
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: m.Roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}

// Source gives the current Material. Material must be cheap (it runs at every
// handshake), safe for concurrent use, and never return nil.
type Source interface {
	Material() *Material
}

// Notifier is an optional interface of a Source that knows when its material
// changes: OnChange registers f, called after each change (never
// concurrently with itself for one Source).
type Notifier interface {
	OnChange(f func())
}

// Static is a Source that never changes.
type Static struct{ M *Material }

// Material returns s.M.
func (s Static) Material() *Material { return s.M }

// certChain parses the chain of a tls.Certificate (leaf first).
func certChain(c *tls.Certificate) []*x509.Certificate {
	if c == nil {
		return nil
	}
	out := make([]*x509.Certificate, 0, len(c.Certificate))
	for i, der := range c.Certificate {
		if i == 0 && c.Leaf != nil {
			out = append(out, c.Leaf)
			continue
		}
		x, err := x509.ParseCertificate(der)
		if err != nil {
			return out
		}
		out = append(out, x)
	}
	return out
}
