// Package resp is ringlimitd's Redis-protocol front door: redis-cell's
// CL.THROTTLE (and RL.CHECK for every ringlimit algorithm) over RESP2, so a
// caller that limits with redis-cell today moves to ringlimit by changing an
// address.
//
// Data flow: a tidwall/redcon server reads each connection's requests; the
// limitedListener underneath refuses, per connection, requests over the
// argument, bulk-length and inline limits before redcon buffers them. redcon
// hands each command to handle, which also takes the rest of the pipeline that
// arrived in the same read (Conn.ReadPipeline). Consecutive checks of a pipeline
// are decided together: grouped by key (checks of one key run in order, one at
// a time), the groups run concurrently, so checks bound for one owner meet in
// the node's forwarding micro-batches. Every other command runs in order
// between such runs. The answers are written in request order and flushed once
// per read by redcon.
//
// Who may call it: in secure mode the listener serves TLS (the daemon's client
// certificate) and every connection must AUTH with a client token before any
// command but AUTH, HELLO and QUIT. What it can change: the rate-limit state of
// the keys it checks, nothing else (no Peer service, no admin command).
package resp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
)

// Defaults of Config's limits.
const (
	// DefaultMaxConns is the default Config.MaxConns (Redis's maxclients).
	DefaultMaxConns = 10000
	// DefaultMaxArgs is the default Config.MaxArgs: arguments per command.
	DefaultMaxArgs = 1024
	// DefaultMaxBulk is the default Config.MaxBulk: bytes per argument (64 KiB;
	// a key is at most 1024 bytes).
	DefaultMaxBulk = 64 << 10
	// DefaultMaxInline is the default Config.MaxInline: bytes per inline command
	// (Redis's PROTO_INLINE_MAX_SIZE).
	DefaultMaxInline = 64 << 10
	// DefaultMaxUnauthRequest is the default Config.MaxUnauthRequest: bytes
	// of one request before AUTH (an AUTH or HELLO with a token fits easily).
	DefaultMaxUnauthRequest = 4 << 10
	// DefaultCheckTimeout is the default Config.CheckTimeout.
	DefaultCheckTimeout = 5 * time.Second
	// DefaultPipelineConcurrency is the default Config.PipelineConcurrency.
	DefaultPipelineConcurrency = 256
	// redisVersion is what INFO and HELLO report as the Redis version whose
	// commands this server answers (RESP2 only).
	redisVersion = "7.0.0"
)

// Checker decides one check on the key's owner and validates it
// (node.Check.Validate); *node.Node implements it.
type Checker = node.Checker

// KeyDeleter drops a key's states and ban on its owner; *node.Node
// implements it.
type KeyDeleter interface {
	DeleteKey(ctx context.Context, key string) (bool, error)
}

// Config configures a Server. Zero limits take the documented defaults.
type Config struct {
	// Checker decides the checks. Required.
	Checker Checker
	// TLS, when not nil, makes the listener serve TLS (secure mode).
	TLS *tls.Config
	// Authenticate, when not nil, makes every connection AUTH (or HELLO ... AUTH)
	// first: it gets the username ("default" when AUTH has one argument) and the
	// password, and reports whether they are a valid client token, and the
	// caller's name (the token's). nil: no AUTH required (insecure mode).
	Authenticate func(user, password string) (caller string, ok bool)
	// CallerContext, when not nil, returns the context of a check made by the
	// authenticated caller (its name from Authenticate) from parent: the
	// daemon puts the caller's identity there for its scope.
	CallerContext func(parent context.Context, caller string) context.Context
	// OnAuth, when not nil, is called with the connection's remote address
	// after each AUTH (ok: accepted) and, without Authenticate, at a
	// connection's first command with ok true. It runs on the connection's
	// goroutine before the reply is written, so it may delay a refusal
	// (door.Listener.Refused does); when it returns true the refusal is the
	// connection's last answer: the rest of its pipeline is not run and the
	// connection is closed.
	OnAuth func(remote string, ok bool) (hangUp bool)
	// MaxUnauthRequest bounds the bytes of one request on a connection that
	// has not authenticated; over it the connection gets an error and is
	// closed. Default DefaultMaxUnauthRequest.
	MaxUnauthRequest int
	// IdleTimeout closes a connection that sends nothing for this long.
	// Default 0: never.
	IdleTimeout time.Duration
	// MaxConns bounds open connections; one more gets "ERR max number of clients
	// reached" and is closed. Default DefaultMaxConns.
	MaxConns int
	// MaxArgs, MaxBulk and MaxInline bound one request (arguments, bytes per
	// argument, bytes per inline command); a request over them gets an error reply
	// and its connection is closed, as Redis does. Defaults DefaultMaxArgs,
	// DefaultMaxBulk, DefaultMaxInline.
	MaxArgs, MaxBulk, MaxInline int
	// CheckTimeout bounds each check. Default DefaultCheckTimeout.
	CheckTimeout time.Duration
	// PipelineConcurrency bounds the keys of one pipeline decided at once.
	// Default DefaultPipelineConcurrency.
	PipelineConcurrency int
	// Logger receives connection errors at DEBUG. Default: discard.
	Logger *slog.Logger
	// Version is reported by INFO as ringlimit_version.
	Version string
	// Keys, when not nil, answers DEL key [key ...]: each key's states (every
	// algorithm) and ban are dropped on its owner and backup
	// (node.Node.DeleteKey), and DEL replies the number of keys that had
	// any. nil: DEL is an unknown command.
	Keys KeyDeleter
	// Admin, when not nil, decides whether the caller of ctx may run DEL
	// (the daemon: the scope's admin permission); its error is the reply.
	// nil: anyone authenticated may.
	Admin func(ctx context.Context) error
	// Policy, when not nil, answers RL.POLICY from the policy file. nil:
	// RL.POLICY replies an error naming --policy-file.
	Policy *policy.Limiter
}

