package node

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ringlimit/ringlimit/transport/pki"
)

// The peer gate (secure mode only): who may call the Peer service, and the
// deny list of revoked peer certificates (Config.PeerDenyFile).
//
// A certificate signed by the cluster CA proves a name, not membership. Every
// Peer RPC but Hello (Forward, ForwardStream, Transfer, ReplicateStream) must
// come from a certificate naming a member this node's gossip knows and has
// not refused (joining or admitted), or one that left less than CloseTimeout
// ago (its handoff may still be under way); streams are checked again at
// every message, so a member refused or revoked meanwhile loses its open
// streams at their next message. A revoked certificate (by serial or by
// member name) is refused at the TLS handshake in both directions, and the
// member it names is refused admission and leaves the ring.

// denyList is a parsed PeerDenyFile.
type denyList struct {
	serials map[string]bool // big.Int.Text(16) of the serial
	members map[string]bool
}

// parseDenyList parses a PeerDenyFile: one entry per line, "serial:<hex>" (a
// certificate serial number, case and colons ignored, as openssl prints it)
// or "member:<name>"; blank lines and lines starting with # are ignored.
// Errors wrap ErrInvalidConfig and name the line.
func parseDenyList(name string, data []byte) (*denyList, error) {
	dl := &denyList{serials: map[string]bool{}, members: map[string]bool{}}
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
				return nil, fmt.Errorf("%w: %s:%d: serial %q is not a hexadecimal number", ErrInvalidConfig, name, line, v)
			}
			dl.serials[x.Text(16)] = true
		default:
			return nil, fmt.Errorf("%w: %s:%d: %q: want serial:<hex> or member:<name>", ErrInvalidConfig, name, line, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, name, err)
	}
	return dl, nil
}

// loadDenyList reads and parses Config.PeerDenyFile (a nil list when unset).
func (n *Node) loadDenyList() (*denyList, error) {
	if n.cfg.PeerDenyFile == "" {
		return &denyList{}, nil
	}
	data, err := os.ReadFile(n.cfg.PeerDenyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: PeerDenyFile: %w", ErrInvalidConfig, err)
	}
	return parseDenyList(n.cfg.PeerDenyFile, data)
}

// revoked reports whether the deny list names member or a certificate serial
// (big.Int.Text(16)).
func (n *Node) revoked(member, serial string) bool {
	dl := n.deny.Load()
	return dl != nil && (dl.members[member] || serial != "" && dl.serials[serial])
}

// ReloadPeerDenyList reads Config.PeerDenyFile again and applies it (the node
// also does so when the file changes): certificates it names are refused at
// the next handshake, at the next message of an open stream and at the next
// RPC, and the members they name are refused admission and leave the ring.
// On error (unreadable or invalid file, wrapping ErrInvalidConfig) the
// previous list stays. Without a PeerDenyFile it does nothing.
func (n *Node) ReloadPeerDenyList() error {
	if n.cfg.PeerDenyFile == "" {
		return nil
	}
	dl, err := n.loadDenyList()
	if err != nil {
		n.log.Error("peer deny list reload failed, keeping the previous list", "file", n.cfg.PeerDenyFile, "err", err)
		return err
	}
	n.applyDenyList(dl)
	return nil
}

// applyDenyList makes dl the deny list and refuses the admitted members it
// names (by name, or by a certificate serial seen for them), dropping the
// pooled connections to them.
func (n *Node) applyDenyList(dl *denyList) {
	n.deny.Store(dl)
	var drop []string
	n.membersMu.Lock()
	for name, a := range n.admit {
		if a.state == StateRefused || !n.revokedSeenLocked(name) {
			continue
		}
		a.state, a.reason, a.last = StateRefused, "certificate revoked", time.Now()
		drop = append(drop, a.addr)
		n.log.Warn("member refused: its certificate is revoked; it leaves the ring", "member", name, "addr", a.addr)
	}
	n.membersMu.Unlock()
	for _, addr := range drop {
		n.refused("member")
		n.peers.Drop(addr)
	}
	n.log.Info("peer deny list loaded", "file", n.cfg.PeerDenyFile, "serials", len(dl.serials), "members", len(dl.members), "refused", len(drop))
	if len(drop) > 0 {
		n.signalMembers()
	}
}

