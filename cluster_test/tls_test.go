package cluster_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/transport"
)

// writeCA creates a throwaway CA and one certificate for 127.0.0.1 signed by it
// (usable as server and client certificate) in dir; it returns the file paths.
func writeCA(t *testing.T, dir, name string) (cert, key, ca string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, der []byte) string {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write(name+".pem", "CERTIFICATE", leafDER), write(name+"-key.pem", "EC PRIVATE KEY", keyDER), write(name+"-ca.pem", "CERTIFICATE", caDER)
}

// Test 6b: with mTLS on, the cluster forwards among its members, and a peer
// without a certificate from the cluster's CA cannot forward.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key, ca := writeCA(t, dir, "cluster")
	nodes := startCluster(t, 3, func(c *node.Config) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = cert, key, ca
	})
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Burst: 5, Limit: 10, Period: time.Second}
	forwarded := 0
	for i := 0; i < 30; i++ {
		d, err := nodes[0].Allow(ctx, string(rune('a'+i)), l)
		if err != nil || d.Route == node.RouteFallback {
			t.Fatalf("check over mTLS: route %v err %v", d.Route, err)
		}
		if d.Route == node.RouteForwarded {
			forwarded++
		}
	}
	if forwarded == 0 {
		t.Fatal("no check was forwarded; the test proves nothing")
	}
	check := transport.Check{Key: "k", Limit: l, Hits: 1}

	plain, err := transport.NewPool(transport.ClientConfig{ForwardTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Forward(ctx, nodes[1].GRPCAddr(), check); err == nil {
		t.Fatal("a peer without TLS forwarded to an mTLS node")
	}

	otherCert, otherKey, otherCA := writeCA(t, dir, "other")
	_, wrongClient, err := transport.LoadMutualTLS(otherCert, otherKey, otherCA)
	if err != nil {
		t.Fatal(err)
	}
	wrongClient.RootCAs = mustPool(t, ca) // it trusts the cluster, the cluster does not trust it
	wrong, err := transport.NewPool(transport.ClientConfig{TLS: wrongClient, ForwardTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if _, err := wrong.Forward(ctx, nodes[1].GRPCAddr(), check); err == nil {
		t.Fatal("a peer with a certificate from another CA forwarded to an mTLS node")
	}
}

func mustPool(t *testing.T, caFile string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatal("bad CA file")
	}
	return p
}
