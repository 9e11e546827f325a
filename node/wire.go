package node

import (
	"context"
	"fmt"

	"github.com/ringlimit/ringlimit/transport"
)

// This file is node's boundary with package transport: the peer glue
// converts checks, routes and penalties to and from transport's wire types (a
// few words copied per check, no allocation), and LimiterHandler serves a
// node-speaking Checker as transport's Limiter service.

// The routes and penalties are converted by type conversion; these fail to
// compile if either side's values drift apart.
var (
	_ = [1]struct{}{}[transport.RouteOwner-transport.Route(RouteOwner)]
	_ = [1]struct{}{}[transport.RouteForwarded-transport.Route(RouteForwarded)]
	_ = [1]struct{}{}[transport.RouteFallback-transport.Route(RouteFallback)]
	_ = [1]struct{}{}[transport.RouteBackup-transport.Route(RouteBackup)]
	_ = [1]struct{}{}[transport.RouteCachedDenial-transport.Route(RouteCachedDenial)]
	_ = [1]struct{}{}[transport.RouteLease-transport.Route(RouteLease)]
	_ = transport.Penalty(Penalty{})
)

// wire returns c as the Peer service carries it; asBackup marks a check sent
// to the key's backup because its owner is unreachable.
func (c *Check) wire(asBackup bool) transport.Check {
	return transport.Check{Key: c.Key, Limit: c.Limit, Hits: c.Hits, CreatedAt: c.CreatedAt, Penalty: transport.Penalty(c.Penalty), AsBackup: asBackup, MaxWait: c.MaxWait, CancelAt: c.cancelAt}
}

// checkFromWire returns the Check of a wire check (dropping its wire-only
// AsBackup).
func checkFromWire(w *transport.Check) Check {
	return Check{Key: w.Key, Limit: w.Limit, Hits: w.Hits, CreatedAt: w.CreatedAt, Penalty: Penalty(w.Penalty), MaxWait: w.MaxWait, cancelAt: w.CancelAt}
}

// resultToWire is the Result a peer answers for a Decision it made.
func resultToWire(d *Decision) transport.Result {
	return transport.Result{Decision: d.Decision, Route: transport.Route(d.Route), Owner: d.Owner, Banned: d.Banned, Code: transport.CodeOK, Delay: d.Delay, At: d.At()}
}

// Checker decides one check as Node.Check does. *Node implements it, and so
// do the daemon's layers over a node (the failover limiter).
type Checker interface {
	Check(ctx context.Context, c Check) (Decision, error)
}

// LimiterHandler returns c as the handler of transport's public Limiter
// service (transport.NewLimiterServer): it converts each wire check to a
// Check (a client cannot set the peer-only AsBackup) and the Decision back,
// and maps c's errors by Classify: ClassUnavailable to transport.ErrUnavailable
// (gRPC Unavailable), ClassPermission to transport.ErrPermissionDenied (gRPC
// PermissionDenied, with Message's text), ClassFull to
// transport.ErrResourceExhausted (gRPC ResourceExhausted); input errors and context errors keep their own
// mapping (InvalidArgument with the *InputError's field, DeadlineExceeded,
// Canceled).
func LimiterHandler(c Checker) transport.LimiterHandler { return limiterHandler{c} }

type limiterHandler struct{ c Checker }

func (h limiterHandler) Check(ctx context.Context, w transport.Check) (transport.Result, error) {
	c := checkFromWire(&w)
	c.cancelAt = 0 // a client cancels nothing: only nodes send cancels
	d, err := h.c.Check(ctx, c)
	if err != nil {
		return transport.Result{}, WireError(err)
	}
	return resultToWire(&d), nil
}

// WireError returns err in transport's terms, for a handler of a transport
// service: an error of ClassUnavailable also wraps transport.ErrUnavailable,
// one of ClassPermission transport.ErrPermissionDenied, one of ClassFull
// transport.ErrResourceExhausted (gRPC ResourceExhausted with RetryInfo);
// any other error is
// returned as it is (transport maps input and context errors itself).
func WireError(err error) error {
	switch Classify(err) {
	case ClassUnavailable:
		return fmt.Errorf("%w: %w", transport.ErrUnavailable, err)
	case ClassPermission:
		return fmt.Errorf("%w: %w", transport.ErrPermissionDenied, err)
	case ClassFull:
		return fmt.Errorf("%w: %w", transport.ErrResourceExhausted, err)
	}
	return err
}

// refusedByPeer is the error of a check that a peer (the key's owner or
// backup) answered InvalidArgument: its own validation refused what this
// node's accepted (a smaller Config.MaxKeyLen, or caller timestamps refused
// there). The peer's message says why.
func refusedByPeer(peer, msg string) error {
	return fmt.Errorf("%w: refused by %s: %s", ErrInvalid, peer, msg)
}
