package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// HTTP/2 flow-control windows of every connection, client and server side:
// 1 MiB per RPC, 8 MiB per connection.
const (
	streamWindow = 1 << 20
	connWindow   = 8 << 20
)

// Client defaults, used for zero ClientConfig fields.
const (
	// DefaultBatchMaxItems is the default ClientConfig.BatchMaxItems (500).
	DefaultBatchMaxItems = 500
	// DefaultBatchMaxWait is the default ClientConfig.BatchMaxWait (500µs).
	DefaultBatchMaxWait = 500 * time.Microsecond
	// DefaultMaxInflightBatches is the default ClientConfig.MaxInflightBatches (4).
	DefaultMaxInflightBatches = 4
	// DefaultForwardTimeout is the default ClientConfig.ForwardTimeout (1s).
	DefaultForwardTimeout = time.Second
	// DefaultTransferTimeout is the default ClientConfig.TransferTimeout (10s).
	DefaultTransferTimeout = 10 * time.Second
	// DefaultTransferMaxBytes is the default ClientConfig.TransferMaxBytes (4 MiB).
	DefaultTransferMaxBytes = 4 << 20
	// DefaultKeepaliveTime is the default client keepalive ping interval (10s),
	// also the smallest grpc-go allows: shorter values are raised to it.
	DefaultKeepaliveTime = 10 * time.Second
	// DefaultKeepaliveTimeout is the default wait for a ping ack (3s) before a
	// client considers the connection dead.
	DefaultKeepaliveTimeout = 3 * time.Second
)

// ClientConfig configures a Pool. Zero fields take the documented defaults;
// negative values are rejected by NewPool. It is not read after NewPool returns,
// except OnBatch, which is called.
type ClientConfig struct {
	// TLS is the client TLS configuration used for every peer, for example the
	// client half of LoadMutualTLS. nil dials plaintext.
	TLS *tls.Config
	// BatchMaxItems flushes a peer's open batch as soon as it holds this many
	// checks. Default DefaultBatchMaxItems (500); 1 disables batching (one RPC
	// per check). Larger batches cost fewer RPCs per check under heavy load; it
	// must not exceed MaxBatch (the peers' ServerConfig.MaxBatch).
	BatchMaxItems int
	// BatchMaxWait is the longest a check waits in an open batch while other
	// batches to the same peer are in flight; then the batch is sent alongside
	// them (up to MaxInflightBatches). Default DefaultBatchMaxWait (500µs).
	// When nothing is in flight to a peer, a check is sent at once: waiting would
	// only add latency. Under load, checks pile up behind the in-flight RPC and
	// go out together when it returns, so batch size follows load. Longer waits
	// give larger batches and fewer RPCs at the cost of latency when the peer is
	// slow.
	BatchMaxWait time.Duration
	// MaxInflightBatches bounds the Forward RPCs in flight to one peer. Default
	// DefaultMaxInflightBatches (4). Full or timed-out batches beyond it queue
	// (and keep their deadline) until an RPC returns. Higher hides a slow RPC
	// better; lower batches more under load.
	MaxInflightBatches int
	// ForwardTimeout bounds a forwarded check from the moment its batch opens:
	// every Forward RPC carries this deadline. Default DefaultForwardTimeout
	// (1s). The caller's context bounds it too, whichever ends first. Shorter
	// reaches the owner-unreachable policy sooner when a peer hangs; too short
	// fails checks on a merely busy peer.
	ForwardTimeout time.Duration
	// TransferTimeout is the deadline of each Transfer RPC (one chunk). Default
	// DefaultTransferTimeout (10s).
	TransferTimeout time.Duration
	// MaxKeyLen is the longest key Forward accepts, in bytes; longer keys are
	// rejected locally with ErrInvalidCheck. Default DefaultMaxKeyLen (1024).
	// Keep it equal to the peers' ServerConfig.MaxKeyLen.
	MaxKeyLen int
	// MaxBatch is the most items sent in one RPC: the cap of BatchMaxItems and the
	// chunk size of Transfer. Default DefaultMaxBatch (1000); must not exceed the
	// peers' ServerConfig.MaxBatch.
	MaxBatch int
	// TransferMaxBytes caps the approximate encoded size of one Transfer chunk,
	// in bytes. Default DefaultTransferMaxBytes (4 MiB); must stay below the
	// peers' ServerConfig.MaxRecvMsgBytes. A single state larger than this is
	// sent alone.
	TransferMaxBytes int
	// KeepaliveTime is the interval of keepalive pings on an idle connection.
	// Default DefaultKeepaliveTime (10s), which is also grpc-go's minimum. The
	// peers' ServerConfig.KeepaliveMinTime must be <= it, or they answer GOAWAY
	// too_many_pings. Shorter detects a dead peer sooner.
	KeepaliveTime time.Duration
	// KeepaliveTimeout is how long a ping may go unanswered before the connection
	// is considered dead and its RPCs fail. Default DefaultKeepaliveTimeout (3s).
	KeepaliveTimeout time.Duration
	// OnBatch, if not nil, is called after every Forward RPC with the peer's
	// address, the number of checks, the RPC's duration and its error (nil on
	// success; per-item codes are not errors). It is called from the Pool's
	// goroutines, possibly concurrently, and must not block.
	OnBatch func(addr string, size int, took time.Duration, err error)
	// DialOptions are appended to the options the Pool builds for every peer
	// connection (a custom dialer, stats handlers); later options win.
	DialOptions []grpc.DialOption
}