// Server serves RESP on one listener. Create it with New, run Serve, stop it
// with Close.
type Server struct {
	cfg    Config
	srv    *redcon.Server
	conns  atomic.Int64
	nextID atomic.Int64
	start  time.Time
	port   int
}

// connState is the per-connection state kept in redcon's Conn context.
type connState struct {
	id     int64
	authed bool
	name   string
	remote string
	// lc is the connection's limitedConn (nil if redcon hands another).
	lc *limitedConn
	// seen: OnAuth was told of this connection (insecure mode).
	seen bool
	// caller is the authenticated caller's name ("" before AUTH or insecure).
	caller string
	// hangUp: OnAuth asked to close the connection after this answer.
	hangUp bool
}

// ErrConfig is returned by New for an invalid Config.
var ErrConfig = errors.New("resp: invalid config")

// New validates cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Checker == nil {
		return nil, fmt.Errorf("%w: Checker is nil", ErrConfig)
	}
	def := func(v *int, d int, name string) error {
		if *v == 0 {
			*v = d
		}
		if *v < 0 {
			return fmt.Errorf("%w: %s %d must be > 0", ErrConfig, name, *v)
		}
		return nil
	}
	for _, f := range []struct {
		v    *int
		d    int
		name string
	}{
		{&cfg.MaxConns, DefaultMaxConns, "MaxConns"},
		{&cfg.MaxArgs, DefaultMaxArgs, "MaxArgs"},
		{&cfg.MaxBulk, DefaultMaxBulk, "MaxBulk"},
		{&cfg.MaxInline, DefaultMaxInline, "MaxInline"},
		{&cfg.MaxUnauthRequest, DefaultMaxUnauthRequest, "MaxUnauthRequest"},
		{&cfg.PipelineConcurrency, DefaultPipelineConcurrency, "PipelineConcurrency"},
	} {
		if err := def(f.v, f.d, f.name); err != nil {
			return nil, err
		}
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = DefaultCheckTimeout
	}
	if cfg.IdleTimeout < 0 {
		return nil, fmt.Errorf("%w: IdleTimeout %v must be >= 0", ErrConfig, cfg.IdleTimeout)
	}
	if cfg.CheckTimeout < 0 {
		return nil, fmt.Errorf("%w: CheckTimeout %v must be > 0", ErrConfig, cfg.CheckTimeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, start: time.Now()}
	s.srv = redcon.NewServerNetwork("tcp", "", s.handle, s.accept, s.closed)
	if cfg.IdleTimeout > 0 {
		s.srv.SetIdleClose(cfg.IdleTimeout)
	}
	return s, nil
}

// Serve answers connections on ln until Close; it wraps ln in TLS when
// Config.TLS is set. It returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		s.port = a.Port
	}
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	ll := &limitedListener{Listener: ln, maxArgs: int64(s.cfg.MaxArgs), maxBulk: int64(s.cfg.MaxBulk), maxInline: int64(s.cfg.MaxInline)}
	if s.cfg.Authenticate != nil {
		ll.preAuth = int64(s.cfg.MaxUnauthRequest)
	}
	ln = ll
	return s.srv.Serve(ln)
}

