package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// Server defaults, used for zero (or negative) ServerConfig fields.
const (
	// DefaultServerKeepaliveMinTime is the default ServerConfig.KeepaliveMinTime
	// (5s): half of DefaultKeepaliveTime, the clients' ping interval, so a
	// client on defaults never meets GOAWAY too_many_pings.
	DefaultServerKeepaliveMinTime = 5 * time.Second
	// DefaultServerKeepaliveTime is the default ServerConfig.KeepaliveTime (30s).
	DefaultServerKeepaliveTime = 30 * time.Second
	// DefaultServerKeepaliveTimeout is the default ServerConfig.KeepaliveTimeout (10s).
	DefaultServerKeepaliveTimeout = 10 * time.Second
	// DefaultMaxRecvMsgBytes is the default ServerConfig.MaxRecvMsgBytes (8 MiB):
	// room for a Transfer chunk of DefaultTransferMaxBytes plus framing.
	DefaultMaxRecvMsgBytes = 8 << 20
	// DefaultCheckBatchConcurrency is the default ServerConfig.CheckBatchConcurrency (64).
	DefaultCheckBatchConcurrency = 64
)

// ServerConfig configures NewServer. The zero value is usable: every zero (or
// negative) field takes the documented default. It is not read after NewServer
// returns.
type ServerConfig struct {
	// Descriptors serves the Limiter service's CheckDescriptors RPC; nil
	// answers it UNIMPLEMENTED.
	Descriptors DescriptorHandler
	// TLS is the server's TLS configuration, for example the server half of
	// LoadMutualTLS. nil serves plaintext (trusted networks, tests).
	TLS *tls.Config
	// MaxKeyLen is the longest key accepted, in bytes. Default DefaultMaxKeyLen
	// (1024). Longer keys are rejected with InvalidArgument naming the key.
	MaxKeyLen int
	// MaxBatch is the largest number of items in one CheckBatch, Forward or
	// Transfer request. Default DefaultMaxBatch (1000). A larger request fails as
	// a whole with InvalidArgument. Peers' ClientConfig.MaxBatch must not exceed it.
	MaxBatch int
	// MaxRecvMsgBytes is the largest request message accepted, in bytes. Default
	// DefaultMaxRecvMsgBytes (8 MiB). Must exceed the peers'
	// ClientConfig.TransferMaxBytes, since one key's state can be ~512 KiB.
	MaxRecvMsgBytes int
	// KeepaliveMinTime is the shortest interval between client pings the server
	// tolerates; clients pinging faster are disconnected with GOAWAY
	// too_many_pings. It must be <= every client's keepalive Time (grpc-go
	// clients cannot ping faster than every 10s). Default
	// DefaultServerKeepaliveMinTime (5s). Pings without active RPCs are always
	// permitted, since peers keep idle connections warm.
	KeepaliveMinTime time.Duration
	// KeepaliveTime is how long a connection may be idle before the server pings
	// the client to check it is alive. Default DefaultServerKeepaliveTime (30s);
	// grpc-go raises values below 1s to 1s. Shorter detects dead clients sooner
	// at the cost of a few more packets.
	KeepaliveTime time.Duration
	// KeepaliveTimeout is how long the server waits for a ping ack before it
	// closes the connection. Default DefaultServerKeepaliveTimeout (10s).
	KeepaliveTimeout time.Duration
	// CheckBatchConcurrency bounds how many checks of one CheckBatch request are
	// passed to LimiterHandler.Check at the same time. Default
	// DefaultCheckBatchConcurrency (64). Higher lets a large batch with many
	// forwarded keys finish sooner (their forwards share micro-batches) at the
	// cost of more goroutines per request.
	CheckBatchConcurrency int
	// ServerOptions are appended to the options NewServer builds (interceptors,
	// stats handlers); later options win. They must not replace the codec:
	// ForwardStream, Transfer and ReplicateStream rely on the one NewServer
	// installs. Their messages are this package's own types, not protobuf
	// messages, and Transfer's and ReplicateStream's requests are reused once
	// answered: an interceptor or stats handler must not keep them.
	ServerOptions []grpc.ServerOption
	// PeerGate, when set, is asked before every Peer RPC but Hello
	// (Forward, ForwardStream, Transfer, ReplicateStream), and again after
	// every message a Peer stream receives, so that a caller refused
	// meanwhile loses its open streams at their next message; a refusal is
	// codes.PermissionDenied. The node admits only members' certificates
	// through it. It must be safe for concurrent use and cheap: it runs once
	// per request. Default nil: no gate.
	PeerGate PeerGate
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.MaxKeyLen <= 0 {
		c.MaxKeyLen = DefaultMaxKeyLen
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxRecvMsgBytes <= 0 {
		c.MaxRecvMsgBytes = DefaultMaxRecvMsgBytes
	}
	if c.KeepaliveMinTime <= 0 {
		c.KeepaliveMinTime = DefaultServerKeepaliveMinTime
	}
	if c.KeepaliveTime <= 0 {
		c.KeepaliveTime = DefaultServerKeepaliveTime
	}
	if c.KeepaliveTimeout <= 0 {
		c.KeepaliveTimeout = DefaultServerKeepaliveTimeout
	}
	if c.CheckBatchConcurrency <= 0 {
		c.CheckBatchConcurrency = DefaultCheckBatchConcurrency
	}
	return c
}

// Server is a gRPC server with ringlimit's services registered, as NewServer
// returns it. Its stop methods first end the open ForwardStreams and
// ReplicateStreams (which would otherwise hold a graceful stop until every
// peer closed its stream), then stop the gRPC server.
type Server struct {
	grpc     *grpc.Server
	stop     chan struct{} // closed when the server stops: streams end
	stopOnce sync.Once
}

// Serve accepts connections on lis until the server stops, as
// grpc.Server.Serve: it returns grpc.ErrServerStopped (possibly wrapped) after
// a stop, another error if lis fails.
func (s *Server) Serve(lis net.Listener) error { return s.grpc.Serve(lis) }

// GracefulStop stops accepting connections and RPCs, tells every open
// ForwardStream and ReplicateStream to end (batches being decided are
// answered first; the peer's unanswered batches fail there with
// ErrUnavailable), and waits for the RPCs in flight to finish. A handler that
// blocks keeps it waiting: callers bound it and fall back to Stop, as with
// grpc.Server.GracefulStop. Safe to call more than once, and together with
// Stop.
func (s *Server) GracefulStop() {
	s.endStreams()
	s.grpc.GracefulStop()
}

// Stop ends every ForwardStream and ReplicateStream and closes every
// connection at once: RPCs in flight are cancelled and fail on their
// clients. Safe to call more than once.
func (s *Server) Stop() {
	s.endStreams()
	s.grpc.Stop()
}

// GRPCServer returns the underlying gRPC server, to register more services
// (health, reflection) before Serve. Stop it through Server, not directly, or
// open ForwardStreams and ReplicateStreams hold GracefulStop.
func (s *Server) GRPCServer() *grpc.Server { return s.grpc }

func (s *Server) endStreams() { s.stopOnce.Do(func() { close(s.stop) }) }

// NewServer returns a Server with the internal Peer service backed by peer and
// the public Limiter service backed by lim registered; a nil handler leaves its
// service unregistered (its calls fail with Unimplemented). The caller serves
// it (Serve on a listener) and stops it (GracefulStop or Stop).
//
// Both services validate every check (ValidateCheck with cfg.MaxKeyLen) and the
// batch size before calling a handler: malformed input is answered with
// codes.InvalidArgument and a message naming the field, as a whole for Check,
// Transfer and oversized batches, per item (CodeInvalidArgument) inside
// CheckBatch and Forward so one bad item does not fail its batch. Handler errors
// wrapping ErrInvalidCheck or algo.ErrInvalidLimit become InvalidArgument,
// errors wrapping ErrUnavailable become Unavailable, context errors become
// DeadlineExceeded or Canceled, and others Internal. On ForwardStream the same
// outcomes travel per batch (ForwardResponse.code and message), and each batch
// is decided under the deadline its sender gave: on the stream's receive
// goroutine, or in a goroutine of its own when peer implements
// ForwardWaitHinter and says the batch may wait (always, when it does not
// implement it), so a handler that blocks on one batch does not hold the
// others of that peer. ReplicateStream checks and maps each request as
// Transfer does; the first one refused ends the stream with its status.
func NewServer(cfg ServerConfig, peer PeerHandler, lim LimiterHandler) *Server {
	s, cfg := newServer(cfg)
	if peer != nil {
		s.grpc.RegisterService(peerServiceDesc(), &peerServer{cfg: cfg, h: peer, stop: s.stop})
	}
	if lim != nil {
		pb.RegisterLimiterServer(s.grpc, &limiterServer{cfg: cfg, h: lim, desc: cfg.Descriptors})
	}
	return s
}

// NewPeerServer returns a Server with only the internal Peer service, backed by
// peer (the node's peer listener): the Limiter service answers Unimplemented.
// Serve it with the peer half of pki.PeerTLS in cfg.TLS, so that only cluster
// members can call it. See NewServer for validation and error mapping.
func NewPeerServer(cfg ServerConfig, peer PeerHandler) *Server {
	return NewServer(cfg, peer, nil)
}

// NewLimiterServer returns a Server with only the public Limiter service,
// backed by lim (the daemon's client gRPC port): every Peer RPC (Forward,
// ForwardStream, Transfer, Hello) answers Unimplemented, so a client can never
// install states or smuggle timestamps through it. See NewServer.
func NewLimiterServer(cfg ServerConfig, lim LimiterHandler) *Server {
	return NewServer(cfg, nil, lim)
}

func newServer(cfg ServerConfig) (*Server, ServerConfig) {
	cfg = cfg.withDefaults()
	opts := []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             cfg.KeepaliveMinTime,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    cfg.KeepaliveTime,
			Timeout: cfg.KeepaliveTimeout,
		}),
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgBytes),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.ReadBufferSize(readBuffer), // see readBuffer
		// Reuse a goroutine per core for RPCs instead of one new goroutine each.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		// ForwardStream's messages skip the protobuf runtime (same bytes on
		// the wire); every other message is left to the protobuf codec.
		grpc.ForceServerCodecV2(newWireCodec()),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	if cfg.PeerGate != nil {
		opts = append(opts, gateOptions(cfg.PeerGate)...)
	}
	opts = append(opts, cfg.ServerOptions...)
	return &Server{grpc: grpc.NewServer(opts...), stop: make(chan struct{})}, cfg
}