func (c ClientConfig) withDefaults() (ClientConfig, error) {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"BatchMaxItems", int64(c.BatchMaxItems)},
		{"BatchMaxWait", int64(c.BatchMaxWait)},
		{"MaxInflightBatches", int64(c.MaxInflightBatches)},
		{"ForwardTimeout", int64(c.ForwardTimeout)},
		{"TransferTimeout", int64(c.TransferTimeout)},
		{"MaxKeyLen", int64(c.MaxKeyLen)},
		{"MaxBatch", int64(c.MaxBatch)},
		{"TransferMaxBytes", int64(c.TransferMaxBytes)},
		{"KeepaliveTime", int64(c.KeepaliveTime)},
		{"KeepaliveTimeout", int64(c.KeepaliveTimeout)},
	} {
		if f.v < 0 {
			return c, fmt.Errorf("transport: ClientConfig.%s %d is negative", f.name, f.v)
		}
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxBatch, DefaultMaxBatch)
	def(&c.BatchMaxItems, min(DefaultBatchMaxItems, c.MaxBatch))
	def(&c.MaxInflightBatches, DefaultMaxInflightBatches)
	def(&c.MaxKeyLen, DefaultMaxKeyLen)
	def(&c.TransferMaxBytes, DefaultTransferMaxBytes)
	defD(&c.BatchMaxWait, DefaultBatchMaxWait)
	defD(&c.ForwardTimeout, DefaultForwardTimeout)
	defD(&c.TransferTimeout, DefaultTransferTimeout)
	defD(&c.KeepaliveTime, DefaultKeepaliveTime)
	defD(&c.KeepaliveTimeout, DefaultKeepaliveTimeout)
	if c.BatchMaxItems > c.MaxBatch {
		return c, fmt.Errorf("transport: ClientConfig.BatchMaxItems %d is above MaxBatch %d", c.BatchMaxItems, c.MaxBatch)
	}
	return c, nil
}

// Pool is the client side of the internal Peer service: one gRPC connection per
// peer address, created on first use, and micro-batching of the checks
// forwarded to each peer. Its methods may be called concurrently.
type Pool struct {
	cfg  ClientConfig
	opts []grpc.DialOption

	peers sync.Map // addr -> *peer; written under mu

	mu     sync.Mutex
	closed bool
}

