package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
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
	// stats handlers); later options win.
	ServerOptions []grpc.ServerOption
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

// NewServer returns a gRPC server with the internal Peer service backed by peer
// and the public Limiter service backed by lim registered; a nil handler leaves
// its service unregistered (its calls fail with Unimplemented). The caller
// serves it (Serve on a listener) and stops it (GracefulStop or Stop).
//
// Both services validate every check (ValidateCheck with cfg.MaxKeyLen) and the
// batch size before calling a handler: malformed input is answered with
// codes.InvalidArgument and a message naming the field, as a whole for Check,
// Transfer and oversized batches, per item (CodeInvalidArgument) inside
// CheckBatch and Forward so one bad item does not fail its batch. Handler errors
// wrapping ErrInvalidCheck or algo.ErrInvalidLimit become InvalidArgument,
// errors wrapping ErrUnavailable become Unavailable, context errors become
// DeadlineExceeded or Canceled, and others Internal.
func NewServer(cfg ServerConfig, peer PeerHandler, lim LimiterHandler) *grpc.Server {
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
		// Reuse a goroutine per core for RPCs instead of one new goroutine each.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	opts = append(opts, cfg.ServerOptions...)
	s := grpc.NewServer(opts...)
	if peer != nil {
		pb.RegisterPeerServer(s, &peerServer{cfg: cfg, h: peer})
	}
	if lim != nil {
		pb.RegisterLimiterServer(s, &limiterServer{cfg: cfg, h: lim})
	}
	return s
}

// peerServer implements the Peer service on top of a PeerHandler.
type peerServer struct {
	pb.UnimplementedPeerServer
	cfg ServerConfig
	h   PeerHandler
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
	var results []Result
	if len(checks) > 0 {
		results = s.h.Forward(ctx, checks)
		if len(results) != len(checks) {
			return nil, status.Errorf(codes.Internal, "transport: peer handler returned %d results for %d checks", len(results), len(checks))
		}
	}
	results = mergeInvalid(results, invalid, len(in))
	return &pb.ForwardResponse{Results: resultsToWire(results)}, nil
}

func (s *peerServer) Transfer(ctx context.Context, req *pb.TransferRequest) (*pb.TransferResponse, error) {
	in := req.GetStates()
	if len(in) > s.cfg.MaxBatch {
		return nil, batchTooLarge("states", len(in), s.cfg.MaxBatch)
	}
	states := make([]KeyState, len(in))
	for i, m := range in {
		st, err := keyStateFromWire(m)
		if err == nil {
			err = validateKeyState(st, s.cfg.MaxKeyLen)
		}
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "states[%d]: %v", i, err)
		}
		states[i] = st
	}
	if len(states) > 0 || req.GetDone() {
		b := TransferBatch{From: req.GetFrom(), RingDigest: req.GetRingDigest(), States: states, Done: req.GetDone()}
		if err := s.h.Transfer(ctx, b); err != nil {
			return nil, statusFromError(err)
		}
	}
	return &pb.TransferResponse{}, nil
}

// limiterServer implements the public Limiter service on top of a LimiterHandler.
type limiterServer struct {
	pb.UnimplementedLimiterServer
	cfg ServerConfig
	h   LimiterHandler
}

func (s *limiterServer) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	if req.GetCheck() == nil {
		return nil, status.Error(codes.InvalidArgument, ErrInvalidCheck.Error()+": check is missing")
	}
	c, err := checkFromWire(req.GetCheck())
	if err == nil {
		err = ValidateCheck(c, s.cfg.MaxKeyLen)
	}
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	r, err := s.h.Check(ctx, c)
	if err != nil {
		return nil, statusFromError(err)
	}
	if r.Code != CodeOK {
		return nil, statusFromResult(r)
	}
	d := &pb.Decision{}
	decisionToWire(r, d)
	return &pb.CheckResponse{Decision: d}, nil
}

func (s *limiterServer) CheckBatch(ctx context.Context, req *pb.CheckBatchRequest) (*pb.CheckBatchResponse, error) {
	in := req.GetChecks()
	if len(in) > s.cfg.MaxBatch {
		return nil, batchTooLarge("checks", len(in), s.cfg.MaxBatch)
	}
	if len(in) == 0 {
		return &pb.CheckBatchResponse{}, nil
	}
	checks, invalid := decodeChecks(in, s.cfg.MaxKeyLen)
	results := make([]Result, len(checks))
	check := func(i int) {
		r, err := s.h.Check(ctx, checks[i])
		if err != nil {
			r = itemResultFromError(err)
		}
		results[i] = r
	}
	workers := min(s.cfg.CheckBatchConcurrency, len(checks))
	if workers <= 1 {
		for i := range checks {
			check(i)
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= len(checks) {
						return
					}
					check(i)
				}
			})
		}
		wg.Wait()
	}
	results = mergeInvalid(results, invalid, len(in))
	return &pb.CheckBatchResponse{Results: resultsToWire(results)}, nil
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
			out[i] = Result{Code: CodeInvalidArgument, Message: invalid[k].err.Error()}
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
