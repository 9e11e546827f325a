// Package failover is a Redis-first rate limiter that keeps deciding when Redis
// does not: checks go to Redis (package redislimit, the same algorithms as the
// cluster, on the caller's clock) while Redis answers within a time budget, and
// to a ringlimit cluster (a *node.Node) when it does not.
//
// A check enters Limiter.AllowN. A circuit breaker picks the side. Closed:
// the check runs on Redis with a deadline of Config.Budget; an error, a timeout
// or a call slower than Config.SlowCall counts as a failure, and
// Config.FailureThreshold consecutive failures open the breaker. A check whose
// Redis call fails is decided by the cluster in the same call, never returned
// as an error. Open: every check goes to the cluster. After Config.CoolDown one
// check at a time probes Redis (half-open) while the others stay on the
// cluster; Config.SuccessThreshold consecutive successful probes close the
// breaker, a failed one opens it again for another CoolDown. Every Decision
// says which side decided (Decision.Side).
//
// Over-admission at a switch. Redis and the cluster keep separate states: the
// side that takes over has not seen the hits the other side admitted, so it may
// admit them again. Each maximal run of a key's checks decided by one side
// admits at most what one limiter admits over the run: for GCRA and
// TokenBucket at most C + rate*(duration of the run), C the capacity
// (Burst+1 for GCRA, Burst for TokenBucket); for FixedWindow and the sliding
// windows at most Limit per window the run overlaps. Summing over the runs, a
// key admits at most what a single limiter would over the same time, plus C
// (Limit for the windows, per window) for every switch of side that key sees:
// at most one extra full capacity per switch per key, and only for keys that
// were checked on both sides of it. The hits a side admitted that no longer
// count at the switch (older than the window, or refilled) do not add up, so
// the excess is at most the capacity in use at the switch. A clean outage is
// two switches (to the cluster and back); every half-open probe that hits a
// key adds up to two more for that key. TestFailoverUnderLoad measures it.
package failover

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/internal/breaker"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/failover/redislimit"
)

// Named errors of the package.
var (
	// ErrInvalidConfig is returned by New, wrapped with the field and value.
	ErrInvalidConfig = errors.New("failover: invalid config")
	// ErrInvalidKey is matched by the *node.InputError (field "key") returned
	// for an empty key or one longer than
	// Config.MaxKeyLen, before either side is called (so a key Redis would
	// take is never refused by the cluster in the middle of an outage).
	ErrInvalidKey = errors.New("failover: invalid key")
)

// Primary is the Redis side; *redislimit.Limiter implements it. Take decides a
// check of hits at now (Unix ns, the caller's clock).
type Primary interface {
	Take(ctx context.Context, key string, now, hits int64, l algo.Limit) (algo.Decision, error)
}

// Cluster is the fallback side; *node.Node implements it.
type Cluster interface {
	AllowN(ctx context.Context, key string, l algo.Limit, hits int64) (node.Decision, error)
}

// maximaChecker is what a Cluster may also have (*node.Node does): the
// node's bounds on a limit's size (node.Node.WithinMaxima), applied before
// Redis decides so that Redis never takes a limit the cluster would refuse.
type maximaChecker interface {
	WithinMaxima(l algo.Limit) error
}

// Side says which limiter decided a check.
type Side uint8

// The sides.
const (
	// SideRedis: the Redis primary decided.
	SideRedis Side = iota + 1
	// SideCluster: the ringlimit cluster decided (Route and Owner say how).
	SideCluster
)

// String returns "redis" or "cluster".
func (s Side) String() string {
	switch s {
	case SideRedis:
		return "redis"
	case SideCluster:
		return "cluster"
	}
	return fmt.Sprintf("side(%d)", uint8(s))
}

// State is the circuit breaker's state.
type State uint8

// The breaker states.
const (
	// Closed: checks go to Redis.
	Closed State = iota
	// Open: checks go to the cluster until CoolDown has passed.
	Open
	// HalfOpen: one check at a time probes Redis, the others go to the cluster.
	HalfOpen
)

// States lists the breaker states in order.
func States() []State { return []State{Closed, Open, HalfOpen} }

// String returns "closed", "open" or "half_open": the shared breaker's names
// (the two numberings are the same, see TestStatesMatchTheBreaker).
func (s State) String() string { return breaker.State(s).String() }

// Decision is a check's outcome: the algorithm's Decision, the cluster's Route
// and Owner (zero for SideRedis), and the side that decided.
type Decision struct {
	node.Decision
	Side Side
}

