package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a node certificate for 127.0.0.1 (server and client usage) and
// its key under dir and returns their paths.
func (ca *testCA) issue(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(dir, name+".crt")
	keyFile = filepath.Join(dir, name+".key")
	write(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	write(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return certFile, keyFile
}

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, "ringlimit test CA")
	caFile := filepath.Join(dir, "ca.crt")
	write(t, caFile, ca.pem)
	certA, keyA := ca.issue(t, dir, "node-a")
	serverTLS, _, err := LoadMutualTLS(certA, keyA, caFile)
	if err != nil {
		t.Fatal(err)
	}
	certB, keyB := ca.issue(t, dir, "node-b")
	_, clientTLS, err := LoadMutualTLS(certB, keyB, caFile)
	if err != nil {
		t.Fatal(err)
	}
	if serverTLS.MinVersion != tls.VersionTLS13 || clientTLS.MinVersion != tls.VersionTLS13 || serverTLS.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("got min versions %x/%x and client auth %v, want TLS 1.3 and RequireAndVerifyClientCert", serverTLS.MinVersion, clientTLS.MinVersion, serverTLS.ClientAuth)
	}
	f := &fakePeer{}
	addr, _ := startServer(t, ServerConfig{TLS: serverTLS}, f, nil)

	// A peer with a certificate from the cluster CA can forward.
	good := newPool(t, ClientConfig{TLS: clientTLS, ForwardTimeout: 5 * time.Second})
	if r, err := good.Forward(context.Background(), addr, validCheck("k", 1)); err != nil || r.Owner != "owner:k" {
		t.Fatalf("with a valid certificate: got %+v, %v", r, err)
	}

	// Another CA's certificate, no certificate, and plaintext are refused.
	rogue := newTestCA(t, "rogue CA")
	rogueCAFile := filepath.Join(dir, "rogue-ca.crt")
	write(t, rogueCAFile, rogue.pem)
	certR, keyR := rogue.issue(t, dir, "rogue")
	_, rogueTLS, err := LoadMutualTLS(certR, keyR, rogueCAFile)
	if err != nil {
		t.Fatal(err)
	}
	rogueTLS.RootCAs = clientTLS.RootCAs // it trusts the server; the server must not trust it
	noCert := clientTLS.Clone()
	noCert.Certificates = nil
	for name, cfg := range map[string]*tls.Config{"rogue certificate": rogueTLS, "no certificate": noCert, "plaintext": nil} {
		p := newPool(t, ClientConfig{TLS: cfg, ForwardTimeout: 2 * time.Second})
		if _, err := p.Forward(context.Background(), addr, validCheck("k", 1)); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: got %v, want an error wrapping ErrUnavailable", name, err)
		}
	}
	if got := f.calls.Load(); got != 1 {
		t.Fatalf("handler saw %d Forward calls, want only the authenticated one", got)
	}
}

func TestLoadMutualTLSErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, "ca")
	cert, key := ca.issue(t, dir, "n")
	notPEM := filepath.Join(dir, "not.pem")
	write(t, notPEM, []byte("hello"))
	for _, tc := range [][3]string{
		{filepath.Join(dir, "missing.crt"), key, cert},
		{cert, key, filepath.Join(dir, "missing-ca.crt")},
		{cert, key, notPEM},
	} {
		if _, _, err := LoadMutualTLS(tc[0], tc[1], tc[2]); err == nil {
			t.Errorf("LoadMutualTLS%v: got nil error", tc)
		}
	}
}
