package membership

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// Admission states of a Member (node.StateAlive and friends have the same
// values).
const (
	StateAlive   = "alive"
	StateJoining = "joining"
	StateRefused = "refused"
)

// Member is one gossip member as a node sees it. Its fields are those of
// node.Member, in the same order, so that the node converts one into the
// other.
type Member struct {
	Name       string
	Addr       string // peer address, "host:port"
	GossipAddr string // memberlist address, "host:port"
	ID         string // instance id
	Self       bool
	State      string // StateAlive, StateJoining or StateRefused
	Reason     string
}

// Config is what a Table needs of its node. Every func must be set; all but
// Revoked are called without the Table's lock held.
type Config struct {
	// Self is this node's side of a Hello: its member name, cluster label,
	// protocol version and instance id.
	Self transport.Hello
	// Secure: peers authenticate with certificates naming their member; an
	// admitted member is then not moved by gossip alone (see doubt.go).
	Secure bool
	// AdmissionRetry is the wait before a refused member is tried again;
	// ProbeInterval the wait between probes of a doubted member (and before an
	// unreachable one is tried again, at most AdmissionRetry); Timeout bounds
	// one Hello; CloseTimeout is how long a departed member may still call
	// the Peer service (its handoff may be under way).
	AdmissionRetry, ProbeInterval, Timeout, CloseTimeout time.Duration
	Log                                                  *slog.Logger
	// Hello sends this node's Hello to the peer address addr and returns the
	// answer and the member its certificate names.
	Hello func(ctx context.Context, addr string) (transport.Hello, string, error)
	// Drop closes the pooled connection to addr.
	Drop func(addr string)
	// Revoked reports whether the deny list names member or the certificate
	// serial. It is called under the Table's lock: it must not call back into
	// the Table.
	Revoked func(member, serial string) bool
	// Refused counts a refusal of kind "member" or "gossip" (security metrics).
	Refused func(kind string)
	// WG tracks the handshake and probe goroutines, so that the node's Close
	// waits for them.
	WG *sync.WaitGroup
}

// Table holds the gossip members a node knows, copied in memberlist's
// callbacks, and the admission handshake state of each: who passed the
// Hello (and so is in the ring), who waits, who is refused and why, who is
// doubted (see doubt.go). Its methods are safe for concurrent use.
type Table struct {
	cfg Config
	sig chan struct{}
	// probeNow asks the membership loop to probe the doubted members at
	// once (Leaving), not at its next change or ProbeInterval.
	probeNow chan struct{}

	mu      sync.Mutex
	members map[string]Member     // live gossip members
	admit   map[string]*admission // handshake state per member (not this node)
	// certsSeen: member -> serial of the certificate it presented last;
	// departed: member -> when it left the gossip.
	certsSeen map[string]string
	departed  map[string]time.Time

	conflictMu   sync.Mutex
	conflict     string // a live member that uses our name, seen by gossip
	conflictPeer string // its peer address
}

// NewTable returns an empty Table for the node cfg describes.
func NewTable(cfg Config) *Table {
	return &Table{
		cfg:       cfg,
		sig:       make(chan struct{}, 1),
		probeNow:  make(chan struct{}, 1),
		members:   make(map[string]Member),
		admit:     make(map[string]*admission),
		certsSeen: make(map[string]string),
		departed:  make(map[string]time.Time),
	}
}

// Changed signals that the members changed: the membership loop (Run)
// rebuilds the ring.
func (t *Table) Changed() {
	select {
	case t.sig <- struct{}{}:
	default: // a rebuild is already pending; it will read the latest members
	}
}

// Run is the membership loop: it runs the pending handshakes every
// AdmissionRetry, the probes of doubted members every ProbeInterval and at
// once when Leaving asks, and on every change (after Settle) both and then
// rebuild, until stop is closed.
// While leaving reports true it does none of them.
func (t *Table) Run(stop <-chan struct{}, debounce time.Duration, leaving func() bool, rebuild func()) {
	retry := time.NewTicker(t.cfg.AdmissionRetry)
	defer retry.Stop()
	// Doubted members (doubt.go) are probed again every ProbeInterval.
	probe := time.NewTicker(t.cfg.ProbeInterval)
	defer probe.Stop()
	for {
		select {
		case <-stop:
			return
		case <-retry.C:
			if !leaving() {
				t.AdmitPending()
			}
		case <-t.probeNow:
			if !leaving() {
				t.probeDoubted()
			}
		case <-probe.C:
			if !leaving() {
				t.probeDoubted()
				t.AdmitPending() // the unreachable (retryUnreachable)
			}
		case <-t.sig:
			// The probes Leaving asks for run while the change settles.
			if !settle(debounce, t.sig, stop, t.probeNow, func() {
				if !leaving() {
					t.probeDoubted()
				}
			}) {
				return
			}
			if !leaving() {
				t.probeDoubted()
				t.AdmitPending()
				rebuild()
			}
		}
	}
}

