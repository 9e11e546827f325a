package route

import (
	"context"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/internal/breaker"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// Forwarder sends one check to the peer at addr (transport.Pool does, in
// micro-batches).
type Forwarder interface {
	Forward(ctx context.Context, addr string, c transport.Check) (transport.Result, error)
}

// Peers forwards checks to owners and backups through a pool, with the
// per-peer circuit breaker: a peer that failed is skipped for its cooldown,
// one that answered is given its chance again.
type Peers struct {
	Pool     Forwarder
	Breakers *breaker.Set
}

// ToBackup sends w (AsBackup set) to the key's backup b, whose owner the
// sender cannot reach. ok is false when b is skipped (its breaker is open)
// or cannot be reached either (its breaker then opens); err is ctx's error
// when ctx ended. Otherwise res is b's answer: CodeOK and
// CodeResourceExhausted reset b's breaker.
func (p Peers) ToBackup(ctx context.Context, b ring.Member, w transport.Check) (res transport.Result, ok bool, err error) {
	if p.Breakers.Skip(b.Name) {
		return res, false, nil
	}
	res, err = p.Pool.Forward(ctx, b.Addr, w)
	switch {
	case err != nil && ctx.Err() != nil:
		return res, false, ctx.Err()
	case err != nil:
		p.Breakers.Fail(b.Name)
		return res, false, nil
	case res.Code == transport.CodeOK || res.Code == transport.CodeResourceExhausted:
		p.Breakers.Reset(b.Name)
	}
	return res, true, nil
}

// AskOwner is a backup's attempt to have the key's owner decide c, a check
// sent to the backup (see the node's forwardAsBackup): the sender may be cut
// off from an owner that is alive, and only the owner's decision is exact.
// It waits at most half of what ctx leaves (and of timeout, ForwardTimeout):
// an owner that is gone without a reset (a killed container, a cut cable)
// must not make the sender's forward to this backup time out too, which
// would send the check to the local fallback. done reports that res is the
// answer to return to the sender (the owner's decision, its refusal, "not
// owner" when the rings disagree, or "unavailable" when ctx ended); when
// false the backup decides on its replica. An owner skipped by its breaker
// is not asked.
func (p Peers) AskOwner(ctx context.Context, owner ring.Member, c transport.Check, timeout time.Duration) (res transport.Result, done bool) {
	if p.Breakers.Skip(owner.Name) {
		return res, false
	}
	wait := timeout / 2
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	octx, cancel := context.WithTimeout(ctx, wait)
	// The key is the inbound batch's, whose bytes the server reuses once
	// Forward returns (see transport.PeerHandler); a forward that gives up
	// at octx's end may still be sent later, so it gets a copy.
	c.Key = strings.Clone(c.Key)
	res, err := p.Pool.Forward(octx, owner.Addr, c)
	cancel()
	switch {
	case err == nil && (res.Code == transport.CodeOK || res.Code == transport.CodeInvalidArgument || res.Code == transport.CodeResourceExhausted):
		p.Breakers.Reset(owner.Name)
		return res, true
	case err == nil && res.Code == transport.CodeNotOwner:
		return res, true // the rings disagree: the sender routes again
	case err != nil && ctx.Err() != nil:
		return transport.Result{Code: transport.CodeUnavailable, Message: ctx.Err().Error()}, true
	case err != nil:
		p.Breakers.Fail(owner.Name)
	}
	return res, false
}
