// Package daemon is ringlimitd: the command line, the wiring of a node.Node with
// its HTTP/JSON API and Prometheus metrics, the graceful stop, and the
// healthcheck subcommand used by container healthchecks.
//
// Data flow: Main parses flags and RINGLIMIT_* variables into a config.Config,
// Start reads the security material (--certs-dir, --gossip-key-file,
// --client-token-file; refused start without it unless --insecure), builds
// the metrics registry, starts the node (which serves the internal Peer
// service on --peer-port and joins the seeds), and serves four listeners of
// its own: the gRPC Limiter service (--grpc-port) and the HTTP/JSON client API
// (--http-port), both TLS with the node certificate and caller authentication
// (client certificate or bearer token, package auth) in secure mode; and the
// read-only admin API (--admin-port: /metrics, /healthz, /readyz). The gRPC port
// also serves grpc.health.v1 (NOT_SERVING until the node is ready, as /readyz;
// no caller authentication, health.go) and Envoy's RateLimitService (package
// rls) from --policy-file, and
// --redis-port, when set, serves the Redis protocol (package resp: redis-cell's
// CL.THROTTLE), TLS and AUTH with a client token in secure mode. With
// --redis-primary the checks of every client port are decided on Redis first
// and on the cluster while Redis fails (node/failover). When the
// context given to Main ends (SIGTERM or SIGINT in the binary), Shutdown stops
// the client and admin servers, then closes the node (leave the cluster, hand
// its keys to their new owners), all within config.Config.ShutdownTimeout.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/auth"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/config"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/door"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/httpapi"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/metrics"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/policyfile"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/transport/rotate"
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