// Config tunes the breaker. Zero fields take the defaults given.
type Config struct {
	// Budget is the deadline of each Redis call (default 50 ms). A check waits
	// at most Budget for Redis, then the cluster decides it: a check's latency
	// is at most Budget plus the cluster's. Shorter switches faster when Redis
	// hangs and counts more slow-but-alive calls as failures.
	Budget time.Duration
	// SlowCall: a Redis call that answers but takes longer than this counts as
	// a failure for the breaker (its Decision is still used). Default Budget/2;
	// at most Budget.
	SlowCall time.Duration
	// FailureThreshold consecutive failures open the breaker (default 3). 1
	// switches on the first failure; more tolerate isolated errors.
	FailureThreshold int
	// CoolDown is how long the breaker stays open before probing (default 1 s).
	CoolDown time.Duration
	// SuccessThreshold consecutive successful probes close it (default 2).
	SuccessThreshold int
	// Now returns the caller's clock in Unix ns, passed to Redis with every
	// check (default time.Now().UnixNano()). The cluster uses its own clock
	// (node.Config.Clock); keep them the same clock.
	Now func() int64
	// MaxKeyLen is the longest key accepted, in bytes; keep it equal to the
	// cluster's node.Config.MaxKeyLen. Default node.DefaultConfig().MaxKeyLen.
	MaxKeyLen int
	// OnStateChange, if set, is called after every transition, with the
	// breaker's lock released, possibly concurrently; it must not block.
	OnStateChange func(from, to State, at time.Time)
}

func (c *Config) fill() error {
	if c.Budget == 0 {
		c.Budget = 50 * time.Millisecond
	}
	if c.SlowCall == 0 {
		c.SlowCall = c.Budget / 2
	}
	if c.FailureThreshold == 0 {
		c.FailureThreshold = 3
	}
	if c.CoolDown == 0 {
		c.CoolDown = time.Second
	}
	if c.SuccessThreshold == 0 {
		c.SuccessThreshold = 2
	}
	if c.MaxKeyLen == 0 {
		c.MaxKeyLen = node.DefaultConfig().MaxKeyLen
	}
	if c.Now == nil {
		c.Now = func() int64 { return time.Now().UnixNano() }
	}
	bad := func(f string, v any) error { return fmt.Errorf("%w: %s = %v", ErrInvalidConfig, f, v) }
	switch {
	case c.Budget < 0:
		return bad("Budget", c.Budget)
	case c.SlowCall < 0 || c.SlowCall > c.Budget:
		return bad("SlowCall", c.SlowCall)
	case c.FailureThreshold < 0:
		return bad("FailureThreshold", c.FailureThreshold)
	case c.CoolDown < 0:
		return bad("CoolDown", c.CoolDown)
	case c.SuccessThreshold < 0:
		return bad("SuccessThreshold", c.SuccessThreshold)
	case c.MaxKeyLen < 0:
		return bad("MaxKeyLen", c.MaxKeyLen)
	}
	return nil
}

// Stats is a snapshot of the breaker's counters.
type Stats struct {
	// State is the current state.
	State State
	// Switches counts transitions by [from][to].
	Switches [3][3]uint64
	// TimeIn is the total time spent in each state, including the current one.
	TimeIn [3]time.Duration
	// Checks counts decided checks by side (index Side).
	Checks [3]uint64
	// Failures counts Redis calls that failed, timed out or were slow.
	Failures uint64
}

// Limiter is the failover limiter. Safe for concurrent use.
type Limiter struct {
	p   Primary
	c   Cluster
	cfg Config

	br        *breaker.Breaker
	redisN    atomic.Uint64
	clusterN  atomic.Uint64
	failuresN atomic.Uint64
}