// NewPool returns a Pool for cfg. It dials nothing yet. It returns an error for
// negative fields or BatchMaxItems above MaxBatch.
func NewPool(cfg ClientConfig) (*Pool, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Pool{cfg: cfg, opts: dialOptions(cfg.TLS, cfg.KeepaliveTime, cfg.KeepaliveTimeout, cfg.DialOptions)}, nil
}

func dialOptions(tlsCfg *tls.Config, kaTime, kaTimeout time.Duration, extra []grpc.DialOption) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                kaTime,
			Timeout:             kaTimeout,
			PermitWithoutStream: true,
		}),
		// Fixed windows turn off grpc-go's BDP estimation, whose pings ride on
		// every burst of small responses; peers are on a LAN, so the windows
		// below cover the bandwidth-delay product anyway.
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
	}
	return append(opts, extra...)
}

// Forward sends c to the peer at addr (host:port) in the peer's next batch and
// returns the peer's Result for it. A per-item outcome such as CodeNotOwner or
// CodeInvalidArgument is a Result, not an error.
//
// Errors: a c that fails ValidateCheck (with ClientConfig.MaxKeyLen) returns an
// error wrapping ErrInvalidCheck without sending anything. Every transport
// failure (peer unreachable or refusing the TLS handshake, ForwardTimeout or
// ctx ending first, codes.Unavailable, the peer dropped or the Pool closed)
// returns an error wrapping ErrUnavailable. When ctx ends first the check may
// still be decided by the peer.
func (p *Pool) Forward(ctx context.Context, addr string, c Check) (Result, error) {
	if err := ValidateCheck(c, p.cfg.MaxKeyLen); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("%w: forward to %s: %w", ErrUnavailable, addr, err)
	}
	var (
		b *batch
		i int
	)
	for {
		pe, err := p.peer(addr)
		if err != nil {
			return Result{}, err
		}
		var ok bool
		if b, i, ok = pe.add(c); ok {
			break
		}
		// Dropped between lookup and add: the next lookup dials afresh.
	}
	select {
	case <-b.done:
		if b.err != nil {
			return Result{}, b.err
		}
		return b.results[i], nil
	case <-ctx.Done():
		return Result{}, fmt.Errorf("%w: forward to %s: %w", ErrUnavailable, addr, ctx.Err())
	}
}

// Transfer sends states to the peer at addr in chunks of at most
// ClientConfig.MaxBatch states and about ClientConfig.TransferMaxBytes bytes,
// one RPC after another, each with ClientConfig.TransferTimeout. It stops at the
// first failure: an invalid state (error wrapping ErrInvalidCheck, nothing of
// that chunk installed) or a transport failure (error wrapping ErrUnavailable;
// earlier chunks stay installed).
func (p *Pool) Transfer(ctx context.Context, addr string, states []KeyState) error {
	return p.Handoff(ctx, addr, TransferBatch{States: states})
}

// Handoff sends a whole handoff to addr: b.States chunked as Transfer does, with
// From and RingDigest on every request and Done only on the last (a handoff with
// no states and Done still sends one request, the marker). Errors as Transfer.
func (p *Pool) Handoff(ctx context.Context, addr string, b TransferBatch) error {
	states := b.States
	for i, s := range states {
		if err := validateKeyState(s, p.cfg.MaxKeyLen); err != nil {
			return fmt.Errorf("transfer to %s: states[%d]: %w", addr, i, err)
		}
	}
	pe, err := p.peer(addr)
	if err != nil {
		return err
	}
	for first := true; first || len(states) > 0; first = false {
		n, size := 0, 0
		for n < len(states) && n < p.cfg.MaxBatch {
			sz := len(states[n].Key) + len(states[n].State) + 64
			if n > 0 && size+sz > p.cfg.TransferMaxBytes {
				break
			}
			size += sz
			n++
		}
		msgs := make([]pb.KeyState, n)
		req := &pb.TransferRequest{States: make([]*pb.KeyState, n), From: b.From, RingDigest: b.RingDigest, Done: b.Done && n == len(states)}
		if n == 0 && !b.Done {
			break
		}
		for j := range n {
			keyStateToWire(states[j], &msgs[j])
			req.States[j] = &msgs[j]
		}
		cctx, cancel := context.WithTimeout(ctx, p.cfg.TransferTimeout)
		_, err := pe.client.Transfer(cctx, req)
		cancel()
		if err != nil {
			return errorFromStatus("transfer to "+addr, err)
		}
		states = states[n:]
	}
	return nil
}

