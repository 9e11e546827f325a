package cli

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ringlimit/ringlimit/transport/pki"
)

// File names in a certs directory, as CockroachDB names them: the daemon
// (--certs-dir) reads ca.crt, node.crt and node.key; the CLI reads ca.crt and
// client.<user>.crt / .key.
const (
	caCertFile    = "ca.crt"
	nodeCertFile  = "node.crt"
	nodeKeyFile   = "node.key"
	gossipKeyFile = "gossip.key"
	// tokenFile is the client token file create-token writes (ringlimitd
	// --client-token-file).
	tokenFile = "tokens"
)

// Default lifetimes of `ringlimit cert` (CockroachDB's: 10 years for the CA,
// 5 years for node and client certificates).
const (
	defaultCALifetime   = 10 * 365 * 24 * time.Hour
	defaultCertLifetime = 5 * 365 * 24 * time.Hour
)

// certFlags are the flags every cert subcommand shares.
type certFlags struct {
	certsDir  string
	caKey     string
	lifetime  time.Duration
	overwrite bool
}

// register declares the flags; lifetime 0 leaves out --ca-key and --lifetime
// (the gossip key is no certificate).
func (f *certFlags) register(fs *pflag.FlagSet, lifetime time.Duration) {
	fs.StringVar(&f.certsDir, "certs-dir", "certs", "directory of the certificates (created if missing)")
	if lifetime > 0 {
		fs.StringVar(&f.caKey, "ca-key", "", "path of the CA private key (required; keep it out of the certs directory the daemons mount)")
		fs.DurationVar(&f.lifetime, "lifetime", lifetime, "validity of the certificate")
	}
	fs.BoolVar(&f.overwrite, "overwrite", false, "replace existing files instead of refusing")
}

// write writes data to path: 0600 when private, 0644 otherwise. An existing
// file is an error naming it unless overwrite is set (then it is removed and
// written anew with the right mode).
func (f *certFlags) write(path string, data []byte, private bool) error {
	if f.overwrite {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("--overwrite: %w", err)
		}
	}
	if err := pki.WriteNewFile(path, data, private); err != nil {
		if errors.Is(err, pki.ErrExists) {
			return fmt.Errorf("%s exists: refusing to replace it (pass --overwrite to replace it)", path)
		}
		return err
	}
	return nil
}

// writePair writes a key (0600) and then its certificate (0644), unless err
// (from the Create function that made them) is not nil.
func (f *certFlags) writePair(certPath, keyPath string, certPEM, keyPEM []byte, err error) error {
	if err != nil {
		return err
	}
	if err := f.write(keyPath, keyPEM, true); err != nil {
		return err
	}
	return f.write(certPath, certPEM, false)
}

// checkFree refuses before anything is written when one of paths exists and
// --overwrite is not set, so that a command writes all of its files or none.
func (f *certFlags) checkFree(paths ...string) error {
	if f.overwrite {
		return nil
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s exists: refusing to replace it (pass --overwrite to replace it)", p)
		}
	}
	return nil
}

func (f *certFlags) prepare() error {
	if f.certsDir == "" {
		return errors.New("--certs-dir: empty")
	}
	if f.lifetime < 0 {
		return fmt.Errorf("--lifetime %v: must be > 0", f.lifetime)
	}
	return os.MkdirAll(f.certsDir, 0o755)
}

// readCA reads ca.crt from the certs directory and the CA key from --ca-key.
func (f *certFlags) readCA() (certPEM, keyPEM []byte, err error) {
	if f.caKey == "" {
		return nil, nil, errors.New("--ca-key: required (the CA private key made by `ringlimit cert create-ca`)")
	}
	certPEM, err = os.ReadFile(filepath.Join(f.certsDir, caCertFile))
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w (run `ringlimit cert create-ca` first, or copy ca.crt into --certs-dir)", err)
	}
	keyPEM, err = os.ReadFile(f.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("--ca-key: %w", err)
	}
	return certPEM, keyPEM, nil
}

func newCertCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Create the cluster CA, node and client certificates, and the gossip key",
		Long: `cert creates the security material of a secure cluster, as 'cockroach cert' does:
ECDSA P-256 keys (files 0600), X.509 certificates signed by the cluster CA (0644).

  ringlimit cert create-ca         --certs-dir certs --ca-key safe/ca.key
  ringlimit cert create-node NAME  --certs-dir certs --ca-key safe/ca.key --host 10.0.0.1,node-1.internal
  ringlimit cert create-client NAME --certs-dir certs --ca-key safe/ca.key
  ringlimit cert create-gossip-key --certs-dir certs
  ringlimit cert create-token NAME --certs-dir certs

A node certificate names its member (URI SAN ringlimit://member/NAME, equal to
ringlimitd's --node-name) and serves both the peer port and the client ports; a
client certificate (ringlimit://client/NAME) authenticates a caller of the
client ports and is refused on the peer port. ringlimitd --certs-dir reads
ca.crt, node.crt and node.key; the CLI's --certs-dir reads ca.crt and
client.<--user>.crt/.key. Existing files are never replaced unless --overwrite.`,
	}
	cmd.AddCommand(newCreateCACmd(), newCreateNodeCmd(), newCreateClientCmd(), newCreateGossipKeyCmd(), newCreateTokenCmd())
	return cmd
}

func newCreateCACmd() *cobra.Command {
	var f certFlags
	cmd := &cobra.Command{
		Use:   "create-ca",
		Short: "Create the cluster CA: <certs-dir>/ca.crt and the key at --ca-key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.caKey == "" {
				return errors.New("--ca-key: required (where to write the CA private key)")
			}
			if err := f.prepare(); err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(f.caKey), 0o700); err != nil {
				return err
			}
			certPath := filepath.Join(f.certsDir, caCertFile)
			if err := f.checkFree(certPath, f.caKey); err != nil {
				return err
			}
			certPEM, keyPEM, err := pki.CreateCA("ringlimit CA", f.lifetime)
			if err := f.writePair(certPath, f.caKey, certPEM, keyPEM, err); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s\n", certPath, f.caKey)
			return nil
		},
	}
	f.register(cmd.Flags(), defaultCALifetime)
	return cmd
}

func newCreateNodeCmd() *cobra.Command {
	var (
		f     certFlags
		hosts []string
	)
	cmd := &cobra.Command{
		Use:   "create-node NAME",
		Short: "Create node.crt and node.key for member NAME (its --node-name)",
		Long: `create-node writes <certs-dir>/node.crt and node.key for the member NAME, signed by
the CA (<certs-dir>/ca.crt and --ca-key). NAME must equal the daemon's
--node-name: peers admit a member only if its certificate names it. --host
lists the IP addresses and DNS names clients dial (for the client ports' TLS
host check).`,
		Example: `  ringlimit cert create-node ringlimit-1 --host ringlimit-1,localhost,127.0.0.1 --certs-dir certs/ringlimit-1 --ca-key safe/ca.key`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := pki.ValidateName(args[0]); err != nil {
				return fmt.Errorf("NAME: %w", err)
			}
			var hs []string
			for _, h := range hosts {
				if h = strings.TrimSpace(h); h != "" {
					hs = append(hs, h)
				}
			}
			if len(hs) == 0 {
				return errors.New("--host: at least one IP address or DNS name the clients dial")
			}
			if err := f.prepare(); err != nil {
				return err
			}
			caCert, caKey, err := f.readCA()
			if err != nil {
				return err
			}
			certPath, keyPath := filepath.Join(f.certsDir, nodeCertFile), filepath.Join(f.certsDir, nodeKeyFile)
			if err := f.checkFree(certPath, keyPath); err != nil {
				return err
			}
			certPEM, keyPEM, err := pki.CreateNode(caCert, caKey, args[0], hs, f.lifetime)
			if err := f.writePair(certPath, keyPath, certPEM, keyPEM, err); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s for member %s (hosts %s)\n", certPath, keyPath, args[0], strings.Join(hs, ","))
			return nil
		},
	}
	f.register(cmd.Flags(), defaultCertLifetime)
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "comma-separated IP addresses and DNS names of the node (required)")
	return cmd
}

