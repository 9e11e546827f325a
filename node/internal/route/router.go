package route

import (
	"context"
	"errors"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/internal/breaker"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// ErrNoBackup is returned by Router.ViaBackup when the key has no backup, or
// its backup cannot be reached either: the OwnerUnreachable policy decides
// (Router.Fallback).
var ErrNoBackup = errors.New("node: no backup reachable")

// Policy is the node's OwnerUnreachable policy (node.Policy, the same
// values): how Router.Fallback decides a check whose owner and backup cannot
// be reached.
type Policy uint8

// The policies, with node.Policy's values.
const (
	// Local decides on the node's fallback store with its share of the
	// limit (Share).
	Local Policy = iota
	// FailOpen admits (Fail).
	FailOpen
	// FailClosed denies, RetryAfter Config.Timeout (Fail).
	FailClosed
)

// Ring is one ring state of the node as the routes read it (the node's
// ringState). Its methods must not block.
type Ring interface {
	// Hash returns the ring hash of key.
	Hash(key string) uint64
	// Owner returns the owner of the key whose ring hash is h; false when
	// the ring is empty.
	Owner(h uint64) (ring.Member, bool)
	// Backup returns the backup of that key; false when it has none (fewer
	// than two members, or replication off).
	Backup(h uint64) (ring.Member, bool)
	// IsLeaving reports whether the node was leaving in this ring state (it
	// then owns and backs up nothing).
	IsLeaving() bool
	// Members returns the number of members of the ring.
	Members() int
}

// Decision is a check's decision on a route of this package: the
// algorithm's, the route that decided it (transport's names, which the node's
// Route shares), the member that decided it, and whether the key's penalty
// ban did.
type Decision struct {
	algo.Decision
	Route  transport.Route
	Owner  string
	Banned bool
}

// Config is what a Router needs of its node, built once when the node is
// made: nothing in it is made per check. Every field is required.
type Config struct {
	// Self is the node's member name.
	Self string
	// Owned is the node's store (owned states and replicas alike), Bans its
	// ban states; Fallback the store of the Local policy.
	Owned, Fallback *store.Store
	Bans            *store.Bans
	// Clock returns the node's clock (Unix ns): a check's now when it has
	// no CreatedAt, and the wall time of the stores.
	Clock func() int64
	// Current returns the node's current ring state.
	Current func() Ring
	// Forward sends one check to the peer at addr (the node's peer pool,
	// read per call); Breakers are the node's per-peer circuit breakers.
	Forward  ForwardFunc
	Breakers *breaker.Set
	// Policy is the node's OwnerUnreachable, Timeout its ForwardTimeout:
	// FailClosed's RetryAfter and the bound of a backup's ask to the owner
	// (Peers.AskOwner).
	Policy  Policy
	Timeout time.Duration
	// Observe counts a check decided on route r (the node's metrics).
	Observe func(k algo.Kind, r transport.Route, allowed bool)
	// Refused is the error of a check that the peer named peer answered
	// CodeInvalidArgument with message msg.
	Refused func(peer, msg string) error
	// AsOwner answers c, a check sent to this node as the key's backup, as
	// its owner in ring state rs (which says this node owns the key whose
	// ring hash is h); ErrorResult is the Result of a check that failed with
	// err.
	AsOwner     func(ctx context.Context, rs Ring, c transport.Check, h uint64) transport.Result
	ErrorResult func(err error) transport.Result
}

// ForwardFunc is a func that is a Forwarder.
type ForwardFunc func(ctx context.Context, addr string, c transport.Check) (transport.Result, error)

// Forward calls f.
func (f ForwardFunc) Forward(ctx context.Context, addr string, c transport.Check) (transport.Result, error) {
	return f(ctx, addr, c)
}

// Router takes a check whose owner could not decide it the rest of its way:
// to the key's backup, or the backup's own decision on its replica, or the
// OwnerUnreachable policy; and answers the checks sent to this node as a
// key's backup. The owner-local path and the forward to the owner are the
// node's.
type Router struct {
	cfg   Config
	peers Peers
}

// New returns the Router of cfg.
func New(cfg Config) *Router {
	return &Router{cfg: cfg, peers: Peers{Pool: cfg.Forward, Breakers: cfg.Breakers}}
}

// checkNow returns the instant a check is decided at: its CreatedAt, else wall.
func checkNow(createdAt, wall int64) int64 {
	if createdAt == 0 {
		return wall
	}
	return createdAt
}

// Fallback applies the OwnerUnreachable policy to c, whose owner (and
// backup) cannot be reached, in ring state rs: Local takes c on the fallback
// store with this node's share of the limit among rs's members (Share);
// FailOpen and FailClosed answer Fail's decision. The Decision's Route is
// RouteFallback, Owner this node. A cancel takes and gives back nothing and
// is allowed. The error is the fallback store's or the limit's.
func (r *Router) Fallback(rs Ring, c transport.Check) (Decision, error) {
	if c.CancelAt != 0 {
		// A cancel the owner cannot get: nothing is given back, nothing taken.
		return Decision{Decision: algo.Decision{Allowed: true}, Route: transport.RouteFallback, Owner: r.cfg.Self}, nil
	}
	wall := r.cfg.Clock()
	now := checkNow(c.CreatedAt, wall)
	var d algo.Decision
	switch r.cfg.Policy {
	case Local:
		var err error
		f := r.cfg.Fallback
		d, err = f.Take(f.Hash(c.Key), Share(c.Limit, rs.Members()), c.Hits, now, wall, nil)
		if err != nil {
			return Decision{}, err
		}
	case FailOpen, FailClosed:
		var err error
		d, err = Fail(c.Limit, now, r.cfg.Policy == FailOpen, r.cfg.Timeout)
		if err != nil {
			return Decision{}, err
		}
	}
	r.cfg.Observe(c.Limit.Kind, transport.RouteFallback, d.Allowed)
	return Decision{Decision: d, Route: transport.RouteFallback, Owner: r.cfg.Self}, nil
}

// ViaBackup sends c (AsBackup set), whose owner in ring state rs cannot be
// reached, to the key's backup (h is its ring hash); when this node is the
// backup it decides c itself on its replica (RouteBackup). The backup's
// answer maps to: CodeOK, its decision (RouteBackup when it decided on its
// replica, else RouteForwarded: it reached the owner); CodeInvalidArgument,
// Config.Refused's error; CodeResourceExhausted, a *store.FullError naming
// the backup (FullAt); CodeNotOwner, store.ErrNotOwner (the backup does not
// see itself as the key's backup: rings disagree for a moment); any other
// code, ErrNoBackup. ErrNoBackup too when the key has no backup or it cannot
// be reached either; ctx's error when ctx ended. The Decision is zero on
// error.
func (r *Router) ViaBackup(ctx context.Context, rs Ring, c transport.Check, h uint64) (Decision, error) {
	b, ok := rs.Backup(h)
	if !ok {
		return Decision{}, ErrNoBackup
	}
	if b.Name == r.cfg.Self {
		d, ban, err := r.onReplica(&c, h)
		if err != nil {
			return Decision{}, err
		}
		r.cfg.Observe(c.Limit.Kind, transport.RouteBackup, d.Allowed)
		return Decision{Decision: d, Route: transport.RouteBackup, Owner: r.cfg.Self, Banned: ban}, nil
	}
	res, ok, err := r.peers.ToBackup(ctx, b, c)
	switch {
	case err != nil:
		return Decision{}, err
	case !ok:
		return Decision{}, ErrNoBackup
	case res.Code == transport.CodeOK:
		route := transport.RouteForwarded // the backup reached the owner itself
		if res.Route == transport.RouteBackup {
			route = transport.RouteBackup
		}
		r.cfg.Observe(c.Limit.Kind, route, res.Decision.Allowed)
		return Decision{Decision: res.Decision, Route: route, Owner: res.Owner, Banned: res.Banned}, nil
	case res.Code == transport.CodeInvalidArgument:
		return Decision{}, r.cfg.Refused(b.Name, res.Message)
	case res.Code == transport.CodeResourceExhausted:
		return Decision{}, FullAt(b.Name+" (the key's backup, or the owner it asked)", res)
	case res.Code == transport.CodeNotOwner:
		return Decision{}, store.ErrNotOwner
	}
	return Decision{}, ErrNoBackup
}

// onReplica decides c on this node's replica of its key (ring hash h), whose
// owner cannot be reached, with the key's ban state when c has a Penalty
// (banned reports that the ban decided it). It returns store.ErrNotOwner if
// this node is neither the key's backup nor its owner (any more) in its
// current ring, or is leaving. A cancel gives back nothing and is allowed.
func (r *Router) onReplica(c *transport.Check, h uint64) (d algo.Decision, banned bool, err error) {
	self, current := r.cfg.Self, r.cfg.Current
	holds := func() bool {
		rs := current()
		if rs.IsLeaving() {
			return false
		}
		if o, ok := rs.Owner(h); ok && o.Name == self {
			return true
		}
		b, ok := rs.Backup(h)
		return ok && b.Name == self
	}
	if c.CancelAt != 0 {
		// A cancel reaches the replica only while the owner is unreachable:
		// nothing is given back (the owner's state keeps the booking).
		return algo.Decision{Allowed: true}, false, nil
	}
	wall := r.cfg.Clock()
	now := checkNow(c.CreatedAt, wall)
	owned := r.cfg.Owned
	if c.Penalty.IsZero() {
		d, err := owned.Take(h, c.Limit, c.Hits, now, wall, holds)
		return d, false, err
	}
	l := c.Limit
	return r.cfg.Bans.Take(h, c.Key, store.BanRule(c.Penalty), c.Hits, now, func(hits int64) (algo.Decision, error) {
		return owned.Take(h, l, hits, now, wall, holds)
	})
}

// AsBackup answers c, a check sent to this node as the key's backup
// (transport.Check.AsBackup), in the node's current ring. If this node owns
// the key now, it answers as owner (Config.AsOwner). If it is not the key's
// backup (or is leaving), CodeNotOwner. Else it first asks the owner itself
// (Peers.AskOwner); if the owner cannot be reached from here either, it
// decides on its replica (RouteBackup, Owner this node), a failure mapped by
// Config.ErrorResult.
func (r *Router) AsBackup(ctx context.Context, c transport.Check) transport.Result {
	c.AsBackup = false
	rs := r.cfg.Current()
	h := rs.Hash(c.Key)
	owner, ok := rs.Owner(h)
	if ok && owner.Name == r.cfg.Self && !rs.IsLeaving() {
		return r.cfg.AsOwner(ctx, rs, c, h)
	}
	if b, isB := rs.Backup(h); !ok || !isB || b.Name != r.cfg.Self || rs.IsLeaving() {
		return transport.Result{Code: transport.CodeNotOwner, Message: "not the key's backup"}
	}
	if res, done := r.peers.AskOwner(ctx, owner, c, r.cfg.Timeout); done {
		return res
	}
	d, ban, err := r.onReplica(&c, h)
	if err != nil {
		return r.cfg.ErrorResult(err)
	}
	return transport.Result{Decision: d, Route: transport.RouteBackup, Owner: r.cfg.Self, Code: transport.CodeOK, Banned: ban}
}

// FullAt is the *store.FullError (node's *KeyTableFullError) of a check that
// the peer who (its name and role) refused with CodeResourceExhausted: its
// Text and RetryAfter (a negative RetryAfter is 0).
func FullAt(who string, res transport.Result) error {
	return &store.FullError{Who: who, Text: res.Message, RetryAfter: max(res.Decision.RetryAfter, 0)}
}

// AwaitChange waits up to d for next (the node's current ring state's) to be
// closed: true when it was; false when d passed (at once when d <= 0), or ctx
// ended, or stop (the node's) was closed first.
func AwaitChange(ctx context.Context, next, stop <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-next:
		return true
	case <-t.C:
	case <-ctx.Done():
	case <-stop:
	}
	return false
}
