package config

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// env looks variables up in m, with RINGLIMIT_INSECURE=true unless m sets it,
// so that tests of unrelated settings need no security material.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		if !ok && k == "RINGLIMIT_INSECURE" {
			return "true", true
		}
		return v, ok
	}
}

// envOnly looks variables up in m alone.
func envOnly(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := Load(nil, env(nil))
	if err != nil {
		t.Fatalf("Load with nothing set but RINGLIMIT_INSECURE: %v", err)
	}
	want := Default()
	want.Insecure = true
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v, want %+v", c, want)
	}
	if c.HTTPPort != 8080 || c.GossipPort != 7946 || c.GRPCPort != 8081 || c.OwnerUnreachable != "local" ||
		c.ShutdownTimeout != 10*time.Second || c.LogLevel != "info" || c.AcceptCallerTimestamps {
		t.Errorf("defaults: got %+v", c)
	}
	if d := Default(); d.Insecure || d.PeerPort != 7947 || d.AdminPort != 8082 {
		t.Errorf("Default: got insecure %v, peer port %d, admin port %d; want false, 7947, 8082", d.Insecure, d.PeerPort, d.AdminPort)
	}
}

// TestSecureByDefault checks that the daemon refuses to start without the
// security material unless --insecure, and refuses --insecure together with
// any of it.
func TestSecureByDefault(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		env  map[string]string
		want string // "" = valid
	}{
		{nil, nil, "needs --certs-dir (RINGLIMIT_CERTS_DIR) and --gossip-key-file (RINGLIMIT_GOSSIP_KEY_FILE)"},
		{[]string{"--certs-dir", "c"}, nil, "needs --gossip-key-file"},
		{nil, map[string]string{"RINGLIMIT_GOSSIP_KEY_FILE": "k"}, "needs --certs-dir"},
		{[]string{"--certs-dir", "c", "--gossip-key-file", "k"}, nil, ""},
		{[]string{"--certs-dir", "c", "--gossip-key-file", "k", "--client-token-file", "t"}, nil, ""},
		{[]string{"--insecure"}, nil, ""},
		{nil, map[string]string{"RINGLIMIT_INSECURE": "true"}, ""},
		{[]string{"--insecure", "--certs-dir", "c"}, nil, "--insecure with --certs-dir"},
		{[]string{"--insecure", "--client-token-file", "t"}, nil, "--insecure with --client-token-file"},
		{[]string{"--insecure", "--peer-deny-file", "deny"}, nil, "--insecure with --peer-deny-file"},
		// cert-manager's layout, file by file, or one file replacing its --certs-dir one.
		{[]string{"--tls-ca-file", "ca.crt", "--tls-cert-file", "tls.crt", "--tls-key-file", "tls.key", "--gossip-key-file", "k"}, nil, ""},
		{[]string{"--certs-dir", "c", "--tls-ca-file", "bundle.crt", "--gossip-key-file", "k"}, nil, ""},
		{[]string{"--tls-cert-file", "tls.crt", "--gossip-key-file", "k"}, nil, "--tls-cert-file without --certs-dir needs --tls-ca-file and --tls-key-file too"},
		{nil, map[string]string{"RINGLIMIT_TLS_CERT_FILE": "t", "RINGLIMIT_TLS_KEY_FILE": "k"}, "needs --tls-ca-file too"},
		{[]string{"--insecure", "--tls-ca-file", "ca.crt"}, nil, "--insecure with --tls-ca-file"},
		// Insecure with a gossip key: encrypted gossip, nothing else (node allows it too).
		{[]string{"--gossip-key-file", "k"}, map[string]string{"RINGLIMIT_INSECURE": "1"}, ""},
	}
	for _, tt := range tests {
		_, err := Load(tt.args, envOnly(tt.env))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Load(%q, %v): %v, want no error", tt.args, tt.env, err)
		case tt.want != "" && (!errors.Is(err, ErrInsecure) || !errors.Is(err, ErrInvalid) || !strings.Contains(fmt.Sprint(err), tt.want)):
			t.Errorf("Load(%q, %v): got %v, want ErrInsecure with %q", tt.args, tt.env, err, tt.want)
		}
	}
}

