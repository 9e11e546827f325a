// Package memnet is an in-memory network for the Peer service of ringlimit
// nodes in one process: a forward, key operation, handoff, replication send
// or admission handshake calls the serving member's handler directly, with
// the per-item codes and the errors (wrapping transport.ErrUnavailable) of
// the gRPC transport. A test can cut a link, which makes a member
// unreachable from one other member while gossip still sees it alive (a
// one-way partition of the data path), send a link's calls to another
// member (a member whose address was taken over), make a member answer a
// replication send as a backup answers what it cannot place, and count the
// calls each link delivered.
//
// It speaks transport's types only, so that node's own tests can use it; a
// node is attached to it by node's test-only configuration, which passes the
// node's peer handler as a Member.
//
// Links are named by the calling member's name and the address dialled
// (Member.Addr of the callee), as the gRPC pool dials them. Every method is
// safe for concurrent use.
package memnet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/transport"
)

// Handler is what a member serves: the Peer service of transport with all
// of its optional parts.
type Handler interface {
	transport.PeerHandler
	transport.ReplicaHandler
	transport.HelloHandler
	transport.KeyOpHandler
}

// Member is one member on the network.
type Member struct {
	// Name is the member's name: the name its calls are made under (as its
	// certificate would name it) and the link's first half.
	Name string
	// Addr is the address it serves at (its gRPC peer address).
	Addr string
	// Handler serves the calls that reach Addr.
	Handler Handler
	// Stopped is closed when the member stops: calls to it then fail as a
	// refused connection would. Nil: never.
	Stopped <-chan struct{}
	// MaxKeyLen bounds the keys of the checks it forwards, as the gRPC
	// client's validation does (bytes).
	MaxKeyLen int
	// Hash is its ring's hash of a key, used only to answer an AskAgain
	// send (see Net.SetAskAgain).
	Hash func(key string) uint64
}

// Net is the network. The zero value is not ready: use New.
type Net struct {
	mu    sync.Mutex
	nodes map[string]*Member // address -> member
	cut   map[link]bool      // links that fail every call
	wrong map[link]string    // links whose calls arrive at another address
	calls map[link]int64     // calls delivered per link
	fwds  map[link]int64     // of those, forwarded checks
	// askAgain counts, per link, the replication sends carrying a ban state
	// still to be answered as a backup answers what it cannot place.
	askAgain map[link]int
}

// link is the direction from one member (by name) to an address.
type link struct{ from, to string }

// New returns an empty network.
func New() *Net {
	return &Net{nodes: map[string]*Member{}, cut: map[link]bool{}, wrong: map[link]string{}, calls: map[link]int64{},
		fwds: map[link]int64{}, askAgain: map[link]int{}}
}

// Attach puts m on the network (serving at m.Addr, replacing whoever served
// there) and returns the client its calls go through.
func (m *Net) Attach(mem Member) *Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nodes[mem.Addr] = &mem
	return &Client{net: m, from: &mem}
}

// SetCut cuts (cut true) or heals the link from the member named from to
// the address to: its calls fail with transport.ErrUnavailable.
func (m *Net) SetCut(from, to string, cut bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cut[link{from, to}] = cut
}

// Misroute makes the calls from the member named from to the address to
// arrive at the member serving at.
func (m *Net) Misroute(from, to, at string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.wrong[link{from, to}] = at
}

// Delivered returns how many calls (forwards, key operations, handoffs and
// replication sends; not handshakes) the member named from made to to.
func (m *Net) Delivered(from, to string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[link{from, to}]
}

// Forwarded returns how many of the calls Delivered counts were forwarded
// checks.
func (m *Net) Forwarded(from, to string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fwds[link{from, to}]
}

// SetAskAgain makes the next n replication sends from the member named from
// to to that carry a ban state come back unapplied, every state's and ban
// state's ring hash (by the callee's Member.Hash) in needFull.
func (m *Net) SetAskAgain(from, to string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.askAgain[link{from, to}] = n
}

// AskAgain returns how many of the sends SetAskAgain asked for are still to
// come.
func (m *Net) AskAgain(from, to string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.askAgain[link{from, to}]
}

// takeAskAgain reports whether a replication send with a ban state on l is
// to be answered whole in needFull, and counts it.
func (m *Net) takeAskAgain(l link) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.askAgain[l] == 0 {
		return false
	}
	m.askAgain[l]--
	return true
}

// Client is one member's end of the network: the peer client of node's
// tests (the methods of transport.Pool that a node uses).
type Client struct {
	net    *Net
	from   *Member
	closed atomic.Bool
}

