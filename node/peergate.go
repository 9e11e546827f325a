package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/ringlimit/ringlimit/node/internal/peergate"
	"github.com/ringlimit/ringlimit/transport/pki"
	"github.com/ringlimit/ringlimit/transport/rotate"
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

// loadDenyList reads and parses Config.PeerDenyFile (an empty list when
// unset); errors wrap ErrInvalidConfig and name the file and line.
func (n *Node) loadDenyList() (*peergate.DenyList, error) {
	dl, err := peergate.Load(n.cfg.PeerDenyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: PeerDenyFile: %w", ErrInvalidConfig, err)
	}
	return dl, nil
}

// revoked reports whether the deny list names member or a certificate serial
// (big.Int.Text(16)).
func (n *Node) revoked(member, serial string) bool {
	return n.deny.Load().Revoked(member, serial)
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
func (n *Node) applyDenyList(dl *peergate.DenyList) {
	n.deny.Store(dl)
	drop := n.mem.RefuseRevoked()
	for _, addr := range drop {
		n.refused("member")
		n.peers.Drop(addr)
	}
	serials, members := dl.Len()
	n.log.Info("peer deny list loaded", "file", n.cfg.PeerDenyFile, "serials", serials, "members", members, "refused", len(drop))
	if len(drop) > 0 {
		n.mem.Changed()
	}
}

// gateTLS wraps the server and client TLS configurations' VerifyConnection
// so that a revoked peer certificate fails the handshake either way. The
// client side also records the serial of the certificate each member
// presents (membership.Table.SawCert): this node dials a member at the
// address gossip gives for it, so what it records is the certificate that
// member runs with now (a member that restarts with a new one is dialled
// again), not one that someone else presents under its name (that one is
// refused by serial without refusing the member). A deny list naming that
// serial then refuses the member; one naming its previous certificate does
// not.
func (n *Node) gateTLS(server, client *tls.Config) {
	gate := func(record bool) func(name, serial string) error {
		return func(name, serial string) error {
			if n.revoked(name, serial) {
				n.refused("revoked")
				return fmt.Errorf("node: peer certificate %s (member %q) is revoked", serial, name)
			}
			if record && name != "" {
				n.mem.SawCert(name, serial)
			}
			return nil
		}
	}
	peergate.Gate(server, gate(false))
	peergate.Gate(client, gate(true))
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
	if !n.mem.MayCall(name) {
		n.refused("not-member")
		return fmt.Errorf("%w: %q is not an admitted member", errPeerRefused, name)
	}
	return nil
}

// watchDenyList reloads Config.PeerDenyFile when it changes (its directory is
// watched, so editors that rename a new file over it and Kubernetes' symlink
// swaps are seen), rotate.Debounce after the last event, until the node
// stops.
func (n *Node) watchDenyList() error {
	if err := rotate.Watch([]string{n.cfg.PeerDenyFile}, n.stop, n.log.With("component", "peer-deny-list"), func() {
		_ = n.ReloadPeerDenyList() // logged
	}); err != nil {
		return fmt.Errorf("node: PeerDenyFile watch: %w", err)
	}
	return nil
}