// Drop closes the connection to addr (the member left): checks waiting in its
// batches and RPCs in flight fail with errors wrapping ErrUnavailable. A later
// Forward or Transfer to addr dials again. Dropping an unknown address does
// nothing.
func (p *Pool) Drop(addr string) {
	p.mu.Lock()
	v, ok := p.peers.LoadAndDelete(addr)
	p.mu.Unlock()
	if ok {
		v.(*peer).close(fmt.Errorf("%w: forward to %s: peer dropped", ErrUnavailable, addr))
	}
}

// Close closes every peer connection; waiting and in-flight checks fail with
// errors wrapping ErrUnavailable, and later calls fail the same way. It is safe
// to call more than once and always returns nil.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var peers []*peer
	p.peers.Range(func(k, v any) bool {
		peers = append(peers, v.(*peer))
		p.peers.Delete(k)
		return true
	})
	p.mu.Unlock()
	for _, pe := range peers {
		pe.close(fmt.Errorf("%w: forward to %s: pool closed", ErrUnavailable, pe.addr))
	}
	return nil
}

// peer returns the peer of addr, creating its connection on first use.
func (p *Pool) peer(addr string) (*peer, error) {
	if v, ok := p.peers.Load(addr); ok {
		return v.(*peer), nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("%w: forward to %s: pool closed", ErrUnavailable, addr)
	}
	if v, ok := p.peers.Load(addr); ok {
		return v.(*peer), nil
	}
	conn, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %w", ErrUnavailable, addr, err)
	}
	pe := &peer{cfg: &p.cfg, addr: addr, conn: conn, client: pb.NewPeerClient(conn)}
	pe.timer = time.AfterFunc(time.Hour, pe.timerFired)
	pe.timer.Stop()
	p.peers.Store(addr, pe)
	return pe, nil
}

// peer batches the checks forwarded to one address.
//
// Batches move open (cur) -> ready (full, timed out, or the link is idle) ->
// in flight. At most cfg.MaxInflightBatches are in flight; the goroutine that
// finishes an RPC sends the next ready batch, or the open batch if nothing else
// is in flight.
type peer struct {
	cfg    *ClientConfig
	addr   string
	conn   *grpc.ClientConn
	client pb.PeerClient
	timer  *time.Timer // flushes cur after BatchMaxWait; fires into timerFired

	mu       sync.Mutex
	cur      *batch   // open batch, or nil
	ready    []*batch // closed batches waiting for an in-flight slot, FIFO
	inflight int
	closed   bool
}

// batch is one Forward RPC: its checks, and once done is closed, either err or
// one result per check.
type batch struct {
	checks   []Check
	opened   time.Time
	deadline time.Time

	done    chan struct{}
	results []Result
	err     error
}

// add appends c to the open batch and returns the batch and c's index in it;
// ok is false when the peer was closed.
func (pe *peer) add(c Check) (b *batch, i int, ok bool) {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	if pe.closed {
		return nil, 0, false
	}
	b = pe.cur
	if b == nil {
		now := time.Now()
		b = &batch{
			checks:   make([]Check, 0, min(pe.cfg.BatchMaxItems, 16)),
			opened:   now,
			deadline: now.Add(pe.cfg.ForwardTimeout),
			done:     make(chan struct{}),
		}
		pe.cur = b
	}
	i = len(b.checks)
	b.checks = append(b.checks, c)
	switch {
	case len(b.checks) >= pe.cfg.BatchMaxItems, pe.inflight == 0:
		pe.closeCur()
	case i == 0:
		pe.timer.Reset(pe.cfg.BatchMaxWait)
	}
	return b, i, true
}