// Settle waits until no change has been signalled on sig for d, or 10 × d
// have passed, so that a burst of changes is rebuilt once. False if stop is
// closed meanwhile; true at once when d <= 0.
func Settle(d time.Duration, sig chan struct{}, stop <-chan struct{}) bool {
	return settle(d, sig, stop, nil, nil)
}

// settle is Settle that calls serve each time also is signalled meanwhile
// (also nil: never).
func settle(d time.Duration, sig chan struct{}, stop <-chan struct{}, also <-chan struct{}, serve func()) bool {
	if d <= 0 {
		return true
	}
	quiet := time.NewTimer(d)
	defer quiet.Stop()
	limit := time.NewTimer(10 * d)
	defer limit.Stop()
	for {
		select {
		case <-stop:
			return false
		case <-quiet.C:
			return true
		case <-limit.C:
			return true
		case <-sig:
			quiet.Reset(d)
		case <-also:
			serve()
		}
	}
}

// removeLocked takes a member out of the members and admissions, and forgets
// the members that departed more than CloseTimeout ago; under t.mu.
func (t *Table) removeLocked(name string) {
	delete(t.members, name)
	if a := t.admit[name]; a != nil && a.state != StateRefused {
		// Its handoff may still arrive (see MayCall).
		t.departed[name] = time.Now()
	}
	delete(t.admit, name)
	for name, at := range t.departed {
		if time.Since(at) > t.cfg.CloseTimeout {
			delete(t.departed, name)
			if t.admit[name] == nil {
				delete(t.certsSeen, name)
			}
		}
	}
}

