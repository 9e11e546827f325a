package nodetest

import (
	"crypto/rand"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/node"
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
		return nil, fmt.Errorf("nodetest: gossip key: %w", err)
	}
	return &TestCA{CertPEM: cert, KeyPEM: key, GossipKey: gk}, nil
}

// NodePEM returns a node certificate and key for member (loopback host
// 127.0.0.1), signed by the CA.
func (ca *TestCA) NodePEM(member string) (certPEM, keyPEM []byte, err error) {
	return pki.CreateNode(ca.CertPEM, ca.KeyPEM, member, []string{"127.0.0.1", "localhost"}, testCertValidity)
}

// issue is the node.Config.IssueCert of TestConfig: the CA and member's
// node certificate and key.
func (ca *TestCA) issue(member string) (caPEM, certPEM, keyPEM []byte, err error) {
	certPEM, keyPEM, err = ca.NodePEM(member)
	return ca.CertPEM, certPEM, keyPEM, err
}

// ClientPEM returns a client certificate and key for client, signed by the CA.
func (ca *TestCA) ClientPEM(client string) (certPEM, keyPEM []byte, err error) {
	return pki.CreateClient(ca.CertPEM, ca.KeyPEM, client, testCertValidity)
}

// Config returns base made secure for member name under this CA: Name, the
// CA and a new node certificate for name in the TLS*PEM fields, SecretKey =
// GossipKey, Insecure off, the TLS*File fields and IssueCert cleared.
func (ca *TestCA) Config(base node.Config, name string) (node.Config, error) {
	cert, key, err := ca.NodePEM(name)
	if err != nil {
		return node.Config{}, err
	}
	base.Name = name
	base.Insecure = false
	base.TLSCAFile, base.TLSCertFile, base.TLSKeyFile = "", "", ""
	base.TLSCAPEM, base.TLSCertPEM, base.TLSKeyPEM = ca.CertPEM, cert, key
	base.SecretKey = ca.GossipKey
	base.IssueCert = nil
	return base, nil
}
