package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/transport/pki"
)

const (
	tokA = "tokA-Kf8xQ2mZ7pLw9rTb4vNc1s"
	tokB = "tokB-h3Rq9XwL2pV7nZc5Tm8Ykd"
)

func mustTokens(t *testing.T, text string) *Tokens {
	t.Helper()
	tk, err := ParseTokens(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestParseTokens(t *testing.T) {
	t.Parallel()
	tk := mustTokens(t, "# ops tokens\n\n  "+tokA+" , alice \n"+tokB+"\n")
	if tk.Len() != 2 {
		t.Fatalf("Len: got %d, want 2", tk.Len())
	}
	for _, c := range []struct {
		tok, name string
		ok        bool
	}{{tokA, "alice", true}, {tokB, "token:4", true}, {tokA + "x", "", false}, {tokA[:len(tokA)-1], "", false}, {"", "", false}} {
		if name, ok := tk.Lookup(c.tok); name != c.name || ok != c.ok {
			t.Errorf("Lookup(%q): got %q %v, want %q %v", c.tok, name, ok, c.name, c.ok)
		}
	}
	bad := []struct{ text, want string }{
		{"short\n", "line 1: token of 5 bytes, want at least 16"},
		{"# c\n" + tokA + "\n" + tokA + ",again\n", "line 3 repeats the token of line 2"},
		{"tok-with space-xxxxxxxx\n", "line 1: byte 8"},
		{"tok-\x01-xxxxxxxxxxxxxxxxx\n", "not printable ASCII"},
		// Long enough, weak all the same (it used to be accepted).
		{"passwordpassword\n", "line 1: token too weak: an estimated 24 bits, want at least 112"},
		{"secret-secret-secret-secret-secret\n", "token too weak"},
		{"0123456789abcdef0123456789abcdef\n", "token too weak"},
	}
	for _, b := range bad {
		_, err := ParseTokens(strings.NewReader(b.text))
		if !errors.Is(err, ErrTokenFile) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("ParseTokens(%q): got %v, want ErrTokenFile with %q", b.text, err, b.want)
		}
		if err != nil && strings.Contains(err.Error(), tokA) {
			t.Errorf("error %q reveals the token", err)
		}
	}
	var zero *Tokens
	if _, ok := zero.Lookup(tokA); ok {
		t.Error("nil Tokens accepted a token")
	}
}

// pkiSet is a CA with a client and a node certificate, and a client
// certificate from another CA.
type pkiSet struct {
	pool                          *x509.CertPool
	client, node, foreign         *x509.Certificate
	caPEM, nodePEM, nodeKey       []byte
	clientPEM, clientKey          []byte
	foreignPEM, foreignKey        []byte
	foreignCAPEM, foreignCAKeyPEM []byte
}

func newPKI(t *testing.T) *pkiSet {
	t.Helper()
	var s pkiSet
	var caKey []byte
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	s.caPEM, caKey, err = pki.CreateCA("test CA", time.Hour)
	must(err)
	s.nodePEM, s.nodeKey, err = pki.CreateNode(s.caPEM, caKey, "node-1", []string{"127.0.0.1", "localhost"}, time.Hour)
	must(err)
	s.clientPEM, s.clientKey, err = pki.CreateClient(s.caPEM, caKey, "alice", time.Hour)
	must(err)
	s.foreignCAPEM, s.foreignCAKeyPEM, err = pki.CreateCA("other CA", time.Hour)
	must(err)
	s.foreignPEM, s.foreignKey, err = pki.CreateClient(s.foreignCAPEM, s.foreignCAKeyPEM, "mallory", time.Hour)
	must(err)
	s.pool = x509.NewCertPool()
	s.pool.AppendCertsFromPEM(s.caPEM)
	for _, c := range []struct {
		dst **x509.Certificate
		pem []byte
	}{{&s.client, s.clientPEM}, {&s.node, s.nodePEM}, {&s.foreign, s.foreignPEM}} {
		*c.dst, err = pki.ParseCertificate(c.pem)
		must(err)
	}
	return &s
}

func verified(c *x509.Certificate) *tls.ConnectionState {
	return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c}}, PeerCertificates: []*x509.Certificate{c}}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	a := New(mustTokens(t, tokA+",alice-token\n"), Hooks{})
	tests := []struct {
		name  string
		cs    *tls.ConnectionState
		authz string
		want  Identity
		err   string
	}{
		{"client cert", verified(p.client), "", Identity{"alice", MethodCertificate}, ""},
		{"client cert wins over a bad token", verified(p.client), "Bearer nope", Identity{"alice", MethodCertificate}, ""},
		{"token over TLS", &tls.ConnectionState{}, "Bearer " + tokA, Identity{"alice-token", MethodToken}, ""},
		{"token, lower-case scheme", &tls.ConnectionState{}, "bearer " + tokA, Identity{"alice-token", MethodToken}, ""},
		{"member cert refused", verified(p.node), "", Identity{}, "not a client certificate"},
		{"member cert with a token", verified(p.node), "Bearer " + tokA, Identity{"alice-token", MethodToken}, ""},
		// An unverified certificate (the handshake did not verify it) counts for nothing.
		{"unverified cert", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{p.foreign}}, "", Identity{}, "no client certificate and no bearer token"},
		{"nothing over TLS", &tls.ConnectionState{}, "", Identity{}, "no client certificate and no bearer token"},
		{"nothing, plaintext", nil, "", Identity{}, "plaintext connection without credentials"},
		{"wrong token", &tls.ConnectionState{}, "Bearer " + tokB, Identity{}, "unknown bearer token"},
		{"basic auth", &tls.ConnectionState{}, "Basic YWxpY2U6cHc=", Identity{}, `not "Bearer <token>"`},
		{"bare token", &tls.ConnectionState{}, tokA, Identity{}, `not "Bearer <token>"`},
		{"empty bearer", &tls.ConnectionState{}, "Bearer ", Identity{}, `not "Bearer <token>"`},
	}
	for _, tt := range tests {
		id, err := a.Authenticate(tt.cs, tt.authz)
		if tt.err != "" {
			if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: got %v, want ErrUnauthenticated with %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || id != tt.want {
			t.Errorf("%s: got %+v %v, want %+v", tt.name, id, err, tt.want)
		}
	}
}

