// Package daemon is ringlimitd: the command line, the wiring of a node.Node with
// its HTTP/JSON API and Prometheus metrics, the graceful stop, and the
// healthcheck subcommand used by container healthchecks.
//
// Data flow: Main parses flags and RINGLIMIT_* variables into a config.Config,
// Start builds the metrics registry, starts the node (which serves the gRPC
// Peer service on --peer-port and joins the seeds), serves the gRPC Limiter
// service on --grpc-port and the HTTP API on its own listener. When the context given to Main ends (SIGTERM or SIGINT in the
// binary), Shutdown stops the HTTP server, then closes the node (leave the
// cluster, hand its keys to their new owners), all within
// config.Config.ShutdownTimeout.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/config"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/httpapi"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/metrics"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/transport"
)

// Exit statuses of Main.
const (
	// ExitOK: the daemon stopped gracefully, or the healthcheck passed.
	ExitOK = 0
	// ExitFailure: the daemon could not start or stop cleanly, or the healthcheck
	// failed.
	ExitFailure = 1
	// ExitUsage: invalid flags, environment or configuration files.
	ExitUsage = 2
)

// exitError carries the exit status of an error returned through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Main runs ringlimitd with args (without the program name), reading the
// environment through lookupEnv, and returns the exit status. The daemon runs
// until ctx ends, then stops gracefully. Logs go to stderr as JSON (or text).
func Main(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	root := newRootCommand(ctx, lookupEnv, stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitUsage // cobra's own errors (unknown flag or command) are usage errors
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	fmt.Fprintf(stderr, "ringlimitd: %v\n", err)
	if code == ExitUsage {
		fmt.Fprintln(stderr, "run 'ringlimitd --help' for the flags and their RINGLIMIT_* variables")
	}
	return code
}

func newRootCommand(ctx context.Context, lookupEnv func(string) (string, bool), stderr io.Writer) *cobra.Command {
	cfg := config.Default()
	root := &cobra.Command{
		Use:   "ringlimitd",
		Short: "ringlimit daemon: a distributed rate-limiter cluster member",
		Long: `ringlimitd runs one member of a ringlimit cluster. It serves the public gRPC
Limiter service on --grpc-port, the internal Peer service (cluster members only,
mutual TLS unless --insecure) on --peer-port, and on --http-port:

  POST /v1/check    {"key","algorithm","limit","period"|"period_ns","burst","hits","created_at_unix_ns"}
  GET  /v1/members  the members this node sees
  GET  /metrics     Prometheus metrics
  GET  /healthz     200 while the process runs
  GET  /readyz      200 once the node serves checks, 503 otherwise

Every flag can also be set by an environment variable: RINGLIMIT_ followed by the
flag name upper-cased with dashes as underscores (--gossip-port: RINGLIMIT_GOSSIP_PORT).
A flag on the command line wins over the variable, which wins over the default.
SIGTERM or SIGINT stops gracefully: HTTP drain, leave the cluster, hand keys off.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.ApplyEnv(cmd.Flags(), lookupEnv); err != nil {
				return &exitError{ExitUsage, err}
			}
			if err := cfg.Validate(); err != nil {
				return &exitError{ExitUsage, err}
			}
			return run(ctx, cfg, stderr)
		},
	}
	cfg.Register(root.Flags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{ExitUsage, err}
	})
	root.AddCommand(newHealthcheckCommand(lookupEnv))
	return root
}

// NewLogger returns the daemon's logger writing to w at cfg's level and format.
func NewLogger(cfg config.Config, w io.Writer) (*slog.Logger, error) {
	level, err := cfg.Level()
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}

func run(ctx context.Context, cfg config.Config, stderr io.Writer) error {
	logger, err := NewLogger(cfg, stderr)
	if err != nil {
		return &exitError{ExitUsage, err}
	}
	d, err := Start(cfg, logger)
	if err != nil {
		code := ExitFailure
		if errors.Is(err, config.ErrInvalid) || errors.Is(err, node.ErrInvalidConfig) {
			code = ExitUsage
		}
		return &exitError{code, err}
	}
	var serveErr error
	select {
	case <-ctx.Done():
		logger.Info("stopping", "cause", context.Cause(ctx), "timeout", cfg.ShutdownTimeout.String())
	case serveErr = <-d.Err():
		logger.Error("http server failed, stopping", "error", serveErr)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	start := time.Now()
	err = d.Shutdown(sctx)
	if err != nil {
		logger.Error("stopped uncleanly", "error", err, "took", time.Since(start).String())
		return &exitError{ExitFailure, err}
	}
	logger.Info("stopped", "took", time.Since(start).String())
	if serveErr != nil {
		return &exitError{ExitFailure, serveErr}
	}
	return nil
}

// Daemon is a running node with its HTTP server.
type Daemon struct {
	cfg     config.Config
	log     *slog.Logger
	node    *node.Node
	metrics *metrics.Metrics
	ln      net.Listener
	srv     *http.Server
	grpcLn  net.Listener
	grpcSrv *transport.Server
	errc    chan error
}

// Start starts a node configured by cfg (which must have passed Validate) and
// serves the HTTP API. It returns once both listen; the node joins its seeds
// before New returns. On error nothing is left running.
func Start(cfg config.Config, logger *slog.Logger) (*Daemon, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{cfg: cfg, log: logger, errc: make(chan error, 1)}
	var n *node.Node
	d.metrics = metrics.New(func() node.Stats {
		if n == nil {
			return node.Stats{}
		}
		return n.Stats()
	})
	nc, err := cfg.NodeConfig(logger.With("component", "node"), d.metrics)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr())
	if err != nil {
		return nil, fmt.Errorf("http listener: %w", err)
	}
	grpcLn, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.GRPCPort)))
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("grpc listener: %w", err)
	}
	n, err = node.New(nc)
	if err != nil {
		ln.Close()
		grpcLn.Close()
		return nil, fmt.Errorf("start node: %w", err)
	}
	d.node, d.ln, d.grpcLn = n, ln, grpcLn
	// The public Limiter service only: Peer RPCs here answer Unimplemented.
	d.grpcSrv = transport.NewLimiterServer(transport.ServerConfig{MaxKeyLen: nc.MaxKeyLen}, limiter{n})
	go func() {
		if err := d.grpcSrv.Serve(grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			select {
			case d.errc <- fmt.Errorf("grpc server: %w", err):
			default:
			}
		}
	}()
	h := httpapi.NewHandler(limiter{n}, httpapi.Options{
		Logger: logger.With("component", "http"),
		Extra:  map[string]http.Handler{"/metrics": d.metrics.Handler()},
	})
	d.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.errc <- err
		}
	}()
	logger.Info("started",
		"node", n.Name(), "http", ln.Addr().String(), "grpc", grpcLn.Addr().String(), "peer", n.PeerAddr(), "gossip", n.GossipAddr(),
		"insecure", n.Insecure(),
		"join", cfg.Join, "cluster_label", cfg.ClusterLabel, "owner_unreachable", cfg.OwnerUnreachable,
		"accept_caller_timestamps", cfg.AcceptCallerTimestamps, "gossip_encrypted", cfg.GossipKeyFile != "",
		"mtls", cfg.TLSCertFile != "", "gossip_profile", cfg.GossipProfile)
	return d, nil
}

// GRPCAddr returns the address the gRPC Limiter server listens on (host:port).
func (d *Daemon) GRPCAddr() string { return d.grpcLn.Addr().String() }

// HTTPAddr returns the address the HTTP server listens on (host:port).
func (d *Daemon) HTTPAddr() string { return d.ln.Addr().String() }

// Node returns the daemon's node.
func (d *Daemon) Node() *node.Node { return d.node }

// Metrics returns the daemon's metrics.
func (d *Daemon) Metrics() *metrics.Metrics { return d.metrics }

// Err delivers the HTTP server's error if it stops serving on its own.
func (d *Daemon) Err() <-chan error { return d.errc }

// Shutdown stops the HTTP server (in-flight requests finish), then closes the
// node (leave, hand off, stop). It returns when both are done or ctx ends,
// whichever is first; in the latter case the node may still be closing. Safe to
// call twice.
func (d *Daemon) Shutdown(ctx context.Context) error {
	httpErr := d.srv.Shutdown(ctx)
	if httpErr != nil {
		httpErr = fmt.Errorf("http shutdown: %w", httpErr)
		_ = d.srv.Close()
	}
	grpcDone := make(chan struct{})
	go func() { d.grpcSrv.GracefulStop(); close(grpcDone) }()
	select {
	case <-grpcDone:
	case <-ctx.Done():
		d.grpcSrv.Stop()
		<-grpcDone
	}
	done := make(chan error, 1)
	go func() { done <- d.node.Close() }()
	select {
	case err := <-done:
		if err != nil {
			err = fmt.Errorf("node close: %w", err)
		}
		return errors.Join(httpErr, err)
	case <-ctx.Done():
		return errors.Join(httpErr, fmt.Errorf("node close: %w", context.Cause(ctx)))
	}
}

// limiter adapts *node.Node to httpapi.Limiter.
type limiter struct{ n *node.Node }

func (l limiter) Check(ctx context.Context, c transport.Check) (transport.Result, error) {
	r, err := l.n.Check(ctx, c)
	if errors.Is(err, node.ErrTooManyKeys) {
		err = fmt.Errorf("%w: %w", transport.ErrUnavailable, err) // 503: capacity, not the request
	}
	return r, err
}

func (l limiter) Ready() bool { return l.n.Ready() }

func (l limiter) Members() []httpapi.Member {
	ms := l.n.Members()
	out := make([]httpapi.Member, len(ms))
	for i, m := range ms {
		out[i] = httpapi.Member{Name: m.Name, Addr: m.Addr, GossipAddr: m.GossipAddr, ID: m.ID, Self: m.Self}
	}
	return out
}

func newHealthcheckCommand(lookupEnv func(string) (string, bool)) *cobra.Command {
	url := "http://127.0.0.1:8080/readyz"
	if p, ok := lookupEnv(config.EnvName("http-port")); ok && p != "" {
		url = "http://127.0.0.1:" + p + "/readyz"
	}
	if u, ok := lookupEnv(config.EnvName("healthcheck-url")); ok && u != "" {
		url = u
	}
	timeout := 3 * time.Second
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "exit 0 iff --url answers 200 (for container healthchecks; the image has no curl)",
		Long: `healthcheck GETs --url and exits 0 if it answers 200, 1 otherwise.
The default URL is http://127.0.0.1:$RINGLIMIT_HTTP_PORT/readyz (port 8080 when
unset); RINGLIMIT_HEALTHCHECK_URL overrides it.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := Healthcheck(cmd.Context(), url, timeout); err != nil {
				return &exitError{ExitFailure, err}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", url, "URL to GET")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "request timeout")
	return cmd
}

// Healthcheck GETs url and returns nil iff it answers 200 within timeout.
func Healthcheck(ctx context.Context, url string, timeout time.Duration) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s", url, strconv.Itoa(resp.StatusCode)+" "+http.StatusText(resp.StatusCode))
	}
	return nil
}
