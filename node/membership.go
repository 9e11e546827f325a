package node

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ringlimit/ringlimit/node/internal/handoff"
	"github.com/ringlimit/ringlimit/node/internal/membership"
	"github.com/ringlimit/ringlimit/node/internal/ringview"
	"github.com/ringlimit/ringlimit/ring"
)

// ringState is one published view of the cluster (see ringview.View).
type ringState = ringview.View

// advertiseHost picks the IP peers use to reach this node (see
// membership.AdvertiseHost).
func advertiseHost(cfg Config) (string, error) {
	host, err := membership.AdvertiseHost(cfg.AdvertiseAddr, cfg.BindAddr)
	if err != nil {
		return "", fmt.Errorf("%w: AdvertiseAddr: %w", ErrInvalidConfig, err)
	}
	return host, nil
}

func (n *Node) startGossip(host string) error {
	mc := membership.Gossip{
		Name: n.cfg.Name, BindAddr: n.cfg.BindAddr, AdvertiseAddr: host, Port: n.cfg.GossipPort,
		Label: n.cfg.ClusterLabel, SecretKey: n.cfg.SecretKey, Timings: membership.Timings(n.cfg.Gossip),
	}.Config(membership.Delegate{T: n.mem, Meta: membership.EncodeMeta(n.grpcAddr, n.id)}, n.log)
	if n.cfg.cutNet != nil {
		if err := n.cfg.cutNet.gossip(n, mc); err != nil {
			return fmt.Errorf("node: gossip: %w", err)
		}
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("node: gossip: %w", err)
	}
	n.ml = ml
	if len(n.cfg.Join) > 0 {
		if k, err := n.joinSeeds(); err != nil {
			n.log.Warn("join failed; running alone until a seed answers", "seeds", n.cfg.Join, "err", err)
		} else {
			n.log.Info("joined", "contacted", k)
		}
	}
	return nil
}

// cutNet lets node's own tests cut the network between members in process
// (Config.cutNet): gossip sets mc's gossip transport for node n (its peer
// address is known), and dial is the dialer of n's gRPC peer connections.
type cutNet interface {
	gossip(n *Node, mc *memberlist.Config) error
	dial(n *Node) func(ctx context.Context, addr string) (net.Conn, error)
}

// Members returns the live members of the cluster as this node's gossip sees them,
// sorted by name, each with its admission State: StateAlive members (and this
// node) are in the ring; StateJoining and StateRefused members (Reason says
// why) own no key. In secure mode an admitted member that gossip says left,
// died or moved is listed as admitted, with a Reason, while it answers its
// probes (see "Membership and admission" in docs/architecture.md); a claim
// of its name at another address is not listed meanwhile.
func (n *Node) Members() []Member {
	l := n.mem.List()
	out := make([]Member, len(l))
	for i := range l {
		out[i] = Member(l[i])
	}
	return out
}

// ringMembers is the member set the ring is built from (see
// membership.Table.RingMembers).
func (n *Node) ringMembers() []ring.Member {
	out, peer := n.mem.RingMembers(n.leaving.Load())
	if peer {
		n.joinedPeer.Store(true)
	}
	return out
}

// membershipLoop runs the handshakes, the probes and the rebuilds (see
// membership.Table.Run) until the node stops.
func (n *Node) membershipLoop() {
	defer n.wg.Done()
	n.mem.Run(n.stop, n.cfg.MembershipDebounce, n.leaving.Load, n.rebuild)
}

func (n *Node) rejoinLoop() {
	defer n.wg.Done()
	if len(n.cfg.Join) == 0 || n.cfg.RejoinInterval == 0 {
		return
	}
	membership.Every(n.stop, n.cfg.RejoinInterval, func() bool {
		if n.leaving.Load() {
			return false
		}
		// Join is a push/pull with each seed: cheap, and it is what merges two
		// halves of a healed partition (memberlist alone would not).
		if _, err := n.joinSeeds(); err != nil {
			n.log.Debug("rejoin", "err", err)
		}
		return true
	})
}

// idleLoop drops idle keys from the owner and fallback stores every
// IdleScanInterval.
func (n *Node) idleLoop() {
	defer n.wg.Done()
	membership.Every(n.stop, n.cfg.IdleScanInterval, func() bool {
		wall := n.clock()
		n.owned.DropIdle(wall)
		n.fallback.DropIdle(wall)
		n.sweepHolds(wall)
		return true
	})
}