// TestHTTPOverTLS runs the middleware behind pki.ServerTLS on a real TLS
// server: a client certificate or a token gets through; nothing, a wrong
// token, or a certificate from another CA does not.
func TestHTTPOverTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	refusals := 0
	a := New(mustTokens(t, tokA+",ops\n"), Hooks{Refused: func(listener, _ string, err error) {
		if listener == "http" && errors.Is(err, ErrUnauthenticated) {
			refusals++
		}
	}})
	reached := 0
	h := a.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		id, _ := FromContext(r.Context())
		io.WriteString(w, id.Method+":"+id.Name)
	}), func(w http.ResponseWriter, _ *http.Request, err error) {
		http.Error(w, err.Error(), http.StatusUnauthorized)
	})
	srv := httptest.NewUnstartedServer(h)
	var err error
	srv.TLS, err = pki.ServerTLS(p.caPEM, p.nodePEM, p.nodeKey)
	if err != nil {
		t.Fatal(err)
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	client := func(certPEM, keyPEM []byte) *http.Client {
		cfg, err := pki.ClientTLS(p.caPEM, certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	}
	get := func(c *http.Client, authz string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("401 without WWW-Authenticate")
		}
		return resp.StatusCode, string(b), nil
	}
	if code, body, err := get(client(p.clientPEM, p.clientKey), ""); err != nil || code != 200 || body != "certificate:alice" {
		t.Errorf("client certificate: got %d %q %v, want 200 certificate:alice", code, body, err)
	}
	if code, body, err := get(client(nil, nil), "Bearer "+tokA); err != nil || code != 200 || body != "token:ops" {
		t.Errorf("token: got %d %q %v, want 200 token:ops", code, body, err)
	}
	before := reached
	if code, _, err := get(client(nil, nil), ""); err != nil || code != 401 {
		t.Errorf("no credential: got %d %v, want 401", code, err)
	}
	if code, _, err := get(client(nil, nil), "Bearer "+tokB); err != nil || code != 401 {
		t.Errorf("wrong token: got %d %v, want 401", code, err)
	}
	if code, _, err := get(client(p.nodePEM, p.nodeKey), ""); err != nil || code != 401 {
		t.Errorf("member certificate: got %d %v, want 401", code, err)
	}
	// A certificate from another CA: Go's client does not even offer it (the
	// server names its CA), so the request arrives without credentials: 401.
	if code, _, err := get(client(p.foreignPEM, p.foreignKey), ""); err != nil || code != 401 {
		t.Errorf("client certificate from another CA: got %d %v, want 401", code, err)
	}
	// Forced onto the handshake, it fails the server's verification.
	forced := client(nil, nil)
	foreign, err := tls.X509KeyPair(p.foreignPEM, p.foreignKey)
	if err != nil {
		t.Fatal(err)
	}
	forced.Transport.(*http.Transport).TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &foreign, nil
	}
	if code, _, err := get(forced, ""); err == nil {
		t.Errorf("client certificate from another CA, forced: got %d, want a TLS handshake error", code)
	}
	// Plaintext to the TLS port is refused by the TLS server.
	if resp, err := http.Get("http://" + srv.Listener.Addr().String()); err == nil {
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plaintext to the TLS port: got %d, want 400 (client sent an HTTP request to an HTTPS server)", resp.StatusCode)
		}
		resp.Body.Close()
	}
	if reached != before {
		t.Errorf("handler reached %d times by refused requests", reached-before)
	}
	if refusals != 4 {
		t.Errorf("onRefuse called %d times, want 4 (no credential, wrong token, member certificate, foreign certificate)", refusals)
	}
}

