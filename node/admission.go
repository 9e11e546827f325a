package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit/node/internal/membership"
	"github.com/ringlimit/ringlimit/transport"
)

// admission is the handshake state of one gossip member (not this node), kept
// under membersMu. It is for one instance at one address: a member that
// restarts (new instance id) or moves starts over as joining.
type admission struct {
	id, addr string
	state    string // StateJoining, StateAlive or StateRefused
	reason   string
	inflight bool
	last     time.Time // end of the last attempt
	// redial: a new instance at the address of the one it replaces (a
	// restart on the same port). The pooled connection to that address
	// failed with the old process and may sit in reconnect backoff, so it is
	// dropped before the handshake, and checks reach the new process at once.
	redial bool
	// unreachable: the last attempt failed to reach the member (its address
	// did not answer), as opposed to a refusal. It is tried again every
	// Gossip.ProbeInterval on a new connection, and at once when gossip
	// says the member is alive again (a healed partition), not after
	// AdmissionRetry: the pooled connection of the failed attempt may sit in
	// reconnect backoff for seconds.
	unreachable bool
	// doubt is set while gossip contradicts this admitted identity (see
	// doubt.go); probing while a probe of it runs.
	doubt   *doubt
	probing bool
	// proved is when the admitted identity last answered its Hello or a
	// probe; overruled is the last claim (id@addr) rejected as a conflict
	// whose probe passed (see claimMoved).
	proved    time.Time
	overruled string
}

// admitPending starts a handshake with every member that needs one: joining
// members, refused members whose last attempt is AdmissionRetry old, and
// unreachable ones whose last attempt is retryUnreachable old. It runs on the
// membership loop.
func (n *Node) admitPending() {
	now := time.Now()
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	for name, a := range n.admit {
		wait := n.cfg.AdmissionRetry
		if a.unreachable {
			wait = n.retryUnreachable()
		}
		if a.inflight || a.state == StateAlive || (a.state == StateRefused && now.Sub(a.last) < wait) {
			continue
		}
		a.inflight = true
		n.wg.Add(1)
		go n.hello(name, a.id, a.addr, a.redial)
	}
}

// admitNow runs the handshakes with the members the seeds told of and waits
// for them (bounded by ForwardTimeout), so that New builds its first ring with
// the admitted members: the ring change that adds this node then gates the
// partitions it gains from them until their handoffs arrive.
func (n *Node) admitNow() {
	n.admitPending()
	deadline := time.Now().Add(n.cfg.ForwardTimeout)
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for time.Now().Before(deadline) {
		n.membersMu.Lock()
		busy := false
		for _, a := range n.admit {
			busy = busy || a.inflight
		}
		n.membersMu.Unlock()
		if !busy {
			return
		}
		<-t.C
	}
}

// hello runs the admission handshake with one member and records the outcome:
// the member enters the ring only when its answer has this node's cluster
// label and protocol version, its own name and instance id, and (in secure
// mode) comes over a connection whose certificate names it.
func (n *Node) hello(name, id, addr string, redial bool) {
	defer n.wg.Done()
	if redial {
		n.peers.Drop(addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ForwardTimeout)
	resp, cert, err := n.peers.Hello(ctx, addr, n.helloOf())
	cancel()
	reason := n.helloMismatch(name, id, resp, cert, err)
	n.membersMu.Lock()
	if reason == "" && n.secure && n.revokedSeenLocked(name) {
		reason = "certificate revoked"
	}
	a := n.admit[name]
	if a == nil || a.id != id || a.addr != addr {
		n.membersMu.Unlock() // gone or restarted meanwhile: its new entry has its own attempt
		return
	}
	a.inflight, a.last = false, time.Now()
	a.unreachable = err != nil && !errors.Is(err, transport.ErrRefused)
	a.redial = a.unreachable // a new connection for the next attempt
	newRefusal := reason != "" && (a.state != StateRefused || a.reason != reason)
	if reason == "" {
		a.state, a.reason, a.proved = StateAlive, "", a.last
	} else {
		a.state, a.reason = StateRefused, reason
	}
	n.membersMu.Unlock()
	switch {
	case reason == "":
		n.log.Info("member admitted", "member", name, "addr", addr)
		n.signalMembers()
	case newRefusal:
		n.refused("member")
		n.log.Warn("member refused: it stays out of the ring", "member", name, "addr", addr, "reason", reason)
	}
}

// retryUnreachable is how long after a failed attempt an unreachable member
// is tried again: Gossip.ProbeInterval, at most AdmissionRetry.
func (n *Node) retryUnreachable() time.Duration {
	return min(n.cfg.AdmissionRetry, n.cfg.Gossip.ProbeInterval)
}

// Hello answers a member's admission handshake (or its probe, see doubt.go)
// with this node's identity, or refuses it (transport.ErrRefused) when its
// cluster label or protocol version differ, when in secure mode its
// certificate does not name the member it claims to be, or when it claims
// this node's own name. A node that is leaving (Close) answers
// transport.ErrUnavailable: its probe fails, so the members that gossip told
// of its leave drop it at once.
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
	n.hellos.note(h.Member, h.InstanceID)
	return self, nil
}

