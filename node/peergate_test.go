package node

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/transport"
	"github.com/ringlimit/ringlimit/transport/pki"
)

// A certificate signed by the cluster CA for a name that is not a member
// gets nothing but Hello: Transfer, the replication stream and Forward are
// refused, and neither key is touched.
func TestNonMemberCertGetsOnlyHello(t *testing.T) {
	t.Parallel()
	m := &secMetrics{}
	base, nodes, ca := secureCluster(t, 1, m, nil)
	n := nodes[0]
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	outsider := memberPool(t, ca, "node-9", false)
	if _, _, err := outsider.Hello(ctx, n.PeerAddr(), transport.Hello{ClusterLabel: base.ClusterLabel, Member: "node-9", ProtocolVersion: transport.ProtocolVersion, InstanceID: "x"}); err != nil {
		t.Errorf("Hello from a CA-signed non-member: %v, want an answer", err)
	}
	now := time.Now().UnixNano()
	ks := func(key string) []transport.KeyState {
		return []transport.KeyState{{Key: key, Limit: l, State: gcraState(t, now, l, 1), LastNow: now}}
	}
	if err := outsider.Handoff(ctx, n.PeerAddr(), transport.TransferBatch{From: "node-9", States: ks("victim")}); err == nil {
		t.Error("Transfer from a non-member: accepted")
	}
	if _, err := outsider.Replicate(ctx, n.PeerAddr(), transport.TransferBatch{From: "node-9", States: ks("victim")}); err == nil {
		t.Error("ReplicateStream from a non-member: accepted")
	}
	if res, err := outsider.Forward(ctx, n.PeerAddr(), transport.Check{Key: "victim2", Limit: l, Hits: 1}); err == nil && res.Code == transport.CodeOK {
		t.Errorf("Forward from a non-member: decided %+v", res)
	}
	for _, k := range []string{"victim", "victim2"} {
		if d, err := n.Allow(ctx, k, l); err != nil || !d.Allowed {
			t.Errorf("%s after the non-member's calls: %+v, %v; want allowed", k, d, err)
		}
	}
	if got := m.count("not-member"); got < 3 {
		t.Errorf("PeerRefused(not-member) = %d, want at least 3", got)
	}
}