// target returns the member serving addr, or an error wrapping
// transport.ErrUnavailable when this client is closed, the link is cut, or
// nothing serves addr (never attached, or stopped); count records the call
// in Delivered.
func (c *Client) target(addr string, count bool) (*Member, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("%w: forward to %s: pool closed", transport.ErrUnavailable, addr)
	}
	m := c.net
	m.mu.Lock()
	defer m.mu.Unlock()
	l := link{c.from.Name, addr}
	t := m.nodes[addr]
	if at, ok := m.wrong[l]; ok {
		t = m.nodes[at]
	}
	if t == nil || m.cut[l] {
		return nil, fmt.Errorf("%w: forward to %s: link cut", transport.ErrUnavailable, addr)
	}
	select {
	case <-t.Stopped:
		return nil, fmt.Errorf("%w: forward to %s: connection refused", transport.ErrUnavailable, addr)
	default:
	}
	if count {
		m.calls[l]++
	}
	return t, nil
}

// Forward validates chk as the gRPC client does (transport.ValidateCheck)
// and has the member at addr decide it.
func (c *Client) Forward(ctx context.Context, addr string, chk transport.Check) (transport.Result, error) {
	if err := transport.ValidateCheck(chk, c.from.MaxKeyLen); err != nil {
		return transport.Result{}, err
	}
	t, err := c.target(addr, true)
	if err != nil {
		return transport.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return transport.Result{}, fmt.Errorf("%w: forward to %s: %w", transport.ErrUnavailable, addr, err)
	}
	c.net.mu.Lock()
	c.net.fwds[link{c.from.Name, addr}]++
	c.net.mu.Unlock()
	out := make([]transport.Result, 1)
	t.Handler.Forward(ctx, []transport.Check{chk}, out)
	return out[0], nil
}

// KeyOp has the member at addr answer a key operation.
func (c *Client) KeyOp(ctx context.Context, addr string, r transport.KeyOpRequest) (transport.KeyOpResult, error) {
	t, err := c.target(addr, true)
	if err != nil {
		return transport.KeyOpResult{}, err
	}
	return t.Handler.KeyOp(ctx, r)
}

// copyStates gives the receiver states of its own, as it would have after
// decoding a message, and names the sender as its certificate would.
func (c *Client) copyStates(b transport.TransferBatch) transport.TransferBatch {
	b.States = append([]transport.KeyState(nil), b.States...)
	for i := range b.States {
		b.States[i].State = append([]byte(nil), b.States[i].State...)
	}
	b.Sender = c.from.Name
	return b
}

// Handoff delivers a handoff batch to the member at addr.
func (c *Client) Handoff(ctx context.Context, addr string, b transport.TransferBatch) error {
	t, err := c.target(addr, true)
	if err != nil {
		return err
	}
	return t.Handler.Transfer(ctx, c.copyStates(b))
}

// Replicate delivers a replication batch as Handoff delivers a handoff (see
// Net.SetAskAgain for the answer it may be made to give).
func (c *Client) Replicate(ctx context.Context, addr string, b transport.TransferBatch) ([]uint64, error) {
	t, err := c.target(addr, true)
	if err != nil {
		return nil, err
	}
	b = c.copyStates(b)
	b.Replica = true
	if len(b.Penalties) > 0 && c.net.takeAskAgain(link{c.from.Name, addr}) {
		var all []uint64
		for _, s := range b.States {
			h := s.KeyHash
			if s.Key != "" {
				h = t.Hash(s.Key)
			}
			all = append(all, h)
		}
		for _, p := range b.Penalties {
			all = append(all, t.Hash(p.Key))
		}
		return all, nil
	}
	return t.Handler.Replicate(ctx, b)
}

// Hello delivers the admission handshake (not counted in Delivered); the
// caller's certificate is taken to name the calling member, and the
// answer's to name the member reached.
func (c *Client) Hello(ctx context.Context, addr string, h transport.Hello) (transport.Hello, string, error) {
	t, err := c.target(addr, false)
	if err != nil {
		return transport.Hello{}, "", err
	}
	resp, err := t.Handler.Hello(ctx, h, c.from.Name)
	return resp, t.Name, err
}

// Drop does nothing: there is no connection to drop.
func (c *Client) Drop(string) {}

// Close makes every later call fail with transport.ErrUnavailable. It
// returns nil.
func (c *Client) Close() error {
	c.closed.Store(true)
	return nil
}