func TestPrecedence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		get  func(Config) any
		want any
	}{
		{"default", nil, nil, func(c Config) any { return c.HTTPPort }, 8080},
		{"env over default", nil, map[string]string{"RINGLIMIT_HTTP_PORT": "9000"}, func(c Config) any { return c.HTTPPort }, 9000},
		{"flag over env", []string{"--http-port", "9001"}, map[string]string{"RINGLIMIT_HTTP_PORT": "9000"}, func(c Config) any { return c.HTTPPort }, 9001},
		{"flag=form", []string{"--http-port=9002"}, nil, func(c Config) any { return c.HTTPPort }, 9002},
		{"env name", nil, map[string]string{"RINGLIMIT_NODE_NAME": "n-7"}, func(c Config) any { return c.NodeName }, "n-7"},
		{"flag name", []string{"--node-name", "n-8"}, map[string]string{"RINGLIMIT_NODE_NAME": "n-7"}, func(c Config) any { return c.NodeName }, "n-8"},
		{"join env list", nil, map[string]string{"RINGLIMIT_JOIN": "a:7946, b:7946,,c"}, func(c Config) any { return c.Join }, []string{"a:7946", "b:7946", "c"}},
		{"join flag over env", []string{"--join", "x:1", "--join", "y:2"}, map[string]string{"RINGLIMIT_JOIN": "a:7946"}, func(c Config) any { return c.Join }, []string{"x:1", "y:2"}},
		{"bool env", nil, map[string]string{"RINGLIMIT_ACCEPT_CALLER_TIMESTAMPS": "true"}, func(c Config) any { return c.AcceptCallerTimestamps }, true},
		{"bool flag over env", []string{"--accept-caller-timestamps=false"}, map[string]string{"RINGLIMIT_ACCEPT_CALLER_TIMESTAMPS": "true"}, func(c Config) any { return c.AcceptCallerTimestamps }, false},
		{"policy env", nil, map[string]string{"RINGLIMIT_OWNER_UNREACHABLE": "fail-closed"}, func(c Config) any { return c.OwnerUnreachable }, "fail-closed"},
		{"replication env", nil, map[string]string{"RINGLIMIT_REPLICATION": "off"}, func(c Config) any { return c.Replication }, "off"},
		{"duration env", nil, map[string]string{"RINGLIMIT_SHUTDOWN_TIMEOUT": "3s"}, func(c Config) any { return c.ShutdownTimeout }, 3 * time.Second},
		{"every flag has its variable", nil, map[string]string{
			"RINGLIMIT_BIND_ADDR": "127.0.0.1", "RINGLIMIT_ADVERTISE_ADDR": "10.0.0.1", "RINGLIMIT_GOSSIP_PORT": "1",
			"RINGLIMIT_GRPC_PORT": "2", "RINGLIMIT_CLUSTER_LABEL": "l", "RINGLIMIT_MAX_KEYS": "5",
			"RINGLIMIT_FORWARD_TIMEOUT": "2s", "RINGLIMIT_REJOIN_INTERVAL": "0s", "RINGLIMIT_GOSSIP_PROFILE": "fast",
			"RINGLIMIT_LOG_LEVEL": "debug", "RINGLIMIT_LOG_FORMAT": "text",
		}, func(c Config) any {
			return []any{c.BindAddr, c.AdvertiseAddr, c.GossipPort, c.GRPCPort, c.ClusterLabel, c.MaxKeys, c.ForwardTimeout, c.RejoinInterval, c.GossipProfile, c.LogLevel, c.LogFormat}
		}, []any{"127.0.0.1", "10.0.0.1", 1, 2, "l", 5, 2 * time.Second, time.Duration(0), "fast", "debug", "text"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load(tt.args, env(tt.env))
			if err != nil {
				t.Fatalf("Load(%q, %v): %v", tt.args, tt.env, err)
			}
			if got := tt.get(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // substring of the error
	}{
		{"unknown flag", []string{"--htp-port", "1"}, nil, "unknown flag: --htp-port"},
		{"stray argument", []string{"serve"}, nil, `unexpected argument "serve"`},
		{"port not a number", []string{"--http-port", "x"}, nil, "http-port"},
		{"env port not a number", nil, map[string]string{"RINGLIMIT_GOSSIP_PORT": "many"}, `RINGLIMIT_GOSSIP_PORT="many"`},
		{"port range", []string{"--grpc-port", "70000"}, nil, "--grpc-port (RINGLIMIT_GRPC_PORT) = 70000"},
		{"negative port", nil, map[string]string{"RINGLIMIT_HTTP_PORT": "-1"}, "--http-port"},
		{"same ports", []string{"--http-port", "8081"}, nil, "--grpc-port and --http-port are both 8081"},
		{"admin on http", []string{"--admin-port", "8080"}, nil, "--http-port and --admin-port are both 8080"},
		{"empty name", []string{"--node-name", " "}, nil, "--node-name"},
		{"bind not ip", []string{"--bind-addr", "localhost"}, nil, "--bind-addr"},
		{"advertise not ip", nil, map[string]string{"RINGLIMIT_ADVERTISE_ADDR": "host.example"}, "--advertise-addr"},
		{"bad seed port", []string{"--join", "a:0"}, nil, `--join (RINGLIMIT_JOIN) = "a:0"`},
		{"bad seed", []string{"--join", "http://a:1"}, nil, "--join"},
		{"empty seed host", []string{"--join", ":7946"}, nil, "empty host"},
		{"empty label", []string{"--cluster-label="}, nil, "--cluster-label"},
		{"tls file when insecure", []string{"--tls-cert-file", "c.pem"}, nil, "--insecure with --tls-cert-file"},
		{"peer on grpc", []string{"--peer-port", "8081"}, nil, "--grpc-port and --peer-port are both 8081"},
		{"policy", nil, map[string]string{"RINGLIMIT_OWNER_UNREACHABLE": "fail-sometimes"}, `--owner-unreachable (RINGLIMIT_OWNER_UNREACHABLE) = "fail-sometimes"`},
		{"replication", []string{"--replication", "eventually"}, nil, `--replication (RINGLIMIT_REPLICATION) = "eventually"`},
		{"replication lag", []string{"--replication-lag", "0s"}, nil, "--replication-lag"},
		{"lease size", []string{"--lease-size", "-1"}, nil, "--lease-size"},
		{"lease threshold", []string{"--lease-size", "64", "--lease-threshold", "0"}, nil, "--lease-threshold"},
		{"lease period", []string{"--lease-size", "64", "--lease-period", "2h"}, nil, "--lease-period"},
		{"max keys", []string{"--max-keys", "0"}, nil, "--max-keys"},
		{"max period", []string{"--max-period", "0s"}, nil, "--max-period"},
		{"max limit", []string{"--max-limit", "-1"}, nil, "--max-limit"},
		{"forward timeout", []string{"--forward-timeout", "0s"}, nil, "--forward-timeout"},
		{"rejoin", []string{"--rejoin-interval", "-1s"}, nil, "--rejoin-interval"},
		{"snapshot interval", []string{"--snapshot-interval", "-1s"}, nil, "--snapshot-interval"},
		{"profile", []string{"--gossip-profile", "wan"}, nil, "--gossip-profile"},
		{"shutdown", []string{"--shutdown-timeout", "0s"}, nil, "--shutdown-timeout"},
		{"duration syntax", nil, map[string]string{"RINGLIMIT_SHUTDOWN_TIMEOUT": "10"}, "RINGLIMIT_SHUTDOWN_TIMEOUT"},
		{"bool syntax", nil, map[string]string{"RINGLIMIT_ACCEPT_CALLER_TIMESTAMPS": "yes please"}, "RINGLIMIT_ACCEPT_CALLER_TIMESTAMPS"},
		{"log level", []string{"--log-level", "loud"}, nil, "--log-level"},
		{"log format", []string{"--log-format", "xml"}, nil, "--log-format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(tt.args, env(tt.env))
			if err == nil {
				t.Fatalf("Load(%q, %v): got nil error, want one containing %q", tt.args, tt.env, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error: got %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestGossipKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key32 := bytes.Repeat([]byte{0xa5, 0x01, 0xff, 0x10}, 8)
	key16 := []byte("0123456789abc\x00\xfe!") // raw: not base64
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		path string
		want []byte
		err  string
	}{
		{"base64 with newline", write("b64", []byte(base64.StdEncoding.EncodeToString(key32)+"\n")), key32, ""},
		{"raw 32", write("raw32", key32), key32, ""},
		{"raw 16", write("raw16", key16), key16, ""},
		{"base64 of 24", write("b64-24", []byte(base64.StdEncoding.EncodeToString(key32[:24]))), key32[:24], ""},
		{"wrong length", write("short", []byte("abc")), nil, "want 16, 24 or 32 bytes"},
		{"base64 wrong length", write("b64-5", []byte(base64.StdEncoding.EncodeToString(key32[:5]))), nil, "base64 of 5 bytes"},
		// 16 characters of base64 (12 bytes) are not taken for a raw 16-byte key.
		{"base64 of 12 is not raw 16", write("b64-12", []byte(base64.StdEncoding.EncodeToString(key32[:12]))), nil, "base64 of 12 bytes"},
		{"missing", filepath.Join(dir, "nope"), nil, "no such file"},
	}
	for _, tt := range tests {
		got, err := ReadGossipKey(tt.path)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: got error %v, want one containing %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, tt.want) {
			t.Errorf("%s: got %x, %v, want %x", tt.name, got, err, tt.want)
		}
	}

	// The key reaches node.Config; an unreadable key is a config error.
	c, err := Load([]string{"--gossip-key-file", filepath.Join(dir, "b64"), "--certs-dir", dir, "--node-name", "n"}, envOnly(nil))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := c.NodeConfig(nil, nil)
	if err != nil || !bytes.Equal(nc.SecretKey, key32) {
		t.Errorf("NodeConfig SecretKey: got %x, %v, want %x", nc.SecretKey, err, key32)
	}
	c.GossipKeyFile = filepath.Join(dir, "short")
	if _, err := c.NodeConfig(nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("NodeConfig with a bad key: got %v, want ErrInvalid", err)
	}
}

func TestNodeConfig(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, 32)
	keyFile := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]string{
		"--node-name", "n1", "--bind-addr", "127.0.0.1", "--advertise-addr", "127.0.0.2",
		"--gossip-port", "0", "--grpc-port", "0", "--peer-port", "0", "--http-port", "0", "--join", "a:1,b:2",
		"--cluster-label", "test", "--owner-unreachable", "fail-open", "--max-keys", "42",
		"--max-period", "744h", "--max-limit", "1000", "--peer-deny-file", "/certs/deny",
		"--replication", "sync", "--replication-lag", "7ms",
		"--lease-size", "512", "--lease-threshold", "50", "--lease-period", "250ms",
		"--accept-caller-timestamps", "--forward-timeout", "300ms", "--rejoin-interval", "2s",
		"--gossip-profile", "fast", "--shutdown-timeout", "4s",
		"--state-dir", "/var/lib/ringlimit", "--snapshot-interval", "1m",
		"--certs-dir", "/certs", "--gossip-key-file", keyFile,
	}, envOnly(nil))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := c.NodeConfig(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := node.DefaultConfig()
	want.Gossip = node.FastGossip()
	want.Name, want.BindAddr, want.AdvertiseAddr = "n1", "127.0.0.1", "127.0.0.2"
	want.GossipPort, want.PeerPort = 0, 0
	want.Join = []string{"a:1", "b:2"}
	want.ClusterLabel = "test"
	want.OwnerUnreachable = node.FailOpen
	want.Replication = node.ReplicationSync
	want.ReplicationLag = 7 * time.Millisecond
	want.Lease.Size, want.Lease.Threshold, want.Lease.Period = 512, 50, 250*time.Millisecond
	want.MaxKeys = 42
	want.MaxPeriod = 744 * time.Hour
	want.MaxLimit = 1000
	want.PeerDenyFile = "/certs/deny"
	want.AcceptCallerTimestamps = true
	want.ForwardTimeout = 300 * time.Millisecond
	want.RejoinInterval = 2 * time.Second
	want.CloseTimeout = 4 * time.Second
	want.StateDir = "/var/lib/ringlimit"
	want.SnapshotInterval = time.Minute
	want.TLSCertFile, want.TLSKeyFile, want.TLSCAFile = "/certs/node.crt", "/certs/node.key", "/certs/ca.crt"
	want.SecretKey = key
	if !reflect.DeepEqual(nc, want) {
		t.Errorf("got  %+v\nwant %+v", nc, want)
	}
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	for flag, want := range map[string]string{"gossip-port": "RINGLIMIT_GOSSIP_PORT", "node-name": "RINGLIMIT_NODE_NAME", "join": "RINGLIMIT_JOIN"} {
		if got := EnvName(flag); got != want {
			t.Errorf("EnvName(%q): got %q, want %q", flag, got, want)
		}
	}
}

// TestSecurityFiles reads a certs directory made by pki: the server TLS, the
// tokens, a WARN for a key readable by others, and refusals naming the file.
func TestSecurityFiles(t *testing.T) {
	t.Parallel()
	ca, err := nodetest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key, err := ca.NodePEM("n1")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("ca.crt", ca.CertPEM, 0o644)
	write("node.crt", cert, 0o644)
	write("node.key", key, 0o600)
	tokens := write("tokens", []byte("Xq7Lm2Rv9Tk4Wp8Zc3Nb6Hd,ops\n"), 0o600)
	c := Config{NodeName: "n1", CertsDir: dir, ClientTokenFile: tokens}
	sec, err := c.Security()
	if err != nil || sec.TLS == nil || sec.Tokens.Len() != 1 || len(sec.Warnings) != 0 {
		t.Fatalf("Security: got %+v, %v; want TLS, 1 token, no warnings", sec, err)
	}
	write("node.key", key, 0o644)
	if sec, err := c.Security(); err != nil || len(sec.Warnings) != 1 || !strings.Contains(sec.Warnings[0], "node.key is readable by group or others") {
		t.Errorf("node.key 0644: got %v, %v; want one warning naming node.key", sec.Warnings, err)
	}
	c.NodeName = "n2"
	if _, err := c.Security(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `node.crt names member "n1", not --node-name "n2"`) {
		t.Errorf("certificate of another member: got %v", err)
	}
	if sec, err := (&Config{Insecure: true}).Security(); err != nil || sec.TLS != nil {
		t.Errorf("insecure: got %+v, %v; want nothing", sec, err)
	}
}

// TestSecurityCertManagerLayout reads cert-manager's file names from two
// mounts, as the Kubernetes manifests give them: tls.crt and tls.key from the
// member's volume, ca.crt from the trust bundle's; node.Config gets the same
// paths.
func TestSecurityCertManagerLayout(t *testing.T) {
	t.Parallel()
	ca, err := nodetest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.NodePEM("ringlimit-0")
	if err != nil {
		t.Fatal(err)
	}
	tlsDir, trustDir := t.TempDir(), t.TempDir()
	files := map[string][]byte{filepath.Join(tlsDir, "tls.crt"): cert, filepath.Join(tlsDir, "tls.key"): key, filepath.Join(trustDir, "ca.crt"): ca.CertPEM}
	for p, b := range files {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keyFile := filepath.Join(tlsDir, "tls.key")
	// Readable by this process's own group, as a volume owned by the pod's
	// fsGroup is: no warning (it could not be chmod-ed there anyway).
	if err := os.Chmod(keyFile, 0o640); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"RINGLIMIT_NODE_NAME":       "ringlimit-0",
		"RINGLIMIT_TLS_CA_FILE":     filepath.Join(trustDir, "ca.crt"),
		"RINGLIMIT_TLS_CERT_FILE":   filepath.Join(tlsDir, "tls.crt"),
		"RINGLIMIT_TLS_KEY_FILE":    keyFile,
		"RINGLIMIT_GOSSIP_KEY_FILE": "unused-here",
	}
	c, err := Load(nil, envOnly(env))
	if err != nil {
		t.Fatal(err)
	}
	if sec, err := c.Security(); err != nil || sec.TLS == nil || len(sec.Warnings) != 0 {
		t.Fatalf("Security: got %+v, %v; want TLS and no warning", sec, err)
	}
	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if sec, err := c.Security(); err != nil || len(sec.Warnings) != 1 {
		t.Fatalf("tls.key 0644: got %v, %v; want one warning", sec.Warnings, err)
	}
	c.GossipKeyFile = ""
	nc, err := c.NodeConfig(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if nc.TLSCAFile != env["RINGLIMIT_TLS_CA_FILE"] || nc.TLSCertFile != env["RINGLIMIT_TLS_CERT_FILE"] || nc.TLSKeyFile != keyFile {
		t.Errorf("node.Config files: got %q, %q, %q; want the three flags' files", nc.TLSCAFile, nc.TLSCertFile, nc.TLSKeyFile)
	}
	c.NodeName = "ringlimit-1"
	if _, err := c.Security(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `--tls-cert-file`) ||
		!strings.Contains(err.Error(), `tls.crt names member "ringlimit-0", not --node-name "ringlimit-1"`) {
		t.Errorf("certificate of another member: got %v, want the refusal to name --tls-cert-file and tls.crt", err)
	}
}