// revokedSeenLocked reports whether member is denied by name or by the
// serial of the certificate it presented last; under membersMu.
func (n *Node) revokedSeenLocked(member string) bool {
	return n.revoked(member, n.certsSeen[member])
}

// sawCert records that member presented a certificate with serial in a
// handshake this node made: the certificate it runs with now (a member that
// restarts with a new one is dialled again), so that a deny list naming that
// serial refuses the member, and one naming its previous certificate does not.
func (n *Node) sawCert(member, serial string) {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	n.certsSeen[member] = serial
}

// gateTLS wraps the server and client TLS configurations' VerifyConnection
// so that a revoked peer certificate fails the handshake either way. The
// client side also records the serial of the certificate each member
// presents (sawCert): this node dials a member at the address gossip gives
// for it, so what it records is the certificate that member runs with, not
// one that someone else presents under its name (that one is refused by
// serial without refusing the member).
func (n *Node) gateTLS(server, client *tls.Config) {
	wrap := func(c *tls.Config, record bool) {
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
			serial := cert.SerialNumber.Text(16)
			if n.revoked(name, serial) {
				n.refused("revoked")
				return fmt.Errorf("node: peer certificate %s (member %q) is revoked", serial, name)
			}
			if record && name != "" {
				n.sawCert(name, serial)
			}
			return nil
		}
	}
	wrap(server, false)
	wrap(client, true)
}

// errPeerRefused is wrapped by the refusals of the peer gate (peerAllowed).
var errPeerRefused = errors.New("node: peer refused")

// peerAllowed is the peer server's transport.PeerGate: nil if the caller
// whose verified certificate is cert may call the Peer service beyond Hello
// (see the gate above), else an error wrapping errPeerRefused naming why.
func (n *Node) peerAllowed(cert *x509.Certificate) error {
	if cert == nil {
		return fmt.Errorf("%w: no peer certificate", errPeerRefused)
	}
	name, ok := pki.MemberName(cert)
	if !ok {
		return fmt.Errorf("%w: the certificate names no member", errPeerRefused)
	}
	if n.revoked(name, cert.SerialNumber.Text(16)) {
		n.refused("revoked")
		return fmt.Errorf("%w: the certificate of member %q is revoked", errPeerRefused, name)
	}
	n.membersMu.Lock()
	a := n.admit[name]
	member := a != nil && a.state != StateRefused
	if !member {
		left, ok := n.departed[name]
		member = ok && time.Since(left) < n.cfg.CloseTimeout
	}
	n.membersMu.Unlock()
	if !member {
		n.refused("not-member")
		return fmt.Errorf("%w: %q is not an admitted member", errPeerRefused, name)
	}
	return nil
}

// watchDenyList reloads Config.PeerDenyFile when it changes (its directory is
// watched, so editors that rename a new file over it and Kubernetes' symlink
// swaps are seen), 100 ms after the last event, until the node stops.
func (n *Node) watchDenyList() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("node: PeerDenyFile watch: %w", err)
	}
	if err := w.Add(filepath.Dir(n.cfg.PeerDenyFile)); err != nil {
		w.Close()
		return fmt.Errorf("node: PeerDenyFile watch %s: %w", filepath.Dir(n.cfg.PeerDenyFile), err)
	}
	base := filepath.Base(n.cfg.PeerDenyFile)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer w.Close()
		const debounce = 100 * time.Millisecond
		t := time.NewTimer(time.Hour)
		t.Stop()
		for {
			select {
			case <-n.stop:
				t.Stop()
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if name := filepath.Base(ev.Name); name == base || strings.HasPrefix(name, "..") {
					t.Reset(debounce)
				}
			case <-t.C:
				_ = n.ReloadPeerDenyList() // logged
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				n.log.Warn("peer deny list watch; reloading", "err", err)
				t.Reset(debounce) // events may have been lost
			}
		}
	}()
	return nil
}
