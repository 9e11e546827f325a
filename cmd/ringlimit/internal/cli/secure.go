package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/metadata"

	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/remote"
	"github.com/ringlimit/ringlimit/transport/pki"
)

// secFlags are the client side of a secure daemon's client ports: TLS
// verified against the cluster CA, and a credential (a client certificate or
// a bearer token). --insecure talks plaintext to a daemon run with --insecure.
type secFlags struct {
	certsDir  string
	user      string
	token     string
	tokenFile string
	insecure  bool
}

func (f *secFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.certsDir, "certs-dir", "certs", "directory with ca.crt (verifies the daemons) and client.<user>.crt/.key (authenticates this client)")
	fs.StringVar(&f.user, "user", "root", "client certificate to present: <certs-dir>/client.<user>.crt and .key, when present")
	fs.StringVar(&f.token, "token", "", "bearer token to present (instead of, or besides, a client certificate); visible in ps: prefer --token-file")
	fs.StringVar(&f.tokenFile, "token-file", "", "file whose first line is the bearer token (a daemon's token file works: the part before a comma is taken)")
	fs.BoolVar(&f.insecure, "insecure", false, "plaintext, no credentials: for daemons run with --insecure")
}

// security is what a secure client needs: nil TLS and "" token when insecure.
type security struct {
	tls   *tls.Config
	token string
}

// resolve reads the files the flags name. fs tells which flags were set, so
// that --insecure with any other security flag is an error.
func (f *secFlags) resolve(fs *pflag.FlagSet) (security, error) {
	if f.insecure {
		for _, name := range []string{"certs-dir", "user", "token", "token-file"} {
			if fs.Changed(name) {
				return security{}, fmt.Errorf("--insecure excludes --%s: drop one or the other", name)
			}
		}
		return security{}, nil
	}
	caPEM, err := os.ReadFile(filepath.Join(f.certsDir, caCertFile))
	if err != nil {
		return security{}, fmt.Errorf("--certs-dir: %w (secure daemons need the cluster CA to be verified; pass --insecure for a daemon run with --insecure)", err)
	}
	var certPEM, keyPEM []byte
	certPath, keyPath := clientFiles(f.certsDir, f.user)
	if c, err := os.ReadFile(certPath); err == nil {
		k, err := os.ReadFile(keyPath)
		if err != nil {
			return security{}, fmt.Errorf("client certificate %s without its key: %w", certPath, err)
		}
		certPEM, keyPEM = c, k
	} else if fs.Changed("user") {
		return security{}, fmt.Errorf("--user %s: %w", f.user, err)
	}
	tok := strings.TrimSpace(f.token)
	if f.tokenFile != "" {
		if tok != "" {
			return security{}, errors.New("--token and --token-file: give one")
		}
		if tok, err = readTokenFile(f.tokenFile); err != nil {
			return security{}, err
		}
	}
	if certPEM == nil && tok == "" {
		return security{}, fmt.Errorf("no credential: %s is missing and neither --token nor --token-file is set (create one with `ringlimit cert create-client %s`)", certPath, f.user)
	}
	cfg, err := pki.ClientTLS(caPEM, certPEM, keyPEM)
	if err != nil {
		return security{}, err
	}
	return security{tls: cfg, token: tok}, nil
}

// readTokenFile returns the first token of path: the first line that is not
// blank or a '#' comment, up to a comma.
func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		tok, _, _ := strings.Cut(line, ",")
		if tok = strings.TrimSpace(tok); tok != "" {
			return tok, nil
		}
	}
	return "", fmt.Errorf("--token-file %s: no token in it", path)
}

// dial returns a Checker for the gRPC Limiter at addr, presenting the bearer
// token (if any) with every call, and the function that closes it.
func (s security) dial(addr string) (target.Checker, func() error, error) {
	c, err := remote.Dial(addr, s.tls)
	if err != nil {
		return nil, nil, err
	}
	if s.token == "" {
		return c, c.Close, nil
	}
	return tokenChecker{c: c, authz: "Bearer " + s.token}, c.Close, nil
}

// tokenChecker adds "authorization: Bearer <token>" to every check's metadata.
type tokenChecker struct {
	c     *remote.Client
	authz string
}

func (t tokenChecker) Check(ctx context.Context, c node.Check) (node.Decision, error) {
	return t.c.Check(metadata.AppendToOutgoingContext(ctx, "authorization", t.authz), c)
}