// memberAt returns the name of the gossip member whose peer address is addr,
// for the pool's certificate check (transport.ClientConfig.ExpectMember). The
// member admitted at addr wins over gossip's claims: a member that merely
// advertises another's address cannot make the connection to it fail. With
// no admitted member there and claims by several names, it returns false
// (any member certificate passes the dial; the Hello that follows checks the
// name).
func (n *Node) memberAt(addr string) (string, bool) {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	name, found, many := "", false, false
	for _, m := range n.members {
		if m.Addr != addr {
			continue
		}
		if a := n.admit[m.Name]; m.Self || a != nil && a.state == StateAlive && a.addr == addr {
			return m.Name, true
		}
		many = many || found
		name, found = m.Name, true
	}
	if many {
		return "", false
	}
	return name, found
}

// refusedCount returns how many gossip members are refused.
func (n *Node) refusedCount() int {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	k := 0
	for _, a := range n.admit {
		if a.state == StateRefused {
			k++
		}
	}
	return k
}

// NotifyConflict implements memberlist.ConflictDelegate: two live members
// claim one name. On the newcomer (the name is ours) it records the other's
// address for New to report; everywhere it logs a WARN.
func (d delegate) NotifyConflict(existing, other *memberlist.Node) {
	n := d.n
	theirs := net.JoinHostPort(other.Addr.String(), strconv.Itoa(int(other.Port)))
	peerAddr, _, _ := membership.DecodeMeta(other.Meta)
	if existing.Name != n.cfg.Name {
		if addr, id, ok := membership.DecodeMeta(other.Meta); ok {
			n.claimMoved(Member{Name: other.Name, Addr: addr, ID: id, GossipAddr: theirs})
		}
	}
	if existing.Name == n.cfg.Name {
		n.conflictMu.Lock()
		if n.conflict == "" {
			n.conflict = fmt.Sprintf("gossip %s, peer %s", theirs, peerAddr)
			n.conflictPeer = peerAddr
		}
		n.conflictMu.Unlock()
	}
	n.log.Warn("two live members claim one member name", "member", existing.Name,
		"known_at", net.JoinHostPort(existing.Addr.String(), strconv.Itoa(int(existing.Port))), "other_at", theirs)
}

// nameConflict returns the address of another live member that uses this
// node's name, "" if gossip saw none. When there is one, it also tells that
// member (a Hello it refuses and logs at WARN), so both sides say why.
//
// Gossip may also hold this node's previous instance: a member killed and
// started again under its name at a new address (a rescheduled pod) before
// the others found the old one dead. That is no conflict: when the other
// address does not answer the Hello, or answers as another member, or as
// this name but with a certificate that does not name it, nameConflict
// returns "" and the others admit this node once the old address fails
// their probe (see claimMoved).
func (n *Node) nameConflict() string {
	n.conflictMu.Lock()
	c, peer := n.conflict, n.conflictPeer
	n.conflictMu.Unlock()
	if c == "" || peer == "" {
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ForwardTimeout)
	resp, cert, err := n.peers.Hello(ctx, peer, n.helloOf())
	cancel()
	switch {
	case errors.Is(err, transport.ErrRefused):
		return c // a live process refused this node its own name
	case err == nil && resp.Member == n.cfg.Name && (!n.secure || cert == n.cfg.Name):
		return c
	}
	why := "it does not answer"
	if err == nil {
		why = "another member answers there"
	}
	n.log.Info("gossip still holds an earlier instance of this member at another address, but "+why+": taking the name over", "gossip", c, "err", err)
	return ""
}
