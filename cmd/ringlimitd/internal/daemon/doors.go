package daemon

// The front doors: one table, one row per listener. What every door shares is
// written once: listening (Start), connection caps, the authentication
// deadline and failure throttling (package door, through the row's pool), TLS
// and caller authentication (wiring), serving and graceful shutdown (the
// server interface). Adding a door is its package plus one row here.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/auth"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/config"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/door"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/httpapi"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/policyfile"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/resp"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/rls"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/scope"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
	"github.com/ringlimit/ringlimit/transport"
	"github.com/ringlimit/ringlimit/transport/rotate"
)

// Names of the doors: log fields, the "door" label of the door metrics, the
// "listener" label of ringlimit_auth_failures_total.
const (
	doorRedis = "redis"
	doorHTTP  = "http"
	doorAdmin = "admin"
	doorGRPC  = "grpc"
)

// Limits of the admin door's own pool: a scraper and a prober, kept apart from
// the client doors so that a flood there leaves /readyz answering.
const (
	adminMaxConns      = 64
	adminMaxConnsPerIP = 16
)

// grpcMaxStreams bounds the concurrent RPCs of one client gRPC connection;
// grpc-go clients queue the ones over it.
const grpcMaxStreams = 1024

// frontDoor is one row of the door table.
type frontDoor struct {
	// name names the door in logs and metrics.
	name string
	// addr is the host:port to listen on; "" leaves the door closed.
	addr string
	// admin puts the door in the admin pool instead of the client pool.
	admin bool
	// open builds the door's server, with its TLS and authentication, on
	// its listener once the node runs; the server reports authentications
	// and refusals to ln.
	open func(w *wiring, ln *door.Listener) (server, error)

	ln  *door.Listener
	srv server
}

// server is a door's protocol server.
type server interface {
	// Serve answers connections on ln until Shutdown; nil after Shutdown.
	Serve(ln net.Listener) error
	// Shutdown stops accepting, lets in-flight requests finish until ctx
	// ends, then closes every connection.
	Shutdown(ctx context.Context) error
}

// doorTable lists the daemon's doors in the order they start and stop.
func doorTable(cfg config.Config) []*frontDoor {
	return []*frontDoor{
		{name: doorRedis, addr: cfg.RedisAddr(), open: openRedis},
		{name: doorHTTP, addr: cfg.HTTPAddr(), open: openHTTP},
		{name: doorAdmin, addr: cfg.AdminAddr(), admin: true, open: openAdmin},
		{name: doorGRPC, addr: cfg.GRPCAddr(), open: openGRPC},
	}
}

// openPools builds the client pool from the configuration (its MaxConns
// default from the file-descriptor limit) and the admin pool: a small fixed
// cap, where any request counts as authenticated (the admin API has no
// credentials).
func (d *Daemon) openPools() error {
	lim := door.Limits{
		MaxConns:        d.cfg.MaxConns,
		MaxConnsPerIP:   d.cfg.MaxConnsPerIP,
		AuthTimeout:     d.cfg.AuthTimeout,
		MaxAuthFailures: d.cfg.MaxAuthFailures,
	}
	var err error
	if d.clients, err = door.NewPool(lim, fdLimit(), d.metrics.Registry(), "client"); err != nil {
		return fmt.Errorf("%w: %w", config.ErrInvalid, err)
	}
	d.admin, err = door.NewPool(door.Limits{
		MaxConns:      adminMaxConns,
		MaxConnsPerIP: adminMaxConnsPerIP,
		AuthTimeout:   d.cfg.AuthTimeout,
	}, fdLimit(), d.metrics.Registry(), "admin")
	return err
}

// wiring is what the doors share once the node runs: the checkers, the
// policy, TLS and caller authentication.
type wiring struct {
	d     *Daemon
	sec   config.Security
	nc    node.Config
	chk   checker
	lim   *policy.Limiter
	desc  transport.DescriptorHandler
	authn *auth.Authenticator // nil in insecure mode
	// scopes are the credentials' scopes: checks, and key operations (admin).
	scopes *scope.Scopes
}

