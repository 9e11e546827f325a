// Package route holds a check's way past an owner that could not decide it:
// the forward to the key's backup, or the backup's own decision on its
// replica, mapping the backup's answer codes to errors (Router.ViaBackup);
// the OwnerUnreachable policy (Router.Fallback: this member's share of the
// limit among the ring's members on a local limiter, Share, or the
// fail-open and fail-closed decisions, Fail); the answer to a check sent to
// this member as a key's backup (Router.AsBackup); and the forwards to a
// backup and, from the backup, to the owner, with the per-peer circuit
// breaker (Peers). The owner-local path and the forward to the owner stay
// the node's (its hot path); what the Router needs of the node (stores,
// clock, ring, peers, metrics) it gets once as a Config of funcs.
package route

import (
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// Share returns one member's share of l when the members of the ring fall
// back on local limiters together: Limit (and Burst, or GCRA's capacity
// Burst+1) divided by members, rounded up, so that members nodes admit about
// l in all (at most l plus members-1 hits per period). With members <= 1 it
// returns l.
func Share(l algo.Limit, members int) algo.Limit {
	if members <= 1 {
		return l
	}
	m := int64(members)
	div := func(v int64) int64 { return (v + m - 1) / m }
	s := l
	s.Limit = div(l.Limit)
	switch l.Kind {
	case algo.GCRA:
		s.Burst = div(l.Burst+1) - 1
	case algo.TokenBucket:
		s.Burst = div(l.Burst)
	}
	return s
}

// Fail is the decision of a check of limit l at now (Unix ns) whose owner
// cannot be reached, under the FailOpen (open) or FailClosed policy: what a
// fresh state would answer, allowed when open; when closed, denied with
// Remaining 0 and RetryAfter retry (the node's ForwardTimeout). The error is
// l's (algo.State.Take).
func Fail(l algo.Limit, now int64, open bool, retry time.Duration) (algo.Decision, error) {
	var fresh algo.State
	d, err := fresh.Take(now, 0, l)
	if err != nil {
		return algo.Decision{}, err
	}
	d.Allowed = open
	if !open {
		d.Remaining = 0
		d.RetryAfter = retry
	}
	return d, nil
}