// rebuild recomputes the ring from the gossip members, publishes it, gates the
// partitions gained from live members until their handoff arrives, and hands off
// the states of keys this node no longer owns. It runs on the membership loop (or
// on Close), never inside a memberlist callback.
func (n *Node) rebuild() {
	n.rebuildMu.Lock()
	defer n.rebuildMu.Unlock()
	t0 := time.Now()
	members := n.ringMembers()
	old := n.rs.Load()
	if err := n.ring.SetMembers(members); err != nil {
		n.log.Error("ring rebuild failed; keeping the previous ring", "err", err)
		return
	}
	snap := n.ring.Snapshot()
	leaving := n.leaving.Load()
	// Members of the new ring also in the old one under another instance id:
	// processes restarted under the same name.
	restarted := membership.Restarted(old.Snap.Members(), snap.Members(), func(m ring.Member) (string, string) { return m.Name, m.ID })
	for name := range restarted {
		n.breakers.Reset(name) // a new process: give it a chance at once
	}
	if snap == old.Snap || (snap.Equal(old.Snap) && leaving == old.Leaving) {
		if snap != old.Snap { // same table, new addresses or instance ids
			ns := &ringState{Snap: snap, Leaving: leaving, Gates: old.Gates, Pending: old.Pending, Deadline: old.Deadline, Backups: n.computeBackups(snap)}
			n.publish(ns, old)
			n.dropGonePeers(old.Snap, snap)
			if len(restarted) > 0 && !leaving {
				// A member restarted under its name before its crash was detected:
				// the table is the same, but the new process holds nothing. Its
				// backups hand it their replicas (and the end-of-handoff marker
				// it waits for), and its keys' states go to its backups again.
				n.log.Info("member restarted", "members", restarted)
				c := n.changeFrom(old, ns, restarted)
				n.resync(c)
				n.handoff(ns, c)
			}
		}
		return
	}
	self := n.cfg.Name

	// The previous owner of each partition: the old ring's, or on the first build
	// after joining, the ring the others had without us.
	prev := old.Snap
	if prev.Len() == 0 {
		if others := without(members, self); len(others) > 0 {
			if r, err := ring.SnapshotOf(n.cfg.Ring, others); err == nil {
				prev = r
			}
		}
	}

	ns := &ringState{Snap: snap, Leaving: leaving, Backups: n.computeBackups(snap)}
	n.countRebuild(t0)
	if leaving {
		prev = nil // a leaving node owns nothing: no gates
	}
	// The gates still closed in the ring before are carried over while a
	// check could still be waiting on them (handoff.Hellos.Wait's longest).
	var carry handoff.Gated
	if old.Pending != nil && time.Now().Before(old.Deadline.Add(n.cfg.ForwardTimeout)) {
		carry = handoff.Gated{Gates: old.Gates, Pending: old.Pending}
	}
	n.marks.Publish(prev, snap, self, n.cfg.HandoffTimeout, carry, func(g handoff.Gated) {
		ns.Gates, ns.Pending = g.Gates, g.Pending
		ns.Deadline = time.Now().Add(n.cfg.HandoffTimeout)
		n.publish(ns, old)
	})
	n.log.Info("ring changed", "members", snap.Len(), "version", snap.Version(), "digest", snap.Digest(), "waiting_for", len(ns.Pending))

	n.dropGonePeers(old.Snap, snap)
	for _, m := range old.Snap.Members() {
		if !snap.Has(m.Name) {
			n.breakers.Reset(m.Name)
		}
	}
	c := n.changeFrom(old, ns, restarted)
	n.resync(c)
	n.handoff(ns, c)
}

// countRebuild adds a rebuild begun at t0 to Stats.
func (n *Node) countRebuild(t0 time.Time) {
	n.rebuilds.Add(1)
	n.rebuildNs.Add(int64(time.Since(t0)))
}

// dropGonePeers closes the connections to gRPC addresses that the new ring no
// longer has: members that left, and old addresses of members that restarted
// under the same name on another port. An address a member being admitted
// uses is kept: its handshake runs on that connection.
func (n *Node) dropGonePeers(old, cur *ring.Snapshot) {
	live := make(map[string]bool, cur.Len())
	for _, m := range cur.Members() {
		live[m.Addr] = true
	}
	n.mem.AddHandshakeAddrs(live)
	for _, m := range old.Members() {
		if !live[m.Addr] {
			n.peers.Drop(m.Addr)
		}
	}
}

func without(ms []ring.Member, name string) []ring.Member {
	var out []ring.Member
	for _, m := range ms {
		if m.Name != name {
			out = append(out, m)
		}
	}
	return out
}

func (n *Node) publish(ns, old *ringState) {
	ns.SetMine(n.cfg.Name)
	n.owned.Live.Store(ns.Backups != nil) // before resync lists the owned keys
	ns.Next = make(chan struct{})
	n.rs.Store(ns)
	close(old.Next)
}