// wire builds the checkers (the cluster, or Redis first), the descriptor
// policy and, in secure mode, the authenticator whose decisions reach the
// doors' pools and the metrics.
func (d *Daemon) wire(sec config.Security, nc node.Config) (*wiring, error) {
	w := &wiring{d: d, sec: sec, nc: nc}
	if src := d.node.TLSSource(); src != nil && sec.TLS != nil {
		// The client ports follow the node's material: a renewed certificate
		// or CA bundle applies to the next handshake.
		w.sec.TLS = rotate.ServerTLS(src, "h2", "http/1.1")
	}
	n := d.node
	scopes := scope.Default()
	if d.cfg.ClientScopesFile != "" {
		var err error
		if scopes, err = scope.Load(d.cfg.ClientScopesFile); err != nil {
			return nil, fmt.Errorf("%w: --client-scopes-file: %w", config.ErrInvalid, err)
		}
	}
	w.chk = limiter{n}
	var pchk policy.Checker = n // descriptors: the node, or Redis first
	if d.cfg.RedisPrimary != "" {
		fc, err := newFailoverChecker(n, d.cfg.RedisPrimary, d.cfg.RedisBudget)
		if err == nil {
			err = d.metrics.Registry().Register(fc.f.Collector())
		}
		if err != nil {
			return nil, fmt.Errorf("--redis-primary: %w", err)
		}
		w.chk, pchk, d.closeRedis = fc, fc.f, fc.client.Close
	}
	w.scopes = scopes
	// Every check within its caller's scope.
	w.chk = scopedChecker{checker: w.chk, scopes: scopes}
	pchk = scopedPolicy{next: pchk, scopes: scopes}
	// Descriptors: the policy file, or an empty policy (every domain unknown:
	// OK with no limit, as envoyproxy/ratelimit answers).
	var err error
	if d.cfg.PolicyFile != "" {
		d.policy, err = policyfile.Start(d.cfg.PolicyFile, pchk, d.metrics.Registry(), d.log.With("component", "policy"))
		if err != nil {
			return nil, fmt.Errorf("%w: policy file: %w", config.ErrInvalid, err)
		}
		w.lim = d.policy.Limiter()
		w.desc = descriptorHandler{w.lim}
	} else if w.lim, err = policy.NewLimiter(pchk, nil, nil); err != nil {
		return nil, err
	}
	if !d.cfg.Insecure {
		authLog := d.log.With("component", "auth")
		w.authn = auth.New(sec.Tokens, auth.Hooks{
			Accepted: func(listener, remote string) {
				if ln := d.listener(listener); ln != nil {
					ln.Authenticated(remote)
				}
			},
			Refused: func(listener, remote string, err error) { _ = d.refused(authLog, listener, remote, err) },
		})
	}
	return w, nil
}

// refused counts and logs a refused credential and throttles its connection.
// It reports whether the connection was closed for it.
func (d *Daemon) refused(log *slog.Logger, listener, remote string, err error) (closed bool) {
	d.metrics.AuthFailure(listener)
	log.Debug("caller refused", "listener", listener, "remote", remote, "error", err)
	if ln := d.listener(listener); ln != nil && ln.Refused(remote) {
		log.Info("connection closed after repeated refused credentials", "listener", listener, "remote", remote,
			"max_auth_failures", d.clients.Limits().MaxAuthFailures)
		return true
	}
	return false
}

func openRedis(w *wiring, ln *door.Listener) (server, error) {
	d := w.d
	rc := resp.Config{
		Checker: w.chk, Policy: w.lim, Logger: d.log.With("component", "resp"), Version: version(),
		MaxConns: d.clients.Limits().MaxConns, IdleTimeout: d.cfg.IdleTimeout,
		Keys: d.node, Admin: func(ctx context.Context) error { return w.scopes.Admin(callerName(ctx)) },
		OnAuth: func(remote string, ok bool) bool {
			if ok {
				ln.Authenticated(remote)
			}
			return false
		},
	}
	if w.authn != nil {
		authLog := d.log.With("component", "auth")
		rc.TLS = w.sec.TLS
		rc.Authenticate = func(_, password string) (string, bool) {
			return w.authn.Lookup(password)
		}
		rc.CallerContext = func(ctx context.Context, caller string) context.Context {
			return auth.WithIdentity(ctx, auth.Identity{Name: caller, Method: auth.MethodToken})
		}
		rc.OnAuth = func(remote string, ok bool) bool {
			if ok {
				ln.Authenticated(remote)
				return false
			}
			return d.refused(authLog, doorRedis, remote, auth.ErrUnauthenticated)
		}
	}
	srv, err := resp.New(rc)
	if err != nil {
		return nil, err
	}
	return respServer{srv}, nil
}

func openHTTP(w *wiring, ln *door.Listener) (server, error) {
	d := w.d
	extra := map[string]http.Handler{}
	if d.policy != nil {
		extra["/v1/check_descriptors"] = d.policy.Handler()
	}
	// Key operations: callers whose scope has the admin permission only.
	for path, h := range httpapi.NewKeysHandler(d.node, func(ctx context.Context) error { return w.scopes.Admin(callerName(ctx)) }, d.log.With("component", "http")) {
		extra[path] = h
	}
	var h http.Handler = httpapi.NewHandler(w.chk, httpapi.Options{Logger: d.log.With("component", "http"), Extra: extra})
	if w.authn == nil {
		h = markAuthenticated(ln, h)
	} else {
		h = w.authn.HTTP(h, func(w http.ResponseWriter, _ *http.Request, err error) {
			// An unauthenticated caller keeps no connection: HTTP/1 closes
			// after this answer, HTTP/2 sends GOAWAY.
			w.Header().Set("Connection", "close")
			httpapi.WriteError(w, http.StatusUnauthorized, auth.ClientMessage(err))
		})
	}
	srv := newHTTPServer(h, d.cfg.IdleTimeout, d.log)
	if w.authn != nil {
		srv.TLSConfig = w.sec.TLS
	}
	return httpServer{srv}, nil
}

