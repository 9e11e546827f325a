package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// HTTP/2 flow-control windows of every connection, client and server side:
// 1 MiB per RPC, 8 MiB per connection.
const (
	streamWindow = 1 << 20
	connWindow   = 8 << 20
)

// readBuffer is the read buffer of every peer connection, client and server
// side (grpc-go's default is 32 KiB). A member keeps two connections per
// other member, so at 30 members the default's buffers alone were 1.8 MiB
// per member, a third of its heap. TLS buffers a whole record below it, and
// a frame larger than the buffer is read straight into its message, so a
// small buffer costs no extra system call on secure connections; on
// plaintext ones a burst of small frames larger than the buffer takes one
// more read.
const readBuffer = 4 << 10

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
	// DefaultStreamRetryInterval is the default ClientConfig.StreamRetryInterval (1 min).
	DefaultStreamRetryInterval = time.Minute
	// DefaultTransferMaxBytes is the default ClientConfig.TransferMaxBytes (4 MiB).
	DefaultTransferMaxBytes = 4 << 20
	// DefaultKeepaliveTime is the default client keepalive ping interval (10s),
	// also the smallest grpc-go allows: shorter values are raised to it.
	DefaultKeepaliveTime = 10 * time.Second
	// DefaultKeepaliveTimeout is the default wait for a ping ack (3s) before a
	// client considers the connection dead.
	DefaultKeepaliveTimeout = 3 * time.Second
	// DefaultIdleTimeout is the default ClientConfig.IdleTimeout (1 min).
	DefaultIdleTimeout = time.Minute
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
	// MaxInflightBatches bounds the batches in flight (sent, not yet answered)
	// to one peer. Default DefaultMaxInflightBatches (4). Full or timed-out
	// batches beyond it queue (and keep their deadline) until an answer
	// arrives. Higher hides a slow batch better; lower batches more under load.
	MaxInflightBatches int
	// ForwardTimeout bounds a forwarded check from the moment its batch opens:
	// a batch unanswered by then fails with ErrUnavailable, and the receiver is
	// told the time left so that it stops working on the batch too. Default
	// DefaultForwardTimeout (1s). The caller's context bounds it too, whichever
	// ends first. Shorter reaches the owner-unreachable policy sooner when a
	// peer hangs; too short fails checks on a merely busy peer. A stream on
	// which a batch times out without any answer arriving after it was sent is
	// considered stuck: it is cancelled (failing its other batches) and the next
	// batch opens a new one.
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
	// OnBatch, if not nil, is called once for every batch when it completes,
	// with the peer's address, the number of checks, the time from sending the
	// batch (or from opening it, if it was never sent) to its completion, and
	// its error (nil on success; per-item codes are not errors). It is called
	// from the Pool's goroutines and from callers of Forward, possibly
	// concurrently, and must not block.
	OnBatch func(addr string, size int, took time.Duration, err error)
	// UnaryForward sends every batch as its own unary Peer.Forward RPC instead
	// of as a message of the peer's long-lived Peer.ForwardStream. Unary costs
	// several times more CPU per batch; it exists for comparison and for peers
	// that predate ForwardStream. The Pool also switches a peer to unary by
	// itself when the peer answers ForwardStream with codes.Unimplemented.
	UnaryForward bool
	// StreamRetryInterval is how long a peer that answered ForwardStream (or
	// ReplicateStream) with codes.Unimplemented, a member from before that
	// method, gets unary RPCs instead; then the next batch (or replication
	// send) tries the stream again, so that a member upgraded in place, at
	// the same address, is streamed to again without a restart of this side.
	// A retry that is refused again costs one stream open and loses nothing:
	// the refused messages go as unary RPCs. Default
	// DefaultStreamRetryInterval (1 min). Not used with UnaryForward.
	StreamRetryInterval time.Duration
	// ExpectMember, if not nil and TLS is set, returns the member name expected
	// at a peer address ("host:port"); a connection whose server certificate
	// names another member fails its TLS handshake (ErrUnavailable on the
	// call). ok == false accepts any member certificate. Called on every dial,
	// possibly concurrently; it must not block.
	ExpectMember func(addr string) (member string, ok bool)
	// DialOptions are appended to the options the Pool builds for every peer
	// connection (a custom dialer, stats handlers); later options win.
	DialOptions []grpc.DialOption
	// IdleTimeout is how long a peer may go without a forwarded check and
	// without a replication send before the Pool closes its ForwardStream
	// and ReplicateStream; once no RPC has been open on the connection for
	// one to two IdleTimeouts more, gRPC closes the connection too (its idle
	// mode), so a member keeps connections, goroutines and buffers only for
	// the peers it talks to. The next check or send to the peer opens them
	// again (a new TCP connection and TLS handshake). Nothing queued or in
	// flight is ever cut: a stream is closed only while nothing is on it.
	// Default DefaultIdleTimeout (1 min).
	IdleTimeout time.Duration
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
		{"StreamRetryInterval", int64(c.StreamRetryInterval)},
		{"IdleTimeout", int64(c.IdleTimeout)},
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
	defD(&c.StreamRetryInterval, DefaultStreamRetryInterval)
	defD(&c.IdleTimeout, DefaultIdleTimeout)
	if c.BatchMaxItems > c.MaxBatch {
		return c, fmt.Errorf("transport: ClientConfig.BatchMaxItems %d is above MaxBatch %d", c.BatchMaxItems, c.MaxBatch)
	}
	return c, nil
}

