package daemon

import (
	"crypto/tls"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/config"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/metrics"
	"github.com/ringlimit/ringlimit/transport/pki"
)

// TestTokenFileReloaded: a new token file replaces the accepted tokens
// without a restart (the old token refused, the new one accepted), and a bad
// new file keeps the previous tokens and is counted.
func TestTokenFileReloaded(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	d := startDaemon(t, testConfig(t, p, "tok"))
	url := "https://" + d.HTTPAddr() + "/v1/check"
	body := `{"key":"k","algorithm":"gcra","limit":1000,"period":"1s"}`
	// A new connection per request: every request authenticates anew anyway.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: p.anonTLS, DisableKeepAlives: true}}
	status := func(token string) int {
		code, _, err := httpTry(c, "POST", url, body, "Bearer "+token)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	if got := status(testToken); got != 200 {
		t.Fatalf("initial token: %d, want 200", got)
	}
	newToken, err := pki.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, p.tokens, newToken+",rotated\n")
	waitUntil(t, 10*time.Second, "the new token file applied", func() bool {
		return status(newToken) == 200 && status(testToken) == 401
	})
	writeAtomic(t, p.tokens, "short\n")
	waitUntil(t, 10*time.Second, "the bad file counted", func() bool {
		return tokenReloads(t, d, "error") >= 1
	})
	if got := status(newToken); got != 200 {
		t.Fatalf("after a bad file the previous token answers %d, want 200", got)
	}
	if err := d.ReloadTokens(); err == nil {
		t.Fatal("ReloadTokens of a bad file: nil error")
	}
}

// TestClientPortsFollowNewCertificate: the HTTPS client port presents the
// node certificate reloaded on SIGHUP's path (Node.ReloadTLS) to the next
// handshake, without a restart.
func TestClientPortsFollowNewCertificate(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	cfg := testConfig(t, p, "cert")
	d := startDaemon(t, cfg)
	serial := func() string {
		conn, err := tls.Dial("tcp", d.HTTPAddr(), p.anonTLS)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	cert, key, err := p.ca.NodePEM("cert")
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(cfg.CertsDir, config.NodeCertFile), string(cert))
	writeAtomic(t, filepath.Join(cfg.CertsDir, config.NodeKeyFile), string(key))
	waitUntil(t, 10*time.Second, "the new certificate served", func() bool {
		_ = d.Node().ReloadTLS()
		return serial() != before
	})
}

// tokenReloads reads ringlimit_token_reloads_total{result} from d's registry.
func tokenReloads(t *testing.T, d *Daemon, result string) float64 {
	t.Helper()
	mfs, err := d.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.TokenReloadsTotal {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