// peerServer implements the Peer service on top of a PeerHandler; its
// Transfer method is served by transferHandler (see peerServiceDesc).
type peerServer struct {
	pb.UnimplementedPeerServer
	cfg        ServerConfig
	h          PeerHandler
	stop       <-chan struct{}
	batches    sync.Pool    // *streamBatch answered and let go, for reuse
	xfers      sync.Pool    // *xferRequest answered and let go, for reuse
	noNeedFull xferResponse // the empty TransferResponse; never written
}

// peerServiceDesc returns the Peer service as generated, but for its Transfer
// method, whose handler is transferHandler: the generated one decodes into a
// *pb.TransferRequest, one *pb.KeyState and state []byte per state.
func peerServiceDesc() *grpc.ServiceDesc {
	d := pb.Peer_ServiceDesc
	d.Methods = slices.Clone(d.Methods)
	for i := range d.Methods {
		if d.Methods[i].MethodName == "Transfer" {
			d.Methods[i].Handler = transferHandler
		}
	}
	return &d
}

func (s *peerServer) Forward(ctx context.Context, req *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	in := req.GetChecks()
	if len(in) > s.cfg.MaxBatch {
		return nil, batchTooLarge("checks", len(in), s.cfg.MaxBatch)
	}
	if len(in) == 0 {
		return &pb.ForwardResponse{}, nil
	}
	checks, invalid := decodeChecks(in, s.cfg.MaxKeyLen)
	results, err := s.decide(ctx, checks, invalid, len(in), make([]Result, len(checks)))
	if err != nil {
		return nil, err
	}
	return &pb.ForwardResponse{Results: resultsToWire(results)}, nil
}