// Pool is the client side of the internal Peer service: one gRPC connection per
// peer address, created on first use and let go after ClientConfig.IdleTimeout
// unused, one long-lived ForwardStream on it, and micro-batching of the checks
// forwarded to each peer. Its methods may be
// called concurrently.
type Pool struct {
	cfg   ClientConfig
	opts  []grpc.DialOption
	codec wireCodec

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
	// gRPC's idle mode closes a connection with no RPC open for
	// IdleTimeout; the peer closes its idle streams (see peer.idleFired).
	extra := append([]grpc.DialOption{grpc.WithIdleTimeout(cfg.IdleTimeout)}, cfg.DialOptions...)
	return &Pool{cfg: cfg, opts: dialOptions(cfg.TLS, cfg.ExpectMember, cfg.KeepaliveTime, cfg.KeepaliveTimeout, extra), codec: newWireCodec()}, nil
}

func dialOptions(tlsCfg *tls.Config, expect func(string) (string, bool), kaTime, kaTimeout time.Duration, extra []grpc.DialOption) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = transportCreds(tlsCfg, expect)
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
		grpc.WithReadBufferSize(readBuffer),
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
// ctx ending first, the stream or connection breaking, the peer stopping, the
// peer dropped or the Pool closed) returns an error wrapping ErrUnavailable;
// the next Forward to addr opens a new stream. When ctx ends first the check
// may still be decided by the peer; its late result is discarded.
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
	// One token of b.done is this caller's.
	if done := ctx.Done(); done == nil {
		<-b.done // a context that never ends: no select
	} else {
		select {
		case <-b.done:
		case <-done:
			b.release()
			return Result{}, fmt.Errorf("%w: forward to %s: %w", ErrUnavailable, addr, ctx.Err())
		}
	}
	var r Result
	err := b.err
	if err == nil {
		r = b.results[i]
	}
	b.release()
	return r, err
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
	_, err := p.transfer(ctx, addr, b)
	return err
}

// Replicate sends a replication batch (b.Replica set) as Handoff sends a
// handoff, and returns the ring hashes of the keys whose state or ban state
// the receiver did not apply and wants whole (a KeyState.LogDelta it could not
// append, or a state it cannot place in its ring). Errors as Transfer. The chunks travel
// as messages of one long-lived ReplicateStream per peer, one chunk answered
// before the next is sent (calls to the same peer take turns), each bounded by
// ctx and ClientConfig.TransferTimeout; a failure closes the stream and the
// next call opens a new one. A peer that does not know ReplicateStream gets
// unary Transfer RPCs instead.
func (p *Pool) Replicate(ctx context.Context, addr string, b TransferBatch) (needFull []uint64, err error) {
	b.Replica = true
	return p.transfer(ctx, addr, b)
}