// List returns the live members as gossip sees them, sorted by name, each
// with its admission State: StateAlive members (and this node) are in the
// ring; StateJoining and StateRefused members (Reason says why) own no key.
// In secure mode an admitted member that gossip says left, died or moved is
// listed as admitted, with a Reason, while it answers its probes (see
// doubt.go); a claim of its name at another address is not listed
// meanwhile.
func (t *Table) List() []Member {
	t.mu.Lock()
	out := make([]Member, 0, len(t.members))
	for _, m := range t.members {
		m.State = StateAlive
		if a := t.admit[m.Name]; !m.Self {
			m.State = StateJoining
			if a != nil && a.id == m.ID && a.addr == m.Addr {
				m.State, m.Reason = a.state, a.reason
				if d := a.doubt; d != nil && a.state == StateAlive {
					m.Reason = "gossip says it left, died or moved; it answers its probes at this address"
				}
			}
		}
		out = append(out, m)
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// RingMembers is the member set the ring is built from: the live (or
// suspect) gossip members that passed the admission handshake, and this
// node unless leaving. peer reports that another member is among them.
func (t *Table) RingMembers(leaving bool) (out []ring.Member, peer bool) {
	for _, m := range t.List() {
		if m.Self && leaving || m.State != StateAlive {
			continue
		}
		peer = peer || !m.Self
		out = append(out, ring.Member{Name: m.Name, Addr: m.Addr, ID: m.ID})
	}
	return out, peer
}

// GossipAddrs returns the memberlist addresses of the live gossip members.
func (t *Table) GossipAddrs() map[string]bool {
	live := make(map[string]bool)
	t.mu.Lock()
	for _, m := range t.members {
		live[m.GossipAddr] = true
	}
	t.mu.Unlock()
	return live
}

// AddHandshakeAddrs adds to live the peer addresses of the members being
// admitted or refused: their handshakes run on the connections to them.
func (t *Table) AddHandshakeAddrs(live map[string]bool) {
	t.mu.Lock()
	for _, a := range t.admit {
		if a.state != StateAlive {
			live[a.addr] = true
		}
	}
	t.mu.Unlock()
}

// RefusedCount returns how many gossip members are refused.
func (t *Table) RefusedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := 0
	for _, a := range t.admit {
		if a.state == StateRefused {
			k++
		}
	}
	return k
}

// MemberAt returns the name of the gossip member whose peer address is addr,
// for the pool's certificate check (transport.ClientConfig.ExpectMember). The
// member admitted at addr wins over gossip's claims: a member that merely
// advertises another's address cannot make the connection to it fail. With
// no admitted member there and claims by several names, it returns false
// (any member certificate passes the dial; the Hello that follows checks the
// name).
func (t *Table) MemberAt(addr string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	name, found, many := "", false, false
	for _, m := range t.members {
		if m.Addr != addr {
			continue
		}
		if a := t.admit[m.Name]; m.Self || a != nil && a.state == StateAlive && a.addr == addr {
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

// MayCall reports whether the member name may call the Peer service beyond
// Hello: it is joining or admitted, or it left less than CloseTimeout ago
// (its handoff may still be under way).
func (t *Table) MayCall(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.admit[name]
	if a != nil && a.state != StateRefused {
		return true
	}
	left, ok := t.departed[name]
	return ok && time.Since(left) < t.cfg.CloseTimeout
}

// SawCert records that member presented a certificate with serial in a
// handshake this node made (see RefuseRevoked).
func (t *Table) SawCert(member, serial string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.certsSeen[member] = serial
}

// CertSeen returns the serial SawCert recorded last for member ("" if none).
func (t *Table) CertSeen(member string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.certsSeen[member]
}

// revokedSeenLocked reports whether member is denied by name or by the
// serial of the certificate it presented last; under t.mu.
func (t *Table) revokedSeenLocked(member string) bool {
	return t.cfg.Revoked(member, t.certsSeen[member])
}

// RefuseRevoked refuses the members not refused yet that the deny list
// (Config.Revoked) names, by name or by the serial of the certificate they
// presented last, and returns their peer addresses. The caller drops the
// connections to them and calls Changed when there are any.
func (t *Table) RefuseRevoked() (addrs []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, a := range t.admit {
		if a.state == StateRefused || !t.revokedSeenLocked(name) {
			continue
		}
		a.state, a.reason, a.last = StateRefused, "certificate revoked", time.Now()
		addrs = append(addrs, a.addr)
		t.cfg.Log.Warn("member refused: its certificate is revoked; it leaves the ring", "member", name, "addr", a.addr)
	}
	return addrs
}

// NameConflict returns the address of another live member that uses this
// node's name, "" if gossip saw none. When there is one, it also tells that
// member (a Hello it refuses and logs at WARN), so both sides say why.
//
// Gossip may also hold this node's previous instance: a member killed and
// started again under its name at a new address (a rescheduled pod) before
// the others found the old one dead. That is no conflict: when the other
// address does not answer the Hello, or answers as another member, or as
// this name but with a certificate that does not name it, NameConflict
// returns "" and the others admit this node once the old address fails
// their probe (see claimMoved).
func (t *Table) NameConflict() string {
	t.conflictMu.Lock()
	c, peer := t.conflict, t.conflictPeer
	t.conflictMu.Unlock()
	if c == "" || peer == "" {
		return c
	}
	self := t.cfg.Self.Member
	resp, cert, err := t.sayHello(peer)
	switch {
	case errors.Is(err, transport.ErrRefused):
		return c // a live process refused this node its own name
	case err == nil && resp.Member == self && (!t.cfg.Secure || cert == self):
		return c
	}
	why := "it does not answer"
	if err == nil {
		why = "another member answers there"
	}
	t.cfg.Log.Info("gossip still holds an earlier instance of this member at another address, but "+why+": taking the name over", "gossip", c, "err", err)
	return ""
}

// mismatch returns why the answer (resp, over a connection whose
// certificate names cert, or err) to a Hello sent to member name, instance
// id, does not prove that identity; "" when it does (see HelloMismatch).
func (t *Table) mismatch(name, id string, resp transport.Hello, cert string, err error) string {
	return HelloMismatch(t.cfg.Self.ClusterLabel, name, id, t.cfg.Secure, resp, cert, err)
}