// closeCur moves the open batch to ready and sends what the in-flight bound
// allows. pe.mu is held.
func (pe *peer) closeCur() {
	pe.ready = append(pe.ready, pe.cur)
	pe.cur = nil
	for pe.inflight < pe.cfg.MaxInflightBatches && len(pe.ready) > 0 {
		b := pe.popReady()
		pe.inflight++
		go pe.run(b)
	}
}

func (pe *peer) popReady() *batch {
	b := pe.ready[0]
	pe.ready[0] = nil
	pe.ready = pe.ready[1:]
	if len(pe.ready) == 0 {
		pe.ready = pe.ready[:0:0] // let the backing array go; it rarely grows
	}
	return b
}

// timerFired closes the open batch once it is BatchMaxWait old. A stale fire
// (the batch it was armed for is gone) re-arms for the current batch or does
// nothing.
func (pe *peer) timerFired() {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	b := pe.cur
	if b == nil || pe.closed {
		return
	}
	if wait := pe.cfg.BatchMaxWait - time.Since(b.opened); wait > 0 {
		pe.timer.Reset(wait)
		return
	}
	pe.closeCur()
}

// run sends b, then keeps sending the next ready batch (or the open batch when
// the link became idle) until there is nothing to send.
func (pe *peer) run(b *batch) {
	for b != nil {
		pe.send(b)
		pe.mu.Lock()
		b = nil
		switch {
		case pe.closed:
			pe.inflight--
		case len(pe.ready) > 0:
			b = pe.popReady()
		case pe.inflight == 1 && pe.cur != nil:
			b = pe.cur
			pe.cur = nil
		default:
			pe.inflight--
		}
		pe.mu.Unlock()
	}
}

// send performs the RPC of b and completes it.
func (pe *peer) send(b *batch) {
	start := time.Now()
	var err error
	if !start.Before(b.deadline) {
		err = fmt.Errorf("%w: forward to %s: %w before the batch could be sent", ErrUnavailable, pe.addr, context.DeadlineExceeded)
	} else {
		ctx, cancel := context.WithDeadline(context.Background(), b.deadline)
		var resp *pb.ForwardResponse
		resp, err = pe.client.Forward(ctx, &pb.ForwardRequest{Checks: checksToWire(b.checks)})
		cancel()
		switch {
		case err != nil:
			err = errorFromStatus("forward to "+pe.addr, err)
		case len(resp.GetResults()) != len(b.checks):
			err = fmt.Errorf("%w: forward to %s: %d results for %d checks", ErrUnavailable, pe.addr, len(resp.GetResults()), len(b.checks))
		default:
			b.results = make([]Result, len(b.checks))
			for i, m := range resp.GetResults() {
				resultFromWire(m, &b.results[i])
			}
		}
	}
	b.err = err
	close(b.done)
	if pe.cfg.OnBatch != nil {
		pe.cfg.OnBatch(pe.addr, len(b.checks), time.Since(start), err)
	}
}

// close fails every batch not yet sent with err and closes the connection,
// which fails the RPCs in flight.
func (pe *peer) close(err error) {
	pe.mu.Lock()
	if pe.closed {
		pe.mu.Unlock()
		return
	}
	pe.closed = true
	pending := pe.ready
	if pe.cur != nil {
		pending = append(pending, pe.cur)
	}
	pe.cur, pe.ready = nil, nil
	pe.mu.Unlock()
	pe.timer.Stop()
	for _, b := range pending {
		b.err = err
		close(b.done)
	}
	_ = pe.conn.Close()
}