// peerPoolFrom returns a peer pool that presents cert and key, trusting ca.
func peerPoolFrom(t *testing.T, ca, cert, key []byte) *transport.Pool {
	t.Helper()
	tlsCfg, err := pki.ClientTLS(ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.InsecureSkipVerify = true // an attacker does not care who it talks to
	p, err := transport.NewPool(transport.ClientConfig{TLS: tlsCfg, ForwardTimeout: time.Second, TransferTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// serialOf returns the serial (big.Int.Text(16)) of a PEM certificate.
func serialOf(t *testing.T, certPEM []byte) string {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.Text(16)
}

// The deny list takes effect on live connections: a leaked certificate of a
// real member's name, already talking to a node, is refused at its next RPC
// once its serial is listed (and at the handshake of a new connection), while
// the member itself stays; a member whose own certificate is listed by
// serial, or which is listed by name, leaves the other nodes' rings; an
// invalid deny list keeps the previous one.
func TestPeerDenyListRevokes(t *testing.T) {
	t.Parallel()
	deny := filepath.Join(t.TempDir(), "peer-deny")
	write := func(s string) {
		t.Helper()
		// A new file renamed over the old one, as editors and config
		// management do.
		tmp := deny + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, deny); err != nil {
			t.Fatal(err)
		}
	}
	write("# nothing revoked yet\n")
	base, ca := testConfigCA()
	base.PeerDenyFile = deny
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := startClusterAborted(ctx, t, 3, base)
	a := c.Nodes()[0]
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Hour, Burst: 9}

	// A second certificate for node-1's name (a leaked or superseded one).
	cert, key, err := ca.NodePEM("node-1")
	if err != nil {
		t.Fatal(err)
	}
	leaked := peerPoolFrom(t, ca.CertPEM, cert, key)
	handoff := func(p *transport.Pool, key string) error {
		now := time.Now().UnixNano()
		return p.Handoff(ctx, a.PeerAddr(), transport.TransferBatch{From: "node-1",
			States: []transport.KeyState{{Key: key, Limit: l, State: gcraState(t, now, l, 1), LastNow: now}}})
	}
	replicate := func() error {
		now := time.Now().UnixNano()
		_, err := leaked.Replicate(ctx, a.PeerAddr(), transport.TransferBatch{From: "node-1",
			States: []transport.KeyState{{Key: "r", Limit: l, State: gcraState(t, now, l, 1), LastNow: now}}})
		return err
	}
	if err := handoff(leaked, "before"); err != nil {
		t.Fatalf("Transfer with node-1's second certificate before revocation: %v", err)
	}
	if err := replicate(); err != nil {
		t.Fatalf("ReplicateStream with node-1's second certificate before revocation: %v", err)
	}
	write("serial:" + serialOf(t, cert) + "\n")
	eventually(t, 5*time.Second, "the revoked serial refused on the open connection", func() bool { return handoff(leaked, "after") != nil })
	if err := replicate(); err == nil {
		t.Error("the open replication stream of the revoked certificate: still accepted")
	}
	if err := handoff(peerPoolFrom(t, ca.CertPEM, cert, key), "fresh"); err == nil {
		t.Error("a new connection with the revoked certificate: accepted")
	}
	if got := a.Stats().Members; got != 3 {
		t.Errorf("members after revoking a certificate node-1 does not use: %d, want 3", got)
	}

	// node-2's own certificate, by serial (as node-0 saw it when it dialled
	// node-2), then node-1 by name.
	serial2 := a.mem.CertSeen("node-2")
	if serial2 == "" {
		t.Fatal("node-0 recorded no certificate of node-2")
	}
	write("serial:" + serial2 + "\n")
	for _, n := range c.Nodes()[:2] {
		eventually(t, 10*time.Second, n.Name()+" drops node-2 from its ring", func() bool { return n.Stats().Members == 2 })
	}
	write("serial:" + serial2 + "\nmember:node-1\n")
	eventually(t, 10*time.Second, "node-0 drops node-1 from its ring", func() bool { return a.Stats().Members == 1 })
	write("member:node-1\nthis line is wrong\n")
	if err := a.ReloadPeerDenyList(); err == nil {
		t.Error("an invalid deny list: reloaded")
	}
	if got := a.Stats().Members; got != 1 {
		t.Errorf("members after an invalid deny list: %d, want 1 (the previous list kept)", got)
	}
}

// A deny list that does not parse fails with ErrInvalidConfig naming its
// file and line (the format is tested in internal/peergate), and New refuses a node whose deny list does
// not load, or one that sets it without peer certificates.
func TestPeerDenyFileFormat(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"node-7\n", "serial:xyz\n", "member:\n", "cert:1\n"} {
		path := filepath.Join(t.TempDir(), "deny")
		if err := os.WriteFile(path, []byte("# ok\n"+bad), 0o600); err != nil {
			t.Fatal(err)
		}
		n := &Node{cfg: Config{PeerDenyFile: path}}
		if _, err := n.loadDenyList(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), path+":2") {
			t.Errorf("%q: got %v, want ErrInvalidConfig naming %s:2", bad, err, path)
		}
	}
	path := filepath.Join(t.TempDir(), "deny")
	if err := os.WriteFile(path, []byte("oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Name, cfg.PeerDenyFile = "n", path
	if n, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
		if n != nil {
			n.Abort()
		}
		t.Errorf("New with an invalid deny list: %v, want ErrInvalidConfig", err)
	}
	cfg = testConfig()
	cfg.Name, cfg.PeerDenyFile, cfg.Insecure, cfg.SecretKey = "n", path, true, nil
	if n, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
		if n != nil {
			n.Abort()
		}
		t.Errorf("New with a deny list and Insecure: %v, want ErrInvalidConfig", err)
	}
}