func newCreateClientCmd() *cobra.Command {
	var f certFlags
	cmd := &cobra.Command{
		Use:   "create-client NAME",
		Short: "Create client.NAME.crt and client.NAME.key for a caller of the client ports",
		Example: `  ringlimit cert create-client root --certs-dir certs --ca-key safe/ca.key
  ringlimit check user:42 --addr 127.0.0.1:8081 --certs-dir certs --user root`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := pki.ValidateName(args[0]); err != nil {
				return fmt.Errorf("NAME: %w", err)
			}
			if err := f.prepare(); err != nil {
				return err
			}
			caCert, caKey, err := f.readCA()
			if err != nil {
				return err
			}
			certPath, keyPath := clientFiles(f.certsDir, args[0])
			if err := f.checkFree(certPath, keyPath); err != nil {
				return err
			}
			certPEM, keyPEM, err := pki.CreateClient(caCert, caKey, args[0], f.lifetime)
			if err := f.writePair(certPath, keyPath, certPEM, keyPEM, err); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s for client %s\n", certPath, keyPath, args[0])
			return nil
		},
	}
	f.register(cmd.Flags(), defaultCertLifetime)
	return cmd
}

func newCreateGossipKeyCmd() *cobra.Command {
	var f certFlags
	cmd := &cobra.Command{
		Use:   "create-gossip-key",
		Short: "Create gossip.key: 32 random bytes in base64 (ringlimitd --gossip-key-file)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.prepare(); err != nil {
				return err
			}
			path := filepath.Join(f.certsDir, gossipKeyFile)
			if err := f.checkFree(path); err != nil {
				return err
			}
			key := make([]byte, 32)
			if _, err := rand.Read(key); err != nil {
				return err
			}
			if err := f.write(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), true); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (AES-256 gossip key; every member needs the same file)\n", path)
			return nil
		},
	}
	f.register(cmd.Flags(), 0)
	return cmd
}

func newCreateTokenCmd() *cobra.Command {
	var f certFlags
	cmd := &cobra.Command{
		Use:   "create-token NAME",
		Short: "Add a client token (256 random bits) named NAME to the token file tokens (ringlimitd --client-token-file)",
		Long: `create-token adds a line "token,NAME" to <certs-dir>/tokens (0600, created if
missing; with --overwrite the file holds only the new token), the format
ringlimitd --client-token-file reads. The token is 43 characters of base64url
(256 random bits) and is never printed: give it to the caller from the file
(cut -d, -f1). NAME names the caller in logs; a NAME already in the file is
refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if name == "" || strings.ContainsAny(name, ",\n\r") || strings.TrimSpace(name) != name {
				return fmt.Errorf("token name %q: want a non-empty name without commas, newlines or surrounding spaces", name)
			}
			if err := f.prepare(); err != nil {
				return err
			}
			path := filepath.Join(f.certsDir, tokenFile)
			tok, err := pki.NewToken()
			if err != nil {
				return err
			}
			line := []byte(tok + "," + name + "\n")
			old, err := os.ReadFile(path)
			switch {
			case errors.Is(err, os.ErrNotExist) || (err == nil && f.overwrite):
				err = f.write(path, line, true)
			case err == nil:
				for l := range strings.SplitSeq(string(old), "\n") {
					if _, n, ok := strings.Cut(l, ","); ok && strings.TrimSpace(n) == name {
						return fmt.Errorf("%s already has a token named %q (pass --overwrite to start a new file)", path, name)
					}
				}
				err = appendPrivate(path, old, line)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote a token named %s to %s (256 random bits; the caller sends it as \"Authorization: Bearer <token>\" or AUTH <token>)\n", name, path)
			return nil
		},
	}
	f.register(cmd.Flags(), 0)
	return cmd
}

// appendPrivate appends line to the file at path, whose content is old,
// starting a new line if old does not end with one; the file must be private
// (no group or other access), as ringlimitd warns otherwise.
func appendPrivate(path string, old, line []byte) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is readable by others (mode %v): chmod 600 it first", path, st.Mode().Perm())
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if len(old) > 0 && old[len(old)-1] != '\n' {
		line = append([]byte("\n"), line...)
	}
	if _, err := fh.Write(line); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

// clientFiles returns the paths of client.<user>.crt and .key in dir.
func clientFiles(dir, user string) (certPath, keyPath string) {
	return filepath.Join(dir, "client."+user+".crt"), filepath.Join(dir, "client."+user+".key")
}
