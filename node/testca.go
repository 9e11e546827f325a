package node

import (
	"crypto/rand"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/transport/pki"
)

// TestCA is an in-memory cluster CA and gossip key for tests, the in-process
// demo and single-machine clusters: TestConfig makes one, and New makes each
// member's certificate from it. It is also how a test builds the members an
// attacker would bring (a certificate from another CA, a client certificate, a
// certificate naming another member).
type TestCA struct {
	// CertPEM and KeyPEM are the CA certificate and private key (PEM).
	CertPEM, KeyPEM []byte
	// GossipKey is a random 32-byte gossip SecretKey.
	GossipKey []byte
}

// testCertValidity is how long the certificates of a TestCA are valid.
const testCertValidity = 24 * time.Hour

// NewTestCA returns a new CA (ECDSA P-256, valid 24 h) and a random gossip
// key. Errors come from crypto/rand.
func NewTestCA() (*TestCA, error) {
	cert, key, err := pki.CreateCA("ringlimit test CA", testCertValidity)
	if err != nil {
		return nil, err
	}
	gk := make([]byte, 32)
	if _, err := rand.Read(gk); err != nil {
		return nil, fmt.Errorf("node: gossip key: %w", err)
	}
	return &TestCA{CertPEM: cert, KeyPEM: key, GossipKey: gk}, nil
}

// NodePEM returns a node certificate and key for member (loopback host
// 127.0.0.1), signed by the CA.
func (ca *TestCA) NodePEM(member string) (certPEM, keyPEM []byte, err error) {
	return pki.CreateNode(ca.CertPEM, ca.KeyPEM, member, []string{"127.0.0.1", "localhost"}, testCertValidity)
}

// ClientPEM returns a client certificate and key for client, signed by the CA.
func (ca *TestCA) ClientPEM(client string) (certPEM, keyPEM []byte, err error) {
	return pki.CreateClient(ca.CertPEM, ca.KeyPEM, client, testCertValidity)
}

// Config returns base made secure for member name under this CA: Name, the
// CA and a new node certificate for name in the TLS*PEM fields, SecretKey =
// GossipKey, Insecure off, the TLS*File fields cleared.
func (ca *TestCA) Config(base Config, name string) (Config, error) {
	cert, key, err := ca.NodePEM(name)
	if err != nil {
		return Config{}, err
	}
	base.Name = name
	base.Insecure = false
	base.TLSCAFile, base.TLSCertFile, base.TLSKeyFile = "", "", ""
	base.TLSCAPEM, base.TLSCertPEM, base.TLSKeyPEM = ca.CertPEM, cert, key
	base.SecretKey = ca.GossipKey
	base.testCA = nil
	return base, nil
}

// TestCA returns the CA that TestConfig put in c (New makes the member
// certificates from it), or nil for a config not made by TestConfig.
func (c Config) TestCA() *TestCA { return c.testCA }

// tlsMaterial returns the PEM of the CA, certificate and key: read from the
// files, taken from the PEM fields, or made from the test CA for c.Name.
func (c Config) tlsMaterial(read func(string) ([]byte, error)) (ca, cert, key []byte, err error) {
	get := func(field, file string, pemb []byte) ([]byte, error) {
		if file != "" {
			b, err := read(file)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, field, err)
			}
			return b, nil
		}
		return pemb, nil
	}
	if ca, err = get("TLSCAFile", c.TLSCAFile, c.TLSCAPEM); err != nil {
		return nil, nil, nil, err
	}
	if cert, err = get("TLSCertFile", c.TLSCertFile, c.TLSCertPEM); err != nil {
		return nil, nil, nil, err
	}
	if key, err = get("TLSKeyFile", c.TLSKeyFile, c.TLSKeyPEM); err != nil {
		return nil, nil, nil, err
	}
	if c.testCA != nil && len(cert) == 0 && len(key) == 0 {
		if cert, key, err = c.testCA.NodePEM(c.Name); err != nil {
			return nil, nil, nil, fmt.Errorf("%w: test certificate for %q: %w", ErrInvalidConfig, c.Name, err)
		}
		if len(ca) == 0 {
			ca = c.testCA.CertPEM
		}
	}
	return ca, cert, key, nil
}