// Close stops listening and closes every connection.
func (s *Server) Close() error {
	err := s.srv.Close()
	if err != nil && err.Error() == "not serving" {
		return nil
	}
	return err
}

// Conns returns the number of open connections.
func (s *Server) Conns() int { return int(s.conns.Load()) }

func (s *Server) accept(c redcon.Conn) bool {
	if s.conns.Add(1) > int64(s.cfg.MaxConns) {
		s.conns.Add(-1)
		c.WriteError("ERR max number of clients reached")
		return false
	}
	st := &connState{id: s.nextID.Add(1), authed: s.cfg.Authenticate == nil, remote: c.RemoteAddr()}
	st.lc, _ = c.NetConn().(*limitedConn)
	c.SetContext(st)
	return true
}

func (s *Server) closed(c redcon.Conn, err error) {
	s.conns.Add(-1)
	if err != nil {
		s.cfg.Logger.Debug("resp connection closed", "remote", c.RemoteAddr(), "err", err)
	}
}

// reply writes one answer.
type reply func(redcon.Conn)

func errReply(msg string) reply  { return func(c redcon.Conn) { c.WriteError(msg) } }
func statusReply(s string) reply { return func(c redcon.Conn) { c.WriteString(s) } }
func intReply(n int64) reply     { return func(c redcon.Conn) { c.WriteInt64(n) } }
func bulkReply(b []byte) reply   { return func(c redcon.Conn) { c.WriteBulk(b) } }
func bulkString(s string) reply  { return func(c redcon.Conn) { c.WriteBulkString(s) } }
func ints5Reply(r [5]int64) reply {
	return func(c redcon.Conn) {
		c.WriteArray(5)
		for _, v := range r {
			c.WriteInt64(v)
		}
	}
}

// pipelineChunk is how many commands of one pipeline are decided before their
// answers are written and flushed, so a client sending 10,000 commands at once
// starts reading answers before the last is decided.
const pipelineChunk = 1024

// handle answers cmd and the rest of the pipeline read with it, in order.
func (s *Server) handle(c redcon.Conn, first redcon.Command) {
	cmds := append([]redcon.Command{first}, c.ReadPipeline()...)
	st := c.Context().(*connState)
	if !st.seen && s.cfg.Authenticate == nil {
		st.seen = true
		if s.cfg.OnAuth != nil {
			st.hangUp = s.cfg.OnAuth(st.remote, true)
		}
	}
	for len(cmds) > 0 {
		n := min(len(cmds), pipelineChunk)
		if quit := s.handleChunk(c, st, cmds[:n]); quit {
			c.Close()
			return
		}
		cmds = cmds[n:]
		if len(cmds) > 0 {
			if err := redcon.BaseWriter(c).Flush(); err != nil {
				return // the connection is gone; redcon sees it at its next read
			}
		}
	}
}

// handleChunk answers cmds in order and reports whether one was QUIT (the
// commands after it are not run).
func (s *Server) handleChunk(c redcon.Conn, st *connState, cmds []redcon.Command) (quit bool) {
	replies := make([]reply, len(cmds))
	for i := 0; i < len(cmds); {
		if st.authed && isCheck(cmds[i]) {
			j := i + 1
			for j < len(cmds) && isCheck(cmds[j]) {
				j++
			}
			s.runChecks(s.callerContext(st), cmds[i:j], replies[i:j])
			i = j
			continue
		}
		replies[i] = s.exec(st, cmds[i])
		if st.hangUp || lower(cmds[i].Args[0]) == "quit" {
			quit = true
			break
		}
		i++
	}
	for _, r := range replies {
		if r == nil {
			break
		}
		r(c)
	}
	return quit
}

func lower(b []byte) string { return strings.ToLower(string(b)) }

func isCheck(cmd redcon.Command) bool {
	switch lower(cmd.Args[0]) {
	case "cl.throttle", "rl.check", "rl.policy":
		return true
	}
	return false
}

// check is one parsed check of a pipeline.
type check struct {
	key   string
	limit algo.Limit
	hits  int64
	ms    bool // reply durations in ms (RL.CHECK) instead of redis-cell's s
	// maxWait is RL.CHECK's MAXWAIT: wait up to this long for the slot.
	maxWait time.Duration
	// RL.POLICY: the domain and descriptor; key is then the stored key the
	// policy builds, used only to keep one descriptor's checks in order.
	domain string
	desc   *policy.Descriptor
}