func TestInterceptors(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	a := New(mustTokens(t, tokA+",ops\n"), Hooks{})
	ctxWith := func(cs *tls.ConnectionState, authz string) context.Context {
		ctx := context.Background()
		if cs != nil {
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{}, AuthInfo: credentials.TLSInfo{State: *cs}})
		}
		if authz != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", authz))
		}
		return ctx
	}
	unary := a.UnaryInterceptor()
	stream := a.StreamInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/ringlimit.v1.Limiter/Check"}
	sinfo := &grpc.StreamServerInfo{FullMethod: "/ringlimit.v1.Limiter/Watch"}
	cases := []struct {
		name string
		ctx  context.Context
		want string // identity name, "" = refused
	}{
		{"client cert", ctxWith(verified(p.client), ""), "alice"},
		{"token", ctxWith(&tls.ConnectionState{}, "Bearer "+tokA), "ops"},
		{"no credentials", ctxWith(&tls.ConnectionState{}, ""), ""},
		{"plaintext", ctxWith(nil, ""), ""},
		{"wrong token", ctxWith(&tls.ConnectionState{}, "Bearer "+tokB), ""},
		{"member cert", ctxWith(verified(p.node), ""), ""},
	}
	for _, c := range cases {
		var got string
		_, err := unary(c.ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
			id, _ := FromContext(ctx)
			got = id.Name
			return nil, nil
		})
		serr := stream(nil, &fakeStream{ctx: c.ctx}, sinfo, func(_ any, ss grpc.ServerStream) error {
			id, _ := FromContext(ss.Context())
			if id.Name != c.want {
				t.Errorf("%s stream: identity %q, want %q", c.name, id.Name, c.want)
			}
			return nil
		})
		if c.want == "" {
			for _, e := range []error{err, serr} {
				if status.Code(e) != codes.Unauthenticated || !strings.Contains(e.Error(), "Limiter/") {
					t.Errorf("%s: got %v, want Unauthenticated naming the method", c.name, e)
				}
			}
			if got != "" {
				t.Errorf("%s: handler reached", c.name)
			}
			continue
		}
		if err != nil || serr != nil || got != c.want {
			t.Errorf("%s: got %q %v %v, want %q", c.name, got, err, serr, c.want)
		}
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f *fakeStream) Context() context.Context { return f.ctx }