// Main runs ringlimitd with args (without the program name; nil means none,
// never the process's own arguments), reading the
// environment through lookupEnv, and returns the exit status. The daemon runs
// until ctx ends, then stops gracefully. Logs go to stderr as JSON (or text).
func Main(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	root := newRootCommand(ctx, lookupEnv, stderr)
	if args == nil {
		args = []string{} // cobra reads the process's os.Args for nil args
	}
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
		Long: `ringlimitd runs one member of a ringlimit cluster. Listeners:

  --grpc-port   gRPC Limiter service (Check, CheckBatch)       TLS + client cert or bearer token
                grpc.health.v1 (readiness, as /readyz)         TLS, no caller authentication
  --http-port   POST /v1/check, GET /v1/members                TLS + client cert or bearer token
  --peer-port   gRPC Peer service, cluster members only        mutual TLS, member certificates
  --gossip-port memberlist (TCP+UDP)                           encrypted with --gossip-key-file
  --admin-port  GET /metrics, /healthz, /readyz (read-only)    none: firewall it

  POST /v1/check {"key"|"key_base64","algorithm","limit","period"|"period_ns","burst","hits","created_at_unix_ns"}

It runs secure unless --insecure: --certs-dir (ca.crt, node.crt, node.key; made
by 'ringlimit cert') or --tls-ca-file, --tls-cert-file and --tls-key-file
(cert-manager's ca.crt, tls.crt, tls.key), and --gossip-key-file are required, and callers present a
client certificate (ringlimit cert create-client) or a token listed in
--client-token-file. --insecure turns every one of those checks off.

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
	// SIGHUP reloads --policy-file, the TLS files and --client-token-file. Registered before Start, so a SIGHUP that
	// arrives once the daemon has logged "started" never takes the default
	// action (exit).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	d, err := Start(cfg, logger)
	if err != nil {
		code := ExitFailure
		if errors.Is(err, config.ErrInvalid) || errors.Is(err, node.ErrInvalidConfig) {
			code = ExitUsage
		}
		return &exitError{code, err}
	}
	// Reloads run apart from this loop, one at a time, coalesced: a reload
	// that hangs (bounded by policyfile.ReloadTimeout) never keeps SIGTERM
	// from stopping the daemon.
	reload := make(chan struct{}, 1)
	defer close(reload)
	go func() {
		for range reload {
			_ = d.ReloadPolicy()   // a failure is logged and counted; the old policy stays
			_ = d.node.ReloadTLS() // likewise: the old TLS material stays
			_ = d.ReloadTokens()   // likewise: the old tokens stay
		}
	}()
	var serveErr error
wait:
	for {
		select {
		case <-ctx.Done():
			logger.Info("stopping", "cause", context.Cause(ctx), "timeout", cfg.ShutdownTimeout.String())
			break wait
		case serveErr = <-d.Err():
			logger.Error("a server failed, stopping", "error", serveErr)
			break wait
		case <-hup:
			select {
			case reload <- struct{}{}:
			default: // one is pending already
			}
		}
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

// Daemon is a running node with its client and admin servers.
type Daemon struct {
	cfg     config.Config
	log     *slog.Logger
	node    *node.Node
	metrics *metrics.Metrics
	// doors are the listeners, in the order Start opens them and Shutdown
	// stops them (see doorTable).
	doors []*frontDoor
	// clients is the connection pool the client doors share; admin the
	// admin door's own.
	clients, admin *door.Pool
	tls            bool
	errc           chan error
	// closeRedis closes the --redis-primary client, nil without it.
	closeRedis func() error
	// policy is the --policy-file watcher, nil without one.
	policy *policyfile.Watcher
	// health serves grpc.health.v1 on the client gRPC port (health.go).
	health                 *healthService
	healthStop, healthDone chan struct{}
	healthOnce             sync.Once
	// authn authenticates the client ports' callers (nil when insecure);
	// watchStop ends the watch of --client-token-file.
	authn     *auth.Authenticator
	watchStop chan struct{}
	watchOnce sync.Once
}

// Start starts a node configured by cfg (which must have passed Validate) and
// serves its front doors (doorTable). It returns once all listen; the node
// joins its seeds before New returns. On error nothing is left running.
func Start(cfg config.Config, logger *slog.Logger) (*Daemon, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{cfg: cfg, log: logger, errc: make(chan error, 4), tls: !cfg.Insecure}
	sec, err := cfg.Security()
	if err != nil {
		return nil, err
	}
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
	if err := d.openPools(); err != nil {
		return nil, err
	}
	d.doors = doorTable(cfg)
	closeAll := func() {
		for _, fd := range d.doors {
			if fd.ln != nil {
				fd.ln.Close()
			}
		}
	}
	for _, fd := range d.doors {
		if fd.addr == "" {
			continue // --redis-port not set
		}
		ln, err := net.Listen("tcp", fd.addr)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("%s listener: %w", fd.name, err)
		}
		pool := d.clients
		if fd.admin {
			pool = d.admin
		}
		fd.ln = pool.Listen(fd.name, ln)
	}
	n, err = node.New(nc)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("start node: %w", err)
	}
	d.node = n
	fail := func(err error) (*Daemon, error) {
		d.stopWatch()
		d.stopHealth()
		closeAll()
		n.Abort()
		return nil, err
	}
	w, err := d.wire(sec, nc)
	if err != nil {
		return fail(err)
	}
	d.authn, d.watchStop = w.authn, make(chan struct{})
	if d.authn != nil && cfg.ClientTokenFile != "" {
		if err := rotate.Watch([]string{cfg.ClientTokenFile}, d.watchStop, logger, func() { _ = d.ReloadTokens() }); err != nil {
			return fail(fmt.Errorf("--client-token-file: %w", err))
		}
	}
	for _, fd := range d.doors {
		if fd.ln == nil {
			continue
		}
		if fd.srv, err = fd.open(w, fd.ln); err != nil {
			return fail(fmt.Errorf("%s: %w", fd.name, err))
		}
	}
	for _, fd := range d.doors {
		if fd.srv != nil {
			go func() {
				if err := fd.srv.Serve(fd.ln); err != nil {
					d.report(fmt.Errorf("%s server: %w", fd.name, err))
				}
			}()
		}
	}
	for _, w := range sec.Warnings {
		logger.Warn("secret file too open", "problem", w)
	}
	if cfg.Insecure {
		logger.Warn("running INSECURE (--insecure): no TLS and no caller authentication on the gRPC and HTTP ports, "+
			"no TLS or admission handshake between peers; anyone who reaches a port can check keys, read the members, "+
			"or forward checks and hand off key states to this node",
			"grpc", d.GRPCAddr(), "http", d.HTTPAddr(), "peer", n.PeerAddr(), "gossip", n.GossipAddr(),
			"gossip_encrypted", cfg.GossipKeyFile != "")
	}
	lim := d.clients.Limits()
	logger.Info("started",
		"node", n.Name(), "grpc", d.GRPCAddr(), "http", d.HTTPAddr(), "admin", d.AdminAddr(),
		"redis", d.RedisAddr(), "policy_file", cfg.PolicyFile, "redis_primary", cfg.RedisPrimary != "",
		"peer", n.PeerAddr(), "gossip", n.GossipAddr(), "insecure", cfg.Insecure, "client_tokens", sec.Tokens.Len(),
		"join", cfg.Join, "cluster_label", cfg.ClusterLabel, "owner_unreachable", cfg.OwnerUnreachable,
		"accept_caller_timestamps", cfg.AcceptCallerTimestamps, "gossip_profile", cfg.GossipProfile,
		"max_conns", lim.MaxConns, "max_conns_per_ip", lim.MaxConnsPerIP)
	return d, nil
}

func (d *Daemon) report(err error) {
	select {
	case d.errc <- err:
	default:
	}
}

// addr returns the address door name listens on, "" when it is off.
func (d *Daemon) addr(name string) string {
	for _, fd := range d.doors {
		if fd.name == name && fd.ln != nil {
			return fd.ln.Addr().String()
		}
	}
	return ""
}

// listener returns door name's listener, nil when it is off.
func (d *Daemon) listener(name string) *door.Listener {
	for _, fd := range d.doors {
		if fd.name == name {
			return fd.ln
		}
	}
	return nil
}

// GRPCAddr returns the address the gRPC Limiter server listens on (host:port).
func (d *Daemon) GRPCAddr() string { return d.addr(doorGRPC) }

// TLS reports whether the gRPC and HTTP client ports serve TLS (secure mode).
func (d *Daemon) TLS() bool { return d.tls }

// HTTPAddr returns the address the HTTP client API listens on (host:port).
func (d *Daemon) HTTPAddr() string { return d.addr(doorHTTP) }

// RedisAddr returns the address the Redis-protocol server listens on
// (host:port), "" without --redis-port.
func (d *Daemon) RedisAddr() string { return d.addr(doorRedis) }

// ReloadPolicy reloads --policy-file (what SIGHUP does); without one it does
// nothing. A file that fails to load keeps the previous policy and is returned.
func (d *Daemon) ReloadPolicy() error {
	if d.policy == nil {
		return nil
	}
	return d.policy.Reload()
}

// ReloadTokens reads --client-token-file again (what a change of the file
// and SIGHUP do): its tokens replace the previous ones for every request
// authenticated from then on (a Redis-protocol connection keeps the AUTH it
// made). A file that fails to load (auth.LoadTokens: unreadable, invalid,
// empty) keeps the previous tokens, is logged at ERROR, counted
// (ringlimit_token_reloads_total{result="error"}) and returned. Without a
// token file or in insecure mode it does nothing.
func (d *Daemon) ReloadTokens() error {
	if d.authn == nil || d.cfg.ClientTokenFile == "" {
		return nil
	}
	t, err := auth.LoadTokens(d.cfg.ClientTokenFile)
	d.metrics.TokenReload(err)
	if err != nil {
		d.log.Error("client token file reload failed, keeping the previous tokens", "file", d.cfg.ClientTokenFile, "error", err)
		return err
	}
	d.authn.SetTokens(t)
	d.log.Info("client tokens reloaded", "file", d.cfg.ClientTokenFile, "tokens", t.Len())
	return nil
}

func (d *Daemon) stopWatch() {
	d.watchOnce.Do(func() {
		if d.watchStop != nil {
			close(d.watchStop)
		}
	})
}

// Policy returns the --policy-file watcher, nil without one.
func (d *Daemon) Policy() *policyfile.Watcher { return d.policy }

// AdminAddr returns the address the admin API listens on (host:port).
func (d *Daemon) AdminAddr() string { return d.addr(doorAdmin) }

// Node returns the daemon's node.
func (d *Daemon) Node() *node.Node { return d.node }

// Metrics returns the daemon's metrics.
func (d *Daemon) Metrics() *metrics.Metrics { return d.metrics }

// ClientPool returns the connection pool of the client doors (gRPC, HTTP,
// Redis).
func (d *Daemon) ClientPool() *door.Pool { return d.clients }

// Err delivers a server's error if one stops serving on its own.
func (d *Daemon) Err() <-chan error { return d.errc }

// Shutdown stops the front doors in table order (in-flight requests finish),
// then closes the node (leave, hand off, stop). It returns when all are done
// or ctx ends, whichever is first; in the latter case the node may still be
// closing. Safe to call twice.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.stopWatch()
	d.stopHealth()
	if d.policy != nil {
		_ = d.policy.Close()
	}
	var doorErr error
	for _, fd := range d.doors {
		if fd.srv == nil {
			continue
		}
		if err := fd.srv.Shutdown(ctx); err != nil {
			doorErr = errors.Join(doorErr, fmt.Errorf("%s shutdown: %w", fd.name, err))
		}
	}
	if d.closeRedis != nil {
		_ = d.closeRedis()
	}
	done := make(chan error, 1)
	go func() { done <- d.node.Close() }()
	select {
	case err := <-done:
		if err != nil {
			err = fmt.Errorf("node close: %w", err)
		}
		return errors.Join(doorErr, err)
	case <-ctx.Done():
		return errors.Join(doorErr, fmt.Errorf("node close: %w", context.Cause(ctx)))
	}
}

// version is the module version the binary was built from ("(devel)" for a
// build from a checkout).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return "unknown"
}

// checker decides the checks of every client port in node's terms (the gRPC
// Limiter gets it through node.LimiterHandler): limiter (the cluster) or
// failoverChecker (Redis first).
type checker interface {
	httpapi.Limiter
	node.Checker
}

// limiter adapts *node.Node to httpapi.Limiter.
type limiter struct{ n *node.Node }

func (l limiter) Check(ctx context.Context, c node.Check) (node.Decision, error) {
	return l.n.Check(ctx, c)
}

func (l limiter) Members() []httpapi.Member {
	ms := l.n.Members()
	out := make([]httpapi.Member, len(ms))
	for i, m := range ms {
		out[i] = httpapi.Member{Name: m.Name, Addr: m.Addr, GossipAddr: m.GossipAddr, ID: m.ID, Self: m.Self, State: m.State, Reason: m.Reason}
	}
	return out
}

func newHealthcheckCommand(lookupEnv func(string) (string, bool)) *cobra.Command {
	url := "http://127.0.0.1:" + strconv.Itoa(config.Default().AdminPort) + "/readyz"
	if p, ok := lookupEnv(config.EnvName("admin-port")); ok && p != "" {
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
The default URL is the admin port's http://127.0.0.1:$RINGLIMIT_ADMIN_PORT/readyz
(port 8082 when unset); RINGLIMIT_HEALTHCHECK_URL overrides it.`,
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