// decide passes the valid checks of a batch of n items to the handler, which
// fills results (zeroed, len(checks)), and merges those with the rejected
// items; the error is a status error for the batch as a whole.
func (s *peerServer) decide(ctx context.Context, checks []Check, invalid []invalidItem, n int, results []Result) ([]Result, error) {
	if len(checks) > 0 {
		s.h.Forward(ctx, checks, results)
	}
	return mergeInvalid(results, invalid, n), nil
}

// errStreamStopping ends a ForwardStream when the server stops.
var errStreamStopping = status.Error(codes.Unavailable, "transport: server stopping")

// ForwardStream receives batches in a goroutine of its own, so that the
// handler can return when the server stops even while that goroutine waits in
// RecvMsg. A batch is decided on that goroutine when the handler says it will
// not wait (ForwardWaitHinter), else in a goroutine of its own; either way it
// is answered as soon as it is decided, so answers may come in any order.
func (s *peerServer) ForwardStream(stream pb.Peer_ForwardStreamServer) error {
	select {
	case <-s.stop:
		return errStreamStopping
	default:
	}
	fs := &forwardStream{srv: s, stream: stream}
	recvDone := make(chan error, 1)
	go func() { recvDone <- fs.recvLoop() }()
	var err error
	select {
	case err = <-recvDone:
		if errors.Is(err, io.EOF) {
			err = nil // the client closed its side: every batch was received
		}
	case <-s.stop:
		err = errStreamStopping
	}
	fs.mu.Lock()
	fs.stopped = true
	fs.mu.Unlock()
	fs.wg.Wait() // batches being decided are answered first
	fs.sendMu.Lock()
	fs.sendClosed = true
	fs.sendMu.Unlock()
	return err
}