// New returns a Limiter deciding on p while it is healthy and on c otherwise.
// Errors: ErrInvalidConfig for a nil side or a negative or inconsistent field.
func New(p Primary, c Cluster, cfg Config) (*Limiter, error) {
	if p == nil || c == nil {
		return nil, fmt.Errorf("%w: nil Primary or Cluster", ErrInvalidConfig)
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	l := &Limiter{p: p, c: c, cfg: cfg}
	bc := breaker.Config{FailureThreshold: cfg.FailureThreshold, SuccessThreshold: cfg.SuccessThreshold, CoolDown: cfg.CoolDown}
	if f := cfg.OnStateChange; f != nil {
		bc.OnStateChange = func(from, to breaker.State, at time.Time) { f(State(from), State(to), at) }
	}
	l.br = breaker.New(bc)
	return l, nil
}

// Allow checks one hit; see AllowN.
func (l *Limiter) Allow(ctx context.Context, key string, lim algo.Limit) (Decision, error) {
	return l.AllowN(ctx, key, lim, 1)
}

// AllowN checks hits hits (0 peeks) of key against lim on Redis or, when the
// breaker is not closed or the Redis call fails, on the cluster. Errors: an
// error wrapping algo.ErrInvalidLimit for an invalid lim or hits, ErrInvalidKey,
// and, when the Cluster has a WithinMaxima method (*node.Node does), its
// refusal of a lim above the node's maxima (all checked before either side
// is called), and the cluster's errors (node.AllowN's: an invalid
// key, ErrTooManyKeys, ErrStopped, ctx's error). A Redis failure is never
// returned. A lim that algo accepts but Redis cannot compute exactly
// (redislimit.ErrUnsupportedLimit) is always decided by the cluster.
func (l *Limiter) AllowN(ctx context.Context, key string, lim algo.Limit, hits int64) (Decision, error) {
	if err := algo.ValidateKey(key, l.cfg.MaxKeyLen, ErrInvalidKey); err != nil {
		return Decision{}, err
	}
	if err := lim.Validate(); err != nil {
		return Decision{}, err
	}
	if err := algo.ValidateHits(hits); err != nil {
		return Decision{}, err
	}
	if mc, ok := l.c.(maximaChecker); ok {
		if err := mc.WithinMaxima(lim); err != nil {
			return Decision{}, err
		}
	}
	if redislimit.Validate(lim) != nil {
		return l.cluster(ctx, key, lim, hits)
	}
	if ok, probe := l.br.Allow(); ok {
		if d, ok := l.redis(ctx, key, lim, hits, probe); ok {
			return d, nil
		}
	}
	return l.cluster(ctx, key, lim, hits)
}

// PenalizedCluster is a Cluster that also decides checks under a penalty
// (*node.Node does).
type PenalizedCluster interface {
	Cluster
	AllowPenalized(ctx context.Context, key string, l algo.Limit, hits int64, p node.Penalty) (node.Decision, error)
}

// ErrNoPenalties is returned by AllowPenalized for a check with a penalty when
// the Cluster is not a PenalizedCluster.
var ErrNoPenalties = errors.New("failover: the cluster does not decide penalties")

// AllowPenalized makes a Limiter a policy.Checker, so that
// policy.NewLimiter(l, p, m) checks descriptors Redis first. A check without a
// penalty (the zero Penalty) is AllowN: Redis first, the cluster while Redis
// fails; Owner is "redis" when Redis decided. A check with a penalty is always
// decided by the cluster: the ban state lives with the key on its owner, and
// the Lua scripts keep none. Errors: as AllowN (key and limit checked first),
// and ErrNoPenalties when the Cluster does not implement PenalizedCluster.
func (l *Limiter) AllowPenalized(ctx context.Context, key string, lim algo.Limit, hits int64, p node.Penalty) (node.Decision, error) {
	if p.IsZero() {
		d, err := l.AllowN(ctx, key, lim, hits)
		if err == nil && d.Side == SideRedis {
			d.Route, d.Owner = node.RouteOwner, "redis"
		}
		return d.Decision, err
	}
	pc, ok := l.c.(PenalizedCluster)
	if !ok {
		return node.Decision{}, ErrNoPenalties
	}
	if err := algo.ValidateKey(key, l.cfg.MaxKeyLen, ErrInvalidKey); err != nil {
		return node.Decision{}, err
	}
	d, err := pc.AllowPenalized(ctx, key, lim, hits, p)
	if err == nil {
		l.clusterN.Add(1)
	}
	return d, err
}

// cluster decides on the cluster.
func (l *Limiter) cluster(ctx context.Context, key string, lim algo.Limit, hits int64) (Decision, error) {
	d, err := l.c.AllowN(ctx, key, lim, hits)
	if err != nil {
		return Decision{}, err
	}
	l.clusterN.Add(1)
	return Decision{Decision: d, Side: SideCluster}, nil
}

// redis runs one Redis call within the budget and feeds the breaker; ok is
// false when the cluster must decide.
func (l *Limiter) redis(ctx context.Context, key string, lim algo.Limit, hits int64, probe bool) (Decision, bool) {
	now := l.cfg.Now()
	rctx, cancel := context.WithTimeout(ctx, l.cfg.Budget)
	start := time.Now()
	d, err := l.p.Take(rctx, key, now, hits, lim)
	took := time.Since(start)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller gave up: not Redis's failure.
		if probe {
			l.br.Release()
		}
		return Decision{}, false
	case errors.Is(err, redislimit.ErrClockStep) || errors.Is(err, redislimit.ErrStateRange) || errors.Is(err, algo.ErrInvalidLimit) || errors.Is(err, redislimit.ErrInvalidKey):
		// Redis is healthy; this check is the cluster's to decide (or reject).
		l.br.Done(true, probe)
		return Decision{}, false
	case err != nil:
		l.failuresN.Add(1)
		l.br.Done(false, probe)
		return Decision{}, false
	}
	l.br.Done(took <= l.cfg.SlowCall, probe)
	if took > l.cfg.SlowCall {
		l.failuresN.Add(1)
	}
	l.redisN.Add(1)
	return Decision{Decision: node.Decision{Decision: d}, Side: SideRedis}, true
}

// State returns the breaker's current state.
func (l *Limiter) State() State { return State(l.br.State()) }

// Stats returns a snapshot of the counters.
func (l *Limiter) Stats() Stats {
	b := l.br.Stats()
	s := Stats{State: State(b.State), Switches: b.Switches, TimeIn: b.TimeIn, Failures: l.failuresN.Load()}
	s.Checks[SideRedis] = l.redisN.Load()
	s.Checks[SideCluster] = l.clusterN.Load()
	return s
}
