package rotate

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/transport/pki"
)

func material(t *testing.T, member string) (ca, caKey, cert, key []byte) {
	t.Helper()
	ca, caKey, err := pki.CreateCA("ca-"+member, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err = pki.CreateNode(ca, caKey, member, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca, caKey, cert, key
}

// TestBadFileKeepsOldMaterial: a reload of a broken key keeps the previous
// material and is counted; a good one replaces it.
func TestBadFileKeepsOldMaterial(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, cert, key := material(t, "m1")
	p := func(n string) string { return filepath.Join(dir, n) }
	for n, b := range map[string][]byte{"ca.crt": ca, "tls.crt": cert, "tls.key": key} {
		if err := os.WriteFile(p(n), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f, err := NewFiles(FilesConfig{CAFile: p("ca.crt"), CertFile: p("tls.crt"), KeyFile: p("tls.key"), Check: CheckChain})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := f.Material()
	if err := os.WriteFile(p("tls.key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.Reload(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Reload of a bad key = %v, want ErrInvalid", err)
	}
	if f.Material() != old || f.Failures() != 1 || f.Reloads() != 0 {
		t.Fatalf("after a bad file: material kept %v, failures %d, reloads %d", f.Material() == old, f.Failures(), f.Reloads())
	}
	cert2, key2, err := pki.CreateNode(ca, caKey, "m1", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p("tls.crt"), cert2, 0o600)
	os.WriteFile(p("tls.key"), key2, 0o600)
	if err := f.Reload(); err != nil || f.Material() == old || f.Reloads() != 1 {
		t.Fatalf("good reload: err %v, replaced %v, reloads %d", err, f.Material() != old, f.Reloads())
	}
}

// TestRemovedCAClosesConnections: a connection whose client certificate's CA
// leaves the bundle is closed by the sweep after Grace, and a new handshake
// with that certificate is refused.
func TestRemovedCAClosesConnections(t *testing.T) {
	ca1, _, cert1, key1 := material(t, "a")
	ca2, _, cert2, key2 := material(t, "b")
	both, err := NewMaterial(append(append([]byte{}, ca1...), ca2...), cert1, key1)
	if err != nil {
		t.Fatal(err)
	}
	src := &swap{m: both}
	server, _ := PeerTLS(src)
	tr := NewTracker()
	tr.Grace = time.Millisecond
	tr.Track(server)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tln := tls.NewListener(tr.Listener(ln), server)
	go func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if c.(*tls.Conn).Handshake() != nil {
					return
				}
				c.Write([]byte{1}) // the handshake is complete on this side
				c.Read(make([]byte, 1))
			}()
		}
	}()
	clientM, err := NewMaterial(append(append([]byte{}, ca1...), ca2...), cert2, key2)
	if err != nil {
		t.Fatal(err)
	}
	_, client := PeerTLS(Static{clientM})
	conn, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for tr.Len() != 1 || tr.Sweep(src.Material(), time.Now()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("connection not tracked (%d)", tr.Len())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// ca2 (the client's) leaves the bundle.
	only1, err := NewMaterial(ca1, cert1, key1)
	if err != nil {
		t.Fatal(err)
	}
	src.m = only1
	now := time.Now()
	tr.Sweep(only1, now) // marks it
	if n := tr.Sweep(only1, now.Add(time.Second)); n != 1 {
		t.Fatalf("sweep closed %d, want 1", n)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("read on a swept connection succeeded")
	}
	if c, err := tls.Dial("tcp", ln.Addr().String(), client); err == nil {
		_, err = c.Read(make([]byte, 1))
		c.Close()
		if err == nil {
			t.Fatal("handshake with a removed CA's certificate accepted")
		}
	}
}

// swap is a Source a test changes between handshakes (never during one).
type swap struct{ m *Material }

func (s *swap) Material() *Material { return s.m }
