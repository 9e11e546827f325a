// The admission handshake and the doubt of gossip (see node/internal/membership):
// the node's side of the membership table, and its answer to a peer's Hello.

package node

import (
	"context"
	"fmt"

	"github.com/ringlimit/ringlimit/node/internal/membership"
	"github.com/ringlimit/ringlimit/transport"
)

// newMembers returns the node's membership table: the gossip members, their
// handshakes (Hello over the peer pool) and, in secure mode, the doubt of
// gossip that contradicts an admitted member.
func (n *Node) newMembers() *membership.Table {
	return membership.NewTable(membership.Config{
		Self:           n.helloOf(),
		Secure:         n.secure,
		AdmissionRetry: n.cfg.AdmissionRetry,
		ProbeInterval:  n.cfg.Gossip.ProbeInterval,
		Timeout:        n.cfg.ForwardTimeout,
		CloseTimeout:   n.cfg.CloseTimeout,
		Log:            n.log,
		Hello: func(ctx context.Context, addr string) (transport.Hello, string, error) {
			return n.peers.Hello(ctx, addr, n.helloOf())
		},
		Drop:    func(addr string) { n.peers.Drop(addr) },
		Revoked: n.revoked,
		Refused: n.refused,
		WG:      &n.wg,
	})
}

// helloOf is this node's side of a Hello.
func (n *Node) helloOf() transport.Hello {
	return transport.Hello{ClusterLabel: n.cfg.ClusterLabel, Member: n.cfg.Name, ProtocolVersion: transport.ProtocolVersion, InstanceID: n.id}
}

// Hello answers a member's admission handshake (or its probe, see
// node/internal/membership) with this node's identity, or refuses it
// (transport.ErrRefused) when its cluster label or protocol version differ,
// when in secure mode its certificate does not name the member it claims to
// be, or when it claims this node's own name. A node that is leaving (Close)
// answers transport.ErrUnavailable: its probe fails, so the members that
// gossip told of its leave drop it at once.
func (p peerService) Hello(_ context.Context, h transport.Hello, certMember string) (transport.Hello, error) {
	n := p.n
	if n.leaving.Load() {
		return transport.Hello{}, fmt.Errorf("%w: member %q is leaving", transport.ErrUnavailable, n.cfg.Name)
	}
	self := n.helloOf()
	reason, clash := membership.HelloRefusal(self, n.secure, h, certMember)
	if clash {
		n.log.Warn("another process claims this node's member name", "member", h.Member, "their_instance", h.InstanceID)
	}
	if reason != "" {
		return transport.Hello{}, fmt.Errorf("%w: %s", transport.ErrRefused, reason)
	}
	n.hellos.Note(h.Member, h.InstanceID)
	return self, nil
}
