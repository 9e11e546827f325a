package rotate

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/transport/pki"
)

// PeerTLS returns the two halves of mutual TLS between members, as
// pki.PeerTLS, but reading src at every handshake: the certificate presented
// (GetCertificate, GetClientCertificate) and the CA bundle the other side's
// certificate must chain to (VerifyConnection, with pki.VerifyMember, so the
// member URI is still required). A caller may wrap VerifyConnection of either
// config to add checks (call the previous one first).
func PeerTLS(src Source) (server, client *tls.Config) {
	verify := func(usage x509.ExtKeyUsage) func(tls.ConnectionState) error {
		return func(cs tls.ConnectionState) error {
			_, err := pki.VerifyMember(src.Material().Roots, cs.PeerCertificates, usage)
			return err
		}
	}
	server = &tls.Config{
		MinVersion: tls.VersionTLS13,
		// gRPC's ALPN: the tracked handshake (Tracker.Track) uses a clone of
		// this config, not the one gRPC's credentials made.
		NextProtos: []string{"h2"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return src.Material().Cert, nil
		},
		// The chain is verified against the current bundle in
		// VerifyConnection (ClientCAs would fix one pool).
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: verify(x509.ExtKeyUsageClientAuth),
	}
	client = &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return src.Material().Cert, nil
		},
		// Identity is the member URI, checked by VerifyConnection against the
		// current bundle, without the host name check.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection:   verify(x509.ExtKeyUsageServerAuth),
	}
	return server, client
}

// ServerTLS returns the configuration of a client-facing listener, as
// pki.ServerTLS (TLS 1.2 or 1.3, client certificates requested and verified
// when given) but built from src's current material at every handshake
// (GetConfigForClient), so tls.ConnectionState.VerifiedChains keeps coming
// from the standard verification. nextProtos are the ALPN protocols offered
// (the returned config replaces the listener's for the handshake: HTTP/2 and
// gRPC need "h2").
func ServerTLS(src Source, nextProtos ...string) *tls.Config {
	build := func(m *Material) *tls.Config {
		return &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{*m.Cert},
			ClientCAs:    m.Roots,
			ClientAuth:   tls.VerifyClientCertIfGiven,
			NextProtos:   nextProtos,
		}
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return build(src.Material()), nil
		},
	}
}

// CheckChain returns nil if m's certificate chains to a CA of its own bundle
// (for any usage), else an error wrapping ErrInvalid: the check every new
// version of a member's material must pass before it replaces the old.
func CheckChain(m *Material) error {
	chain := certChain(m.Cert)
	if !m.Trusted(chain, time.Now()) {
		return fmt.Errorf("%w: certificate %q does not chain to the CA bundle", ErrInvalid, chain[0].Subject.CommonName)
	}
	return nil
}
