// Package pki makes and checks the certificates of a ringlimit cluster: one
// cluster CA, a certificate per member ("node certificate") and per client, all
// ECDSA P-256 signed with SHA-256, in PEM. It is pure crypto/x509: no I/O
// except WriteNewFile, which the CLI uses to write what the Create functions
// return.
//
// Identity lives in a URI SAN, not in the host names: a node certificate
// carries ringlimit://member/<name> (and ServerAuth+ClientAuth key usages), a
// client certificate ringlimit://client/<name> (ClientAuth only). A peer is
// accepted only if its certificate chains to the cluster CA and carries a
// member URI (MemberName), so a client certificate, signed by the same CA, is
// never accepted as a peer. PeerTLS builds the two halves of mutual TLS between
// members; ServerTLS the server side of a client-facing listener.
//
// Data flow: CreateCA -> (caCertPEM, caKeyPEM) -> CreateNode / CreateClient ->
// (certPEM, keyPEM) -> PeerTLS / ServerTLS -> *tls.Config for transport and
// the daemon. Certificates are checked by the standard library's chain
// verification (x509.Certificate.Verify) plus the URI SAN rules above.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// Named errors of package pki.
var (
	// ErrInvalid is returned, wrapped with what is wrong, for input that is not a
	// usable certificate, key or name: bad PEM, a key that does not match, an
	// empty or malformed name, a non-positive validity.
	ErrInvalid = errors.New("pki: invalid input")
	// ErrExists is returned by WriteNewFile when the file already exists; it is
	// never overwritten.
	ErrExists = errors.New("pki: file exists")
	// ErrNotMember is returned, wrapped, when a peer presents a certificate that
	// chains to the cluster CA but names no member (a client certificate), or
	// names another member than the one expected.
	ErrNotMember = errors.New("pki: certificate does not name the expected member")
)

// URI SAN scheme and hosts that mark a certificate's role.
const (
	// Scheme is the URI scheme of ringlimit identities.
	Scheme = "ringlimit"
	// MemberHost is the URI host of a member identity: ringlimit://member/<name>.
	MemberHost = "member"
	// ClientHost is the URI host of a client identity: ringlimit://client/<name>.
	ClientHost = "client"
	// MaxNameLen is the longest member or client name accepted, in bytes.
	MaxNameLen = 128
	// clockSkew backdates NotBefore so that a certificate made now is valid on a
	// peer whose clock is a little behind.
	clockSkew = 5 * time.Minute
)

// CreateCA returns a new self-signed cluster CA certificate and its private
// key (PKCS#8), both PEM, valid from now (minus 5 minutes of clock skew) for
// validFor. Errors wrap ErrInvalid (empty commonName, validFor <= 0).
func CreateCA(commonName string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	if commonName == "" {
		return nil, nil, fmt.Errorf("%w: CA common name is empty", ErrInvalid)
	}
	tmpl, key, err := template(commonName, validFor)
	if err != nil {
		return nil, nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: create CA: %w", err)
	}
	return encode(der, key)
}

// CreateNode returns a node certificate for member, signed by the CA, and its
// private key, both PEM: CN = member, URI SAN ringlimit://member/<member>, DNS
// and IP SANs from hosts (each entry an IP address or a host name), extended
// key usages ServerAuth and ClientAuth (a member both serves and dials peers).
// Errors wrap ErrInvalid: bad CA PEM, an invalid member name (see
// ValidateName), an empty host, validFor <= 0.
func CreateNode(caCertPEM, caKeyPEM []byte, member string, hosts []string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	if err := ValidateName(member); err != nil {
		return nil, nil, err
	}
	tmpl, key, err := template(member, validFor)
	if err != nil {
		return nil, nil, err
	}
	for _, h := range hosts {
		switch ip := net.ParseIP(h); {
		case h == "":
			return nil, nil, fmt.Errorf("%w: empty host for member %q", ErrInvalid, member)
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	tmpl.URIs = []*url.URL{identityURI(MemberHost, member)}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	return sign(caCertPEM, caKeyPEM, tmpl, key)
}

// CreateClient returns a client certificate for client, signed by the CA, and
// its private key, both PEM: CN = client, URI SAN ringlimit://client/<client>,
// extended key usage ClientAuth only. It authenticates a caller of the
// daemon's client listeners and is refused by the peer listener. Errors wrap
// ErrInvalid as CreateNode's.
func CreateClient(caCertPEM, caKeyPEM []byte, client string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	if err := ValidateName(client); err != nil {
		return nil, nil, err
	}
	tmpl, key, err := template(client, validFor)
	if err != nil {
		return nil, nil, err
	}
	tmpl.URIs = []*url.URL{identityURI(ClientHost, client)}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return sign(caCertPEM, caKeyPEM, tmpl, key)
}

// ValidateName returns nil if name can be a member or client name: 1 to
// MaxNameLen bytes of ASCII letters, digits, '.', '-' and '_'. Otherwise an
// error wrapping ErrInvalid names the first offending byte.
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w: name %q must be 1..%d bytes", ErrInvalid, name, MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fmt.Errorf("%w: name %q has byte %q at offset %d (want letters, digits, '.', '-', '_')", ErrInvalid, name, c, i)
		}
	}
	return nil
}