func openAdmin(w *wiring, ln *door.Listener) (server, error) {
	d := w.d
	h := httpapi.NewAdminHandler(d.node, httpapi.AdminOptions{
		Logger:   d.log.With("component", "admin"),
		Extra:    map[string]http.Handler{"/metrics": d.metrics.Handler()},
		Insecure: d.cfg.Insecure,
	})
	return httpServer{newHTTPServer(markAuthenticated(ln, h), d.cfg.IdleTimeout, d.log)}, nil
}

func openGRPC(w *wiring, ln *door.Listener) (server, error) {
	d := w.d
	opts := []grpc.ServerOption{
		// The TLS handshake's deadline; the pool's AuthTimeout bounds it too.
		grpc.ConnectionTimeout(d.cfg.AuthTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: d.cfg.IdleTimeout,
			Time:              transport.DefaultKeepaliveTime,
			Timeout:           transport.DefaultKeepaliveTimeout,
		}),
		grpc.MaxConcurrentStreams(grpcMaxStreams),
	}
	if w.authn != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(unauthenticatedHealth(w.authn.UnaryInterceptor())),
			grpc.ChainStreamInterceptor(unauthenticatedHealthStream(w.authn.StreamInterceptor())))
	} else {
		mark := func(ctx context.Context) {
			if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
				ln.Authenticated(p.Addr.String())
			}
		}
		opts = append(opts,
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				mark(ctx)
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				mark(ss.Context())
				return h(srv, ss)
			}))
	}
	rlsSrv, err := rls.New(w.lim)
	if err != nil {
		return nil, err
	}
	// The public Limiter service only: Peer RPCs here answer Unimplemented.
	var tlsCfg = w.sec.TLS
	if w.authn == nil {
		tlsCfg = nil
	}
	srv := transport.NewLimiterServer(transport.ServerConfig{TLS: tlsCfg, MaxKeyLen: w.nc.MaxKeyLen, ServerOptions: opts, Descriptors: w.desc}, adminLimiter{LimiterHandler: node.LimiterHandler(w.chk), n: d.node, scopes: w.scopes})
	ratelimitv3.RegisterRateLimitServiceServer(srv.GRPCServer(), rlsSrv)
	d.startHealth(srv.GRPCServer())
	return grpcServer{srv}, nil
}

// markAuthenticated marks a connection authenticated at its first request:
// for doors without credentials (admin, insecure mode) a request is what a
// credential is elsewhere.
func markAuthenticated(ln *door.Listener, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ln.Authenticated(r.RemoteAddr)
		h.ServeHTTP(w, r)
	})
}

func newHTTPServer(h http.Handler, idle time.Duration, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// httpServer serves HTTP, over TLS when the server has a TLS configuration.
type httpServer struct{ srv *http.Server }

func (s httpServer) Serve(ln net.Listener) error {
	var err error
	if s.srv.TLSConfig != nil {
		err = s.srv.ServeTLS(ln, "", "")
	} else {
		err = s.srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s httpServer) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	return err
}

// grpcServer stops gracefully until ctx ends, then at once.
type grpcServer struct{ srv *transport.Server }

func (s grpcServer) Serve(ln net.Listener) error {
	if err := s.srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

func (s grpcServer) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.srv.GracefulStop(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.srv.Stop()
		<-done
		return nil
	}
}

// respServer closes every connection at Shutdown (a RESP command in flight
// is not waited for).
type respServer struct{ srv *resp.Server }

func (s respServer) Serve(ln net.Listener) error    { return s.srv.Serve(ln) }
func (s respServer) Shutdown(context.Context) error { return s.srv.Close() }

// callerName is the name of the credential that authenticated the request
// of ctx ("" for none: insecure mode).
func callerName(ctx context.Context) string {
	id, _ := auth.FromContext(ctx)
	return id.Name
}

// scopedChecker refuses the direct checks outside their caller's scope.
type scopedChecker struct {
	checker
	scopes *scope.Scopes
}

func (s scopedChecker) Check(ctx context.Context, c node.Check) (node.Decision, error) {
	if err := s.scopes.Direct(callerName(ctx), c.Key, c.Limit); err != nil {
		return node.Decision{}, err
	}
	return s.checker.Check(ctx, c)
}

// scopedPolicy refuses the descriptor checks outside their caller's scope
// (its domains and key cap; the policy file chose the limit).
type scopedPolicy struct {
	next   policy.Checker
	scopes *scope.Scopes
}

func (s scopedPolicy) AllowPenalized(ctx context.Context, key string, l algo.Limit, hits int64, p node.Penalty) (node.Decision, error) {
	domain, _ := scope.DomainOf(key)
	if err := s.scopes.Policy(callerName(ctx), domain, key, l); err != nil {
		return node.Decision{}, err
	}
	return s.next.AllowPenalized(ctx, key, l, hits, p)
}
