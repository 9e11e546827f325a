// Package auth authenticates the callers of ringlimitd's client listeners (the
// gRPC Limiter service and the HTTP/JSON API) in secure mode.
//
// A caller is authenticated by either of two credentials:
//
//   - a client certificate: the TLS handshake verified it against the cluster
//     CA (pki.ServerTLS asks for one and verifies it when given) and its leaf
//     names a client (the ringlimit://client/<name> URI SAN of
//     pki.CreateClient, `ringlimit cert create-client`). A node certificate
//     (ringlimit://member/<name>) is refused here: members talk to each other
//     on the peer port, and one credential has one role, so a leaked client
//     certificate cannot join the ring and a member's certificate is not a
//     caller's;
//   - a bearer token listed in the token file (--client-token-file): HTTP
//     "Authorization: Bearer <token>", gRPC metadata "authorization" with the
//     same value. Tokens are compared in constant time against every listed
//     token (crypto/subtle over SHA-256 digests), so neither the position of a
//     match nor the length of a token leaks through timing.
//
// Data flow: Authenticator.Authenticate takes the connection's TLS state and
// the Authorization value and returns the caller's Identity or an error
// wrapping ErrUnauthenticated. HTTP wraps an http.Handler (401 with
// WWW-Authenticate and a JSON error otherwise); UnaryInterceptor and
// StreamInterceptor do the same for gRPC (codes.Unauthenticated). The
// Identity travels in the request context (FromContext).
package auth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/transport/pki"
)

// Named errors of package auth.
var (
	// ErrUnauthenticated is wrapped by every refusal of Authenticate: no
	// credential, an unknown token, a malformed Authorization value, a
	// certificate that names no client.
	ErrUnauthenticated = errors.New("auth: unauthenticated")
	// ErrTokenFile is wrapped by every error of ParseTokens and LoadTokens,
	// naming the line at fault (never the token).
	ErrTokenFile = errors.New("auth: invalid token file")
)

// MinTokenLen is the shortest token accepted in a token file, in bytes: 16
// bytes of a random base64 or hex string (`head -c 32 /dev/urandom | base64`
// gives 44) keep guessing out of reach.
const MinTokenLen = 16

// Methods of Identity.Method.
const (
	// MethodCertificate: a client certificate verified against the cluster CA.
	MethodCertificate = "certificate"
	// MethodToken: a bearer token from the token file.
	MethodToken = "token"
)

// Identity is an authenticated caller.
type Identity struct {
	// Name is the client name of the certificate, or the token's name in the
	// token file ("token:<line>" when the line names none).
	Name string
	// Method is MethodCertificate or MethodToken.
	Method string
}

// Tokens is a parsed token file. The zero value accepts no token.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	digest [sha256.Size]byte
	name   string
}

// Len returns the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// ParseTokens reads a token file: one token per line, optionally followed by
// a comma and a name for logs ("token,name", the first two columns of a
// Kubernetes static token file). Surrounding spaces are trimmed; blank lines
// and lines starting with '#' are skipped. A token is at least MinTokenLen
// bytes of printable ASCII without spaces or commas with an estimated entropy
// of at least pki.MinTokenBits (pki.TokenBits: by its alphabet, with runs and
// repeats counting 1 bit a character, so `passwordpassword` is refused
// whatever its length; `ringlimit cert create-token` writes 256 random bits);
// a token listed twice is an error. Errors wrap ErrTokenFile and name the line, never the token.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		tok, name, _ := strings.Cut(text, ",")
		tok, name = strings.TrimSpace(tok), strings.TrimSpace(name)
		if len(tok) < MinTokenLen {
			return nil, fmt.Errorf("%w: line %d: token of %d bytes, want at least %d", ErrTokenFile, line, len(tok), MinTokenLen)
		}
		for i := 0; i < len(tok); i++ {
			if tok[i] <= ' ' || tok[i] > '~' {
				return nil, fmt.Errorf("%w: line %d: byte %d of the token is not printable ASCII", ErrTokenFile, line, i)
			}
		}
		if bits := pki.TokenBits(tok); bits < pki.MinTokenBits {
			return nil, fmt.Errorf("%w: line %d: token too weak: an estimated %.0f bits, want at least %d (make one with `ringlimit cert create-token`)",
				ErrTokenFile, line, bits, pki.MinTokenBits)
		}
		if name == "" {
			name = fmt.Sprintf("token:%d", line)
		}
		d := sha256.Sum256([]byte(tok))
		if first, dup := seen[d]; dup {
			return nil, fmt.Errorf("%w: line %d repeats the token of line %d", ErrTokenFile, line, first)
		}
		seen[d] = line
		t.entries = append(t.entries, tokenEntry{digest: d, name: name})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenFile, err)
	}
	return t, nil
}

// LoadTokens reads the token file at path (see ParseTokens). A file without
// any token is an error: it would lock every token caller out.
func LoadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenFile, err)
	}
	t, err := ParseTokens(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if t.Len() == 0 {
		return nil, fmt.Errorf("%w: %s holds no token", ErrTokenFile, path)
	}
	return t, nil
}

