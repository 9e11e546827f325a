package node

import (
	"context"

	"github.com/ringlimit/ringlimit/algo"
)

// AllowPenalized checks hits hits of key against l on the key's owner like
// AllowN, under the ban rule p (the zero Penalty is none, and then it is
// AllowN). The owner keeps the key's ban state next to its algorithm state
// and decides both under one lock: once the key has been denied p.Denials
// times within p.Within, the check that makes it so and every check of the key
// for p.Ban afterwards are denied with Decision.Banned set, RetryAfter the ban's
// remaining time, Remaining 0, whatever the algorithm says; checks denied by
// the ban consume nothing and do not count as denials. The ban state moves
// with the key on a handoff and is replicated to the key's backup (see
// Config.Replication), which applies it while the owner is unreachable. A
// check decided by the OwnerUnreachable fallback applies no penalty (the
// owner's ban state is out of reach). Errors as AllowN, plus an *InputError
// for an invalid p.
func (n *Node) AllowPenalized(ctx context.Context, key string, l algo.Limit, hits int64, p Penalty) (Decision, error) {
	c := Check{Key: key, Limit: l, Hits: hits, Penalty: p}
	return n.decide(ctx, &c)
}
