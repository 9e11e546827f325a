package pki

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mustCA(t *testing.T) (cert, key []byte) {
	t.Helper()
	cert, key, err := CreateCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func TestIdentities(t *testing.T) {
	t.Parallel()
	caCert, caKey := mustCA(t)
	nodeCert, _, err := CreateNode(caCert, caKey, "node-1", []string{"127.0.0.1", "ringlimit-1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clientCert, _, err := CreateClient(caCert, caKey, "app", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ParseCertificate(nodeCert)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := ParseCertificate(clientCert)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := MemberName(nc); !ok || got != "node-1" {
		t.Errorf("MemberName(node cert) = %q, %v; want node-1, true", got, ok)
	}
	if got, ok := ClientName(nc); ok {
		t.Errorf("ClientName(node cert) = %q, true; want false", got)
	}
	if got, ok := MemberName(cc); ok {
		t.Errorf("MemberName(client cert) = %q, true; want false: a client is never a member", got)
	}
	if got, ok := ClientName(cc); !ok || got != "app" {
		t.Errorf("ClientName(client cert) = %q, %v; want app, true", got, ok)
	}
	if len(nc.IPAddresses) != 1 || !nc.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) || len(nc.DNSNames) != 1 || nc.DNSNames[0] != "ringlimit-1" {
		t.Errorf("SANs: got IPs %v DNS %v, want [127.0.0.1] [ringlimit-1]", nc.IPAddresses, nc.DNSNames)
	}
	if nc.Subject.CommonName != "node-1" {
		t.Errorf("CN: got %q, want node-1", nc.Subject.CommonName)
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	caCert, caKey := mustCA(t)
	nodeCert, nodeKey, err := CreateNode(caCert, caKey, "n", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
	}{
		{"empty CA name", func() error { _, _, err := CreateCA("", time.Hour); return err }()},
		{"zero validity", func() error { _, _, err := CreateCA("x", 0); return err }()},
		{"bad member name", func() error { _, _, err := CreateNode(caCert, caKey, "a/b", nil, time.Hour); return err }()},
		{"empty host", func() error { _, _, err := CreateNode(caCert, caKey, "a", []string{""}, time.Hour); return err }()},
		{"non-CA signer", func() error { _, _, err := CreateClient(nodeCert, nodeKey, "c", time.Hour); return err }()},
		{"garbage CA", func() error { _, _, err := CreateClient([]byte("x"), caKey, "c", time.Hour); return err }()},
	}
	for _, c := range cases {
		if !errors.Is(c.err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", c.name, c.err)
		}
	}
	if err := ValidateName(strings.Repeat("a", MaxNameLen+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("long name: got %v, want ErrInvalid", err)
	}
	if err := ValidateName("node\xff"); err == nil || !strings.Contains(err.Error(), "offset 4") {
		t.Errorf("non-ASCII name: got %v, want ErrInvalid naming offset 4", err)
	}
}

func TestWriteNewFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "node.key")
	if err := WriteNewFile(p, []byte("secret"), true); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key mode: got %v, want 0600", st.Mode().Perm())
	}
	if err := WriteNewFile(p, []byte("other"), true); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), p) {
		t.Errorf("existing file: got %v, want ErrExists naming %s", err, p)
	}
	if b, _ := os.ReadFile(p); string(b) != "secret" {
		t.Errorf("existing file was changed to %q", b)
	}
	pub := filepath.Join(dir, "ca.crt")
	if err := WriteNewFile(pub, []byte("cert"), false); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(pub); st.Mode().Perm() != 0o644 {
		t.Errorf("cert mode: got %v, want 0644", st.Mode().Perm())
	}
}

// handshake runs a TLS handshake between server and client configs over a
// loopback TCP connection (buffered, so an alert never blocks its writer) and
// returns the client's and the server's error. With TLS 1.3 the server checks
// the client's certificate after the client finished, so one byte is written
// and read to surface the server's verdict.
func handshake(t *testing.T, server, client *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	done := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		s := tls.Server(c, server)
		err = s.Handshake()
		if err == nil {
			_, err = s.Read(make([]byte, 1))
		}
		if err == nil {
			_, err = s.Write([]byte{2})
		}
		done <- err
	}()
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, client)
	clientErr = tc.Handshake()
	if clientErr == nil {
		_, clientErr = tc.Write([]byte{1})
	}
	if clientErr == nil {
		_, clientErr = tc.Read(make([]byte, 1))
	}
	return clientErr, <-done
}

func TestPeerTLS(t *testing.T) {
	t.Parallel()
	caCert, caKey := mustCA(t)
	peer := func(ca, key []byte, name string) (*tls.Config, *tls.Config) {
		c, k, err := CreateNode(ca, key, name, []string{"127.0.0.1"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		s, cl, err := PeerTLS(ca, c, k)
		if err != nil {
			t.Fatal(err)
		}
		return s, cl
	}
	server, _ := peer(caCert, caKey, "node-0")
	_, client := peer(caCert, caKey, "node-1")
	if cerr, serr := handshake(t, server, client); cerr != nil || serr != nil {
		t.Fatalf("member to member: client %v, server %v; want both nil", cerr, serr)
	}

	otherCA, otherKey := mustCA(t)
	_, foreign := peer(otherCA, otherKey, "node-1")
	if _, serr := handshake(t, server, foreign); serr == nil {
		t.Error("the server accepted a member certificate from another CA")
	}

	cc, ck, err := CreateClient(caCert, caKey, "app", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := PeerTLS(caCert, cc, ck); !errors.Is(err, ErrInvalid) {
		t.Errorf("PeerTLS with a client certificate: got %v, want ErrInvalid", err)
	}
	asClient, err := ClientTLS(caCert, cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	asClient.InsecureSkipVerify = true // the attacker skips host checks; the server must still refuse
	if _, serr := handshake(t, server, asClient); serr == nil || !errors.Is(serr, ErrNotMember) && !strings.Contains(serr.Error(), "names no member") {
		t.Errorf("peer server with a client certificate: got %v, want a refusal naming no member", serr)
	}

	// The client side refuses a server whose certificate comes from another CA.
	foreignServer, _ := peer(otherCA, otherKey, "node-0")
	if cerr, _ := handshake(t, foreignServer, client); cerr == nil {
		t.Error("the client accepted a server certificate from another CA")
	}
}

func TestServerTLSAcceptsClientCertOrNone(t *testing.T) {
	t.Parallel()
	caCert, caKey := mustCA(t)
	nc, nk, err := CreateNode(caCert, caKey, "node-0", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	server, err := ServerTLS(caCert, nc, nk)
	if err != nil {
		t.Fatal(err)
	}
	cc, ck, err := CreateClient(caCert, caKey, "app", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, certs := range map[string][2][]byte{"with cert": {cc, ck}, "token only": {nil, nil}} {
		client, err := ClientTLS(caCert, certs[0], certs[1])
		if err != nil {
			t.Fatal(err)
		}
		client.ServerName = "127.0.0.1"
		if cerr, serr := handshake(t, server, client); cerr != nil || serr != nil {
			t.Errorf("%s: client %v, server %v; want both nil", name, cerr, serr)
		}
	}
}