// callerContext is the base context of st's checks.
func (s *Server) callerContext(st *connState) context.Context {
	ctx := context.Background()
	if s.cfg.CallerContext != nil && st.caller != "" {
		ctx = s.cfg.CallerContext(ctx, st.caller)
	}
	return ctx
}

// runChecks decides a run of consecutive checks: parse errors answer at once;
// valid checks are grouped by key, each group decided in order by one
// goroutine, up to PipelineConcurrency groups at a time.
func (s *Server) runChecks(base context.Context, cmds []redcon.Command, replies []reply) {
	checks := make([]check, len(cmds))
	groups := map[string][]int{}
	var order []string
	for i, cmd := range cmds {
		ck, errMsg := parseCheck(cmd)
		if errMsg == "" && ck.desc != nil && s.cfg.Policy == nil {
			errMsg = "ERR no policy file is loaded (start ringlimitd with --policy-file)"
		}
		if errMsg != "" {
			replies[i] = errReply(errMsg)
			continue
		}
		checks[i] = ck
		if _, ok := groups[ck.key]; !ok {
			order = append(order, ck.key)
		}
		groups[ck.key] = append(groups[ck.key], i)
	}
	decide := func(idx []int) {
		for _, i := range idx {
			replies[i] = s.decide(base, checks[i])
		}
	}
	if len(order) == 1 {
		decide(groups[order[0]])
		return
	}
	sem := make(chan struct{}, s.cfg.PipelineConcurrency)
	var wg sync.WaitGroup
	for _, k := range order {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			decide(groups[k])
		})
	}
	wg.Wait()
}

// decide runs one check on its owner and returns its reply.
func (s *Server) decide(base context.Context, ck check) reply {
	// A MAXWAIT check may wait that long for its slot, on top of the time to
	// reach the owner.
	ctx, cancel := context.WithTimeout(base, s.cfg.CheckTimeout+ck.maxWait)
	defer cancel()
	if ck.desc != nil {
		return s.decidePolicy(ctx, ck)
	}
	d, err := s.cfg.Checker.Check(ctx, node.Check{Key: ck.key, Limit: ck.limit, Hits: ck.hits, MaxWait: ck.maxWait})
	if err != nil {
		if !ck.ms && node.Classify(err) == node.ClassInvalid {
			return errReply(cellErr(node.Message(err))) // CL.THROTTLE: redis-cell's wrapping
		}
		return errReply(checkError(err))
	}
	if ck.ms {
		return ints5Reply(msReply(d.Decision))
	}
	return ints5Reply(d.CLThrottleReply())
}

// decidePolicy answers RL.POLICY: [limited, limit, remaining, retry_after_ms,
// reset_after_ms, rule, outcome].
func (s *Server) decidePolicy(ctx context.Context, ck check) reply {
	res, err := s.cfg.Policy.Check(ctx, ck.domain, []policy.Descriptor{*ck.desc}, ck.hits)
	if err != nil {
		return errReply(checkError(err))
	}
	d := &res.Decisions[0]
	ints := msReply(d.Decision.Decision)
	if d.Rule == nil || d.Key == "" {
		ints = [5]int64{0, 0, 0, -1, 0}
		if !d.Allowed {
			ints[0] = 1 // a blocking rule (requests_per_unit 0)
		}
	}
	rule := ""
	if d.Rule != nil {
		rule = d.Rule.ID()
	}
	outcome := string(d.Outcome())
	return func(c redcon.Conn) {
		c.WriteArray(7)
		for _, v := range ints {
			c.WriteInt64(v)
		}
		c.WriteBulkString(rule)
		c.WriteBulkString(outcome)
	}
}

// checkError maps an error of a check to the reply text clients see, by its
// node.Class.
func checkError(err error) string {
	switch node.Classify(err) {
	case node.ClassInvalid:
		return "ERR " + node.Message(err)
	case node.ClassPermission:
		return "NOPERM " + node.Message(err) // Redis's ACL refusal
	case node.ClassFull:
		return "OOM " + node.Message(err) // Redis's refusal at maxmemory
	case node.ClassTimeout:
		return "ERR timeout: the check was not decided in time"
	case node.ClassCanceled:
		return "ERR canceled: the check was not decided"
	case node.ClassUnavailable:
		return "ERR unavailable: " + node.Message(err) + "; try later"
	}
	return "ERR internal error: " + err.Error()
}