// MemberName returns the member name of a node certificate (its
// ringlimit://member/<name> URI SAN) and true, or "" and false when the
// certificate has no such URI, more than one identity URI, or lacks the
// ClientAuth or ServerAuth usage of a node certificate. It does not verify the
// chain (PeerTLS does).
func MemberName(c *x509.Certificate) (string, bool) {
	name, ok := identity(c, MemberHost)
	if !ok || !hasUsage(c, x509.ExtKeyUsageServerAuth) || !hasUsage(c, x509.ExtKeyUsageClientAuth) {
		return "", false
	}
	return name, true
}

// ClientName returns the client name of a client certificate (its
// ringlimit://client/<name> URI SAN) and true, or "" and false when it has no
// such URI or more than one identity URI. It does not verify the chain.
func ClientName(c *x509.Certificate) (string, bool) {
	name, ok := identity(c, ClientHost)
	if !ok || !hasUsage(c, x509.ExtKeyUsageClientAuth) {
		return "", false
	}
	return name, true
}

// PeerTLS returns the two halves of mutual TLS between members, from the
// cluster CA certificate and this member's certificate and key (PEM). Both
// require TLS 1.3 and a certificate from the other side that chains to the CA
// and names a member (MemberName), so a client certificate from the same CA is
// refused. Host names are not checked: a member is identified by the member
// URI of its certificate, and the node checks that name against the member it
// meant to reach (its handshake). Errors wrap ErrInvalid: bad PEM, a key that
// does not match the certificate, a certificate that names no member or does
// not chain to the CA.
func PeerTLS(caCertPEM, certPEM, keyPEM []byte) (server, client *tls.Config, err error) {
	pool, cert, err := load(caCertPEM, certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	if _, ok := MemberName(cert.Leaf); !ok {
		return nil, nil, fmt.Errorf("%w: certificate %q is not a node certificate (no %s://%s/ URI or usages)", ErrInvalid, cert.Leaf.Subject.CommonName, Scheme, MemberHost)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, nil, fmt.Errorf("%w: node certificate does not chain to the CA: %v", ErrInvalid, err)
	}
	verify := func(usage x509.ExtKeyUsage) func(tls.ConnectionState) error {
		return func(cs tls.ConnectionState) error {
			_, err := VerifyMember(pool, cs.PeerCertificates, usage)
			return err
		}
	}
	server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		// The standard verification above checks the chain and ClientAuth; this
		// adds the member URI.
		VerifyConnection: verify(x509.ExtKeyUsageClientAuth),
	}
	client = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		// The chain is verified by VerifyConnection against the CA, without the
		// host name check (identity is the member URI, see above).
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection:   verify(x509.ExtKeyUsageServerAuth),
	}
	return server, client, nil
}

// VerifyMember checks that chain (leaf first, as tls.ConnectionState's
// PeerCertificates) chains to a root in pool for usage and that its leaf is a
// node certificate, and returns the member it names. Errors wrap ErrInvalid
// (no certificate, bad chain) or ErrNotMember (a valid certificate that names
// no member, such as a client certificate).
func VerifyMember(pool *x509.CertPool, chain []*x509.Certificate, usage x509.ExtKeyUsage) (string, error) {
	if len(chain) == 0 {
		return "", fmt.Errorf("%w: no peer certificate", ErrInvalid)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return "", fmt.Errorf("%w: peer certificate %q: %v", ErrInvalid, chain[0].Subject.CommonName, err)
	}
	name, ok := MemberName(chain[0])
	if !ok {
		return "", fmt.Errorf("%w: peer certificate %q names no member", ErrNotMember, chain[0].Subject.CommonName)
	}
	return name, nil
}

