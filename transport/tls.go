package transport

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// LoadMutualTLS loads the PEM files of a node's certificate and key and of the
// cluster's CA, and returns the two halves of mutual TLS between peers: server
// (for ServerConfig.TLS) requires every client to present a certificate signed
// by the CA, and client (for ClientConfig.TLS) presents the node's certificate
// and accepts only servers whose certificate the CA signed and whose SANs match
// the address dialed (IP SANs for host:port addresses). Both require TLS 1.3.
// The node's certificate therefore needs both server and client extended key
// usages (or none). Errors name the file that could not be read or parsed.
//
// Deprecated: it checks the chain but not which member a certificate names, and
// accepts any certificate the CA signed (a client's too). Nodes use
// pki.PeerTLS, which requires the ringlimit://member/<name> identity.
func LoadMutualTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: load key pair %s, %s: %w", certFile, keyFile, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("transport: CA file %s holds no PEM certificate", caFile)
	}
	server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
	client = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
	}
	return server, client, nil
}