// transfer sends b in chunks (see Handoff) and collects the need_full hashes
// of the answers.
func (p *Pool) transfer(ctx context.Context, addr string, b TransferBatch) (needFull []uint64, err error) {
	states := b.States
	for i, s := range states {
		if err := validateKeyState(s, p.cfg.MaxKeyLen); err != nil {
			return nil, fmt.Errorf("transfer to %s: states[%d]: %w", addr, i, err)
		}
	}
	for i, s := range b.Penalties {
		if err := validatePenaltyState(s, p.cfg.MaxKeyLen); err != nil {
			return nil, fmt.Errorf("transfer to %s: penalties[%d]: %w", addr, i, err)
		}
	}
	pe, err := p.peer(addr)
	if err != nil {
		return nil, err
	}
	// One request, encoded by wireCodec straight from the chunk, for every
	// chunk: Invoke and SendMsg are done with it when they return.
	req := &xferRequest{}
	send := pe.sendTransfer
	if b.Replica {
		send = pe.sendReplica
	}
	// Ban states go first, in requests of their own without Done, so they are
	// installed before the receiver stops holding the keys' checks.
	for pens := b.Penalties; len(pens) > 0; {
		n, size := 0, 0
		for n < len(pens) && n < p.cfg.MaxBatch {
			sz := len(pens[n].Key) + 8*len(pens[n].Denials) + 32
			if n > 0 && size+sz > p.cfg.TransferMaxBytes {
				break
			}
			size += sz
			n++
		}
		req.batch = TransferBatch{From: b.From, RingDigest: b.RingDigest, Penalties: pens[:n], Replica: b.Replica}
		if _, err := send(ctx, req, nil); err != nil {
			return nil, err
		}
		pens = pens[n:]
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
		if n == 0 && !b.Done {
			break
		}
		req.batch = TransferBatch{States: states[:n], From: b.From, RingDigest: b.RingDigest, Done: b.Done && n == len(states), Replica: b.Replica}
		if req.batch.Done {
			req.batch.After, req.batch.Leaving = b.After, b.Leaving
		}
		if needFull, err = send(ctx, req, needFull); err != nil {
			return needFull, err
		}
		states = states[n:]
	}
	return needFull, nil
}

// Drop closes the connection to addr (the member left): checks waiting in its
// batches and in flight fail at once with errors wrapping ErrUnavailable, and
// its stream ends. A later Forward or Transfer to addr dials again. Dropping an
// unknown address does nothing.
func (p *Pool) Drop(addr string) {
	p.mu.Lock()
	v, ok := p.peers.LoadAndDelete(addr)
	p.mu.Unlock()
	if ok {
		v.(*peer).close(fmt.Errorf("%w: forward to %s: peer dropped", ErrUnavailable, addr))
	}
}

// RetireAll replaces every peer connection without failing a check: later
// calls dial anew (so a new TLS handshake uses the material current then),
// and each old connection is closed once nothing is queued or in flight on
// it, or ForwardTimeout after RetireAll at the latest (what is still in
// flight then fails as with Drop). The node calls it when its TLS material
// changes. It returns at once.
func (p *Pool) RetireAll() {
	p.mu.Lock()
	var peers []*peer
	p.peers.Range(func(k, v any) bool {
		peers = append(peers, v.(*peer))
		p.peers.Delete(k)
		return true
	})
	p.mu.Unlock()
	for _, pe := range peers {
		go pe.retire(p.cfg.ForwardTimeout)
	}
}

// Close closes every peer connection and stream; waiting and in-flight checks
// fail at once with errors wrapping ErrUnavailable, and later calls fail the
// same way. It is safe to call more than once and always returns nil.
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
	pe := newPeer(&p.cfg, p.codec, addr, conn)
	p.peers.Store(addr, pe)
	return pe, nil
}