// ServerTLS returns the TLS configuration of a client-facing listener (the
// daemon's gRPC and HTTP ports): TLS 1.3 or 1.2, this node's certificate, and
// client certificates that chain to the CA requested but not required
// (tls.VerifyClientCertIfGiven), so callers may authenticate by certificate or
// by bearer token; the daemon decides which it needs (ClientName of
// tls.ConnectionState.VerifiedChains[0][0]). Errors wrap ErrInvalid as
// PeerTLS's.
func ServerTLS(caCertPEM, certPEM, keyPEM []byte) (*tls.Config, error) {
	pool, cert, err := load(caCertPEM, certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}, nil
}

// ClientTLS returns the TLS configuration of a caller of a client-facing
// listener: the CA as the only root (with the usual host name check against
// the address dialled), and the client's certificate when certPEM and keyPEM
// are both non-empty (else no client certificate: authenticate by token).
// Errors wrap ErrInvalid.
func ClientTLS(caCertPEM, certPEM, keyPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caCertPEM) {
		return nil, fmt.Errorf("%w: CA PEM holds no certificate", ErrInvalid)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	if len(certPEM) > 0 || len(keyPEM) > 0 {
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%w: client key pair: %v", ErrInvalid, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// ParseCertificate returns the first certificate of a PEM block list. Errors
// wrap ErrInvalid.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, fmt.Errorf("%w: no PEM certificate", ErrInvalid)
		}
		if b.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
			}
			return c, nil
		}
	}
}

// WriteNewFile writes data to path, which must not exist (an existing file is
// an error wrapping ErrExists naming it, and is left untouched), with mode
// 0600 when private (keys) and 0644 otherwise. The file is created with
// O_EXCL, so two writers never both succeed.
func WriteNewFile(path string, data []byte, private bool) error {
	mode := os.FileMode(0o644)
	if private {
		mode = 0o600
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%w: %s (remove it first to replace it)", ErrExists, path)
		}
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	return nil
}

func identityURI(host, name string) *url.URL {
	return &url.URL{Scheme: Scheme, Host: host, Path: "/" + name}
}

// identity returns the name of the only ringlimit:// URI of c if its host is
// want.
func identity(c *x509.Certificate, want string) (string, bool) {
	if c == nil {
		return "", false
	}
	var name string
	found := 0
	for _, u := range c.URIs {
		if u.Scheme != Scheme {
			continue
		}
		found++
		if u.Host != want || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return "", false
		}
		name = strings.TrimPrefix(u.Path, "/")
	}
	if found != 1 || ValidateName(name) != nil {
		return "", false
	}
	return name, true
}

func hasUsage(c *x509.Certificate, u x509.ExtKeyUsage) bool {
	for _, e := range c.ExtKeyUsage {
		if e == u || e == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}

func template(cn string, validFor time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	if validFor <= 0 {
		return nil, nil, fmt.Errorf("%w: validity %v must be positive", ErrInvalid, validFor)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("pki: serial: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"ringlimit"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(validFor),
	}, key, nil
}

func sign(caCertPEM, caKeyPEM []byte, tmpl *x509.Certificate, key *ecdsa.PrivateKey) ([]byte, []byte, error) {
	ca, err := tls.X509KeyPair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: CA key pair: %v", ErrInvalid, err)
	}
	if !ca.Leaf.IsCA {
		return nil, nil, fmt.Errorf("%w: certificate %q is not a CA", ErrInvalid, ca.Leaf.Subject.CommonName)
	}
	if tmpl.NotAfter.After(ca.Leaf.NotAfter) {
		tmpl.NotAfter = ca.Leaf.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Leaf, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: sign %q: %w", tmpl.Subject.CommonName, err)
	}
	return encode(der, key)
}

func encode(der []byte, key *ecdsa.PrivateKey) ([]byte, []byte, error) {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), nil
}

func load(caCertPEM, certPEM, keyPEM []byte) (*x509.CertPool, tls.Certificate, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caCertPEM) {
		return nil, tls.Certificate{}, fmt.Errorf("%w: CA PEM holds no certificate", ErrInvalid)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("%w: key pair: %v", ErrInvalid, err)
	}
	return pool, cert, nil
}