// forwardStream is the server side of one ForwardStream.
type forwardStream struct {
	srv    *peerServer
	stream pb.Peer_ForwardStreamServer
	wg     sync.WaitGroup // batches being decided

	mu      sync.Mutex
	stopped bool // no new batch starts

	sendMu     sync.Mutex
	sendClosed bool // the handler returned: Send is no longer allowed
}

// streamBatch is one batch received on a ForwardStream with everything its
// serving needs, allocated together and reused (peerServer.batches) once the
// batch is answered, unless its context was handed out for waiting.
type streamBatch struct {
	req  fwdRequest
	resp fwdResponse
	ctx  batchContext
	// results is the handler's out slice, kept across reuse (up to
	// maxKeptItems) so that a batch's answer costs no allocation; zeroed
	// whenever the batch is put back.
	results []Result
}

func (s *peerServer) getBatch() *streamBatch {
	sb, _ := s.batches.Get().(*streamBatch)
	if sb == nil {
		sb = new(streamBatch)
	}
	sb.req.maxKeyLen = s.cfg.MaxKeyLen
	return sb
}

// maxKeptKeyBytes bounds the capacity of the key bytes a recycled stream batch
// keeps (maxKeptItems keys of 256 bytes); a larger buffer, from a burst of long
// keys, is let go.
const maxKeptKeyBytes = maxKeptItems * 256

// putBatch makes sb, which nothing refers to any more, available for reuse.
func (s *peerServer) putBatch(sb *streamBatch) {
	checks := sb.req.checks
	if cap(checks) > maxKeptItems {
		checks = nil
	}
	clear(checks) // the keys
	keyBuf := sb.req.keyBuf
	if cap(keyBuf) > maxKeptKeyBytes {
		keyBuf = nil
	}
	results := sb.results
	if cap(results) > maxKeptItems {
		results = nil
	}
	clear(results) // owner names and messages, and zero for the next handler
	*sb = streamBatch{req: fwdRequest{checks: checks[:0], keyBuf: keyBuf[:0]}, results: results}
	s.batches.Put(sb)
}

func (fs *forwardStream) recvLoop() error {
	for {
		sb := fs.srv.getBatch()
		if err := fs.stream.RecvMsg(&sb.req); err != nil {
			fs.srv.putBatch(sb)
			return err
		}
		fs.mu.Lock()
		if fs.stopped {
			fs.mu.Unlock()
			fs.srv.putBatch(sb)
			return nil // the handler is returning; the sender sees the stream end
		}
		fs.wg.Add(1)
		fs.mu.Unlock()
		if hint, ok := fs.srv.h.(ForwardWaitHinter); ok && !hint.ForwardMayWait(sb.req.checks) {
			fs.serve(sb)
		} else {
			go fs.serve(sb)
		}
	}
}

// serve decides one batch, sends its answer, and lets sb go.
func (fs *forwardStream) serve(sb *streamBatch) {
	defer fs.wg.Done()
	req, resp := &sb.req, &sb.resp
	sb.ctx.parent = fs.stream.Context()
	if req.timeout > 0 {
		sb.ctx.deadline = time.Now().Add(time.Duration(req.timeout))
	}
	defer func() {
		if sb.ctx.end() {
			fs.srv.putBatch(sb)
		}
	}()
	resp.id = req.id
	var results []Result
	var err error
	if req.n > fs.srv.cfg.MaxBatch {
		err = batchTooLarge("checks", req.n, fs.srv.cfg.MaxBatch)
	} else if req.n > 0 {
		if cap(sb.results) < len(req.checks) {
			sb.results = make([]Result, len(req.checks))
		}
		results, err = fs.srv.decide(&sb.ctx, req.checks, req.invalid, req.n, sb.results[:len(req.checks)])
	}
	if err != nil {
		st := status.Convert(err)
		resp.code = pb.Code_CODE_UNAVAILABLE
		if st.Code() == codes.InvalidArgument {
			resp.code = pb.Code_CODE_INVALID_ARGUMENT
		}
		resp.message = st.Message()
	} else {
		resp.results = results
	}
	fs.sendMu.Lock()
	defer fs.sendMu.Unlock()
	if !fs.sendClosed {
		_ = fs.stream.SendMsg(resp) // an error ends the stream; RecvMsg reports it
	}
}

