// Package peergate is the deny list of revoked peer certificates
// (node.Config.PeerDenyFile) and the TLS hook that refuses them at the
// handshake. It knows certificates, serials and member names, not the node:
// who is a member, and what a revoked member loses, are the node's.
//
// Data flow: the node parses the file at New (Load) and again when it
// changes, swaps the new *DenyList in atomically, and asks Revoked at every
// handshake (through Gate) and every Peer RPC.
package peergate

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"math/big"
	"os"
	"strings"

	"github.com/ringlimit/ringlimit/transport/pki"
)

// DenyList is a parsed PeerDenyFile. The zero value and nil deny nothing.
// It is never changed after Parse, so it may be read concurrently.
type DenyList struct {
	serials map[string]bool // big.Int.Text(16) of the serial
	members map[string]bool
}

// Parse parses a PeerDenyFile called name: one entry per line,
// "serial:<hex>" (a certificate serial number, case and colons ignored, as
// openssl prints it) or "member:<name>"; blank lines and lines starting with
// # are ignored. Errors name the file and line ("name:3: ...").
func Parse(name string, data []byte) (*DenyList, error) {
	dl := &DenyList{serials: map[string]bool{}, members: map[string]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		kind, v, ok := strings.Cut(s, ":")
		v = strings.TrimSpace(v)
		switch {
		case ok && kind == "member" && v != "":
			dl.members[v] = true
		case ok && kind == "serial" && v != "":
			var x big.Int
			if _, good := x.SetString(strings.ReplaceAll(strings.TrimPrefix(strings.ToLower(v), "0x"), ":", ""), 16); !good || x.Sign() < 0 {
				return nil, fmt.Errorf("%s:%d: serial %q is not a hexadecimal number", name, line, v)
			}
			dl.serials[x.Text(16)] = true
		default:
			return nil, fmt.Errorf("%s:%d: %q: want serial:<hex> or member:<name>", name, line, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return dl, nil
}

// Load reads and parses the file (an empty list when file is ""). Errors
// are the file system's or Parse's.
func Load(file string) (*DenyList, error) {
	if file == "" {
		return &DenyList{}, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return Parse(file, data)
}

// Revoked reports whether the list names member or the certificate serial
// (big.Int.Text(16); "" names none).
func (dl *DenyList) Revoked(member, serial string) bool {
	return dl != nil && (dl.members[member] || serial != "" && dl.serials[serial])
}

// Len returns the number of serials and of members the list names.
func (dl *DenyList) Len() (serials, members int) {
	if dl == nil {
		return 0, 0
	}
	return len(dl.serials), len(dl.members)
}

// Gate wraps c.VerifyConnection (kept and run first) so that every
// handshake with a peer certificate also calls check with the member the
// certificate names ("" if none) and its serial (big.Int.Text(16)); an error
// from check fails the handshake.
func Gate(c *tls.Config, check func(member, serial string) error) {
	orig := c.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if orig != nil {
			if err := orig(cs); err != nil {
				return err
			}
		}
		if len(cs.PeerCertificates) == 0 {
			return nil
		}
		cert := cs.PeerCertificates[0]
		name, _ := pki.MemberName(cert)
		return check(name, cert.SerialNumber.Text(16))
	}
}