// Lookup returns the name of tok and true if the file lists it. It compares
// the SHA-256 digest of tok with every entry in constant time and never stops
// early, so its duration depends only on the number of entries.
func (t *Tokens) Lookup(tok string) (string, bool) {
	if t == nil {
		return "", false
	}
	d := sha256.Sum256([]byte(tok))
	match := -1
	for i := range t.entries {
		eq := subtle.ConstantTimeCompare(d[:], t.entries[i].digest[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return "", false
	}
	return t.entries[match].name, true
}

// Authenticator decides who a caller is. It is safe for concurrent use.
type Authenticator struct {
	tokens atomic.Pointer[Tokens]
	hooks  Hooks
}

// Hooks are told of every decision of an Authenticator, with the listener
// ("http" or "grpc") and the caller's remote address (host:port as its
// connection reports it). Nil hooks are skipped.
type Hooks struct {
	// Accepted is called for every authenticated request; it must not block.
	Accepted func(listener, remote string)
	// Refused is called for every refused request with the reason, before
	// the refusal is answered: it may delay the answer (throttling), and
	// blocks only that request.
	Refused func(listener, remote string, err error)
}

// New returns an Authenticator accepting client certificates (verified by
// the listener's TLS configuration) and the tokens of tokens (nil: none),
// telling hooks of each decision.
func New(tokens *Tokens, hooks Hooks) *Authenticator {
	if hooks.Accepted == nil {
		hooks.Accepted = func(string, string) {}
	}
	if hooks.Refused == nil {
		hooks.Refused = func(string, string, error) {}
	}
	a := &Authenticator{hooks: hooks}
	a.tokens.Store(tokens)
	return a
}

// SetTokens replaces the accepted tokens (nil: none) for every request that
// authenticates from now on: a token file reloaded without a restart.
func (a *Authenticator) SetTokens(t *Tokens) { a.tokens.Store(t) }

// Lookup returns the name of tok and true if the current tokens list it (see
// Tokens.Lookup).
func (a *Authenticator) Lookup(tok string) (string, bool) { return a.tokens.Load().Lookup(tok) }

// Authenticate returns the caller's Identity from the TLS state of its
// connection (nil for plaintext) and the value of its Authorization header or
// metadata ("" when absent). A verified client certificate wins; otherwise a
// "Bearer <token>" listed in the token file. Errors wrap ErrUnauthenticated
// and say what was missing or wrong, never the token.
func (a *Authenticator) Authenticate(cs *tls.ConnectionState, authorization string) (Identity, error) {
	var certErr error
	if cs != nil && len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
		leaf := cs.VerifiedChains[0][0]
		if name, ok := pki.ClientName(leaf); ok {
			return Identity{Name: name, Method: MethodCertificate}, nil
		}
		certErr = fmt.Errorf("certificate %q is not a client certificate (a member's certificate is for the peer port)", leaf.Subject.CommonName)
	}
	if authorization == "" {
		if certErr != nil {
			return Identity{}, refused(certErr.Error())
		}
		if cs == nil {
			return Identity{}, refused("plaintext connection without credentials: use TLS with a client certificate or a bearer token")
		}
		return Identity{}, refused("no client certificate and no bearer token")
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return Identity{}, refused(`authorization is not "Bearer <token>"`)
	}
	name, found := a.Lookup(strings.TrimSpace(tok))
	if !found {
		return Identity{}, refused("unknown bearer token")
	}
	return Identity{Name: name, Method: MethodToken}, nil
}

type ctxKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the Identity that HTTP or an interceptor stored in ctx.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}

// HTTP returns next behind authentication: an unauthenticated request is
// answered by refuse (which should write 401 and say why; WWW-Authenticate is
// already set) and never reaches next.
func (a *Authenticator) HTTP(next http.Handler, refuse func(w http.ResponseWriter, r *http.Request, err error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := a.Authenticate(r.TLS, r.Header.Get("Authorization"))
		if err != nil {
			a.hooks.Refused("http", r.RemoteAddr, err)
			w.Header().Set("WWW-Authenticate", `Bearer realm="ringlimit"`)
			refuse(w, r, err)
			return
		}
		a.hooks.Accepted("http", r.RemoteAddr)
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// UnaryInterceptor returns a gRPC unary interceptor that answers
// codes.Unauthenticated, without calling the handler, unless the caller
// authenticates (the connection's client certificate, or metadata
// "authorization: Bearer <token>").
func (a *Authenticator) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := a.grpc(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor is UnaryInterceptor for streaming RPCs.
func (a *Authenticator) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := a.grpc(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &identityStream{ServerStream: ss, ctx: ctx})
	}
}

func (a *Authenticator) grpc(ctx context.Context, method string) (context.Context, error) {
	var cs *tls.ConnectionState
	remote := ""
	if p, ok := peer.FromContext(ctx); ok {
		if p.Addr != nil {
			remote = p.Addr.String()
		}
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			cs = &ti.State
		}
	}
	var authz string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			authz = v[0]
		}
	}
	id, err := a.Authenticate(cs, authz)
	if err != nil {
		a.hooks.Refused("grpc", remote, err)
		return nil, status.Errorf(codes.Unauthenticated, "%s: %s", method, ClientMessage(err))
	}
	a.hooks.Accepted("grpc", remote)
	return WithIdentity(ctx, id), nil
}

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identityStream) Context() context.Context { return s.ctx }

// refusedError is a refused credential: ErrUnauthenticated with the reason.
type refusedError struct{ reason string }

func refused(reason string) error { return &refusedError{reason} }

func (e *refusedError) Error() string { return ErrUnauthenticated.Error() + ": " + e.reason }

func (e *refusedError) Is(target error) bool { return target == ErrUnauthenticated }

// ClientMessage is the text a door answers for an error of Authenticate:
// "unauthenticated: <reason>", without the package prefix (which stays in
// the logs); any other error's own text.
func ClientMessage(err error) string {
	var re *refusedError
	if errors.As(err, &re) {
		return "unauthenticated: " + re.reason
	}
	return err.Error()
}