// transferHandler serves the Transfer method (a grpc.MethodHandler): wireCodec
// decodes the request into an *xferRequest of s.xfers, which is reused once
// the handler returns (PeerHandler.Transfer keeps nothing of b.States).
// Interceptors see the *xferRequest and the *xferResponse.
func transferHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*peerServer)
	req := s.getXfer()
	defer s.putXfer(req)
	if err := dec(req); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return s.transfer(ctx, req)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: pb.Peer_Transfer_FullMethodName}
	return interceptor(ctx, req, info, func(ctx context.Context, req any) (any, error) {
		return s.transfer(ctx, req.(*xferRequest))
	})
}

func (s *peerServer) getXfer() *xferRequest {
	m, _ := s.xfers.Get().(*xferRequest)
	if m == nil {
		m = new(xferRequest)
	}
	m.maxKeyLen, m.maxBatch = s.cfg.MaxKeyLen, s.cfg.MaxBatch
	return m
}

// Bounds on what a recycled xferRequest keeps: a replication batch's states
// and message, not those of a large handoff.
const (
	maxKeptStates    = DefaultMaxBatch
	maxKeptWireBytes = 256 << 10
)

// putXfer makes m, which nothing refers to any more, available for reuse.
func (s *peerServer) putXfer(m *xferRequest) {
	states, wire := m.batch.States, m.wire
	if cap(states) > maxKeptStates {
		states = nil
	}
	if cap(wire) > maxKeptWireBytes {
		wire = nil
	}
	clear(states) // keys and state slices
	*m = xferRequest{batch: TransferBatch{States: states[:0]}, wire: wire[:0], lastFrom: m.lastFrom}
	s.xfers.Put(m)
}

// transfer passes a decoded Transfer request that passes check to the
// handler: Replicate for a replication batch when the handler is a
// ReplicaHandler, Transfer otherwise.
func (s *peerServer) transfer(ctx context.Context, m *xferRequest) (*xferResponse, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	b := m.batch
	if len(b.States) > 0 || len(b.Penalties) > 0 || b.Done {
		b.Sender, _ = PeerMember(ctx)
		if b.Replica {
			needFull, err := s.replicate(ctx, b)
			if err != nil {
				return nil, err
			}
			if len(needFull) > 0 {
				return &xferResponse{needFull: needFull}, nil
			}
			return &s.noNeedFull, nil
		}
		if err := s.h.Transfer(ctx, b); err != nil {
			return nil, statusFromError(err)
		}
	}
	return &s.noNeedFull, nil
}

// invalidItem is a batch item rejected before the handler saw it.
type invalidItem struct {
	index int
	err   error
}

// decodeChecks converts and validates a batch. It returns the valid checks in
// order and the rejected items with their original index.
func decodeChecks(in []*pb.Check, maxKeyLen int) ([]Check, []invalidItem) {
	checks := make([]Check, 0, len(in))
	var invalid []invalidItem
	for i, m := range in {
		c, err := checkFromWire(m)
		if err == nil {
			err = ValidateCheck(c, maxKeyLen)
		}
		if err != nil {
			invalid = append(invalid, invalidItem{index: i, err: err})
			continue
		}
		checks = append(checks, c)
	}
	return checks, invalid
}

// mergeInvalid interleaves the handler's results for the valid items with the
// rejections, giving n results in request order.
func mergeInvalid(valid []Result, invalid []invalidItem, n int) []Result {
	if len(invalid) == 0 {
		return valid
	}
	out := make([]Result, n)
	v, k := 0, 0
	for i := range out {
		if k < len(invalid) && invalid[k].index == i {
			out[i] = Result{Code: CodeInvalidArgument, Message: ClientMessage(invalid[k].err)}
			k++
			continue
		}
		out[i] = valid[v]
		v++
	}
	return out
}

func batchTooLarge(field string, n, limit int) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf("%s: batch of %d items is above the maximum of %d", ErrInvalidCheck.Error()+": "+field, n, limit))
}
