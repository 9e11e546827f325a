package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/failover"
	"github.com/ringlimit/ringlimit/node/failover/redislimit"
)

// RedisOwner is the Owner a daemon check reports when Redis (--redis-primary)
// decided it (with RouteOwner: Redis held the key's state).
const RedisOwner = "redis"

// failoverChecker is the daemon's checker with --redis-primary: checks go
// through a failover.Limiter (Redis first, this node's cluster when Redis
// fails). Checks carrying their own timestamp (CreatedAt) go to the node as
// before, which honours or refuses them (--accept-caller-timestamps).
type failoverChecker struct {
	limiter
	f      *failover.Limiter
	client redis.UniversalClient
}

// newFailoverChecker connects nothing yet: go-redis dials on the first check.
func newFailoverChecker(n *node.Node, url string, budget time.Duration) (*failoverChecker, error) {
	c, err := redislimit.NewClient(url)
	if err != nil {
		return nil, err
	}
	rl, err := redislimit.New(c, redislimit.Options{})
	if err != nil {
		c.Close()
		return nil, err
	}
	f, err := failover.New(rl, n, failover.Config{Budget: budget})
	if err != nil {
		c.Close()
		return nil, err
	}
	return &failoverChecker{limiter: limiter{n}, f: f, client: c}, nil
}

// Check decides c with Redis first; its errors are node's and the failover
// limiter's, which node.Classify sorts. A check with a MaxWait is refused (an
// *InputError, field "max_wait", wrapping algo.ErrReserveUnsupported): Redis
// decides plain checks only, and a booking on the cluster alone would not
// count against Redis.
func (fc *failoverChecker) Check(ctx context.Context, c node.Check) (node.Decision, error) {
	if c.MaxWait != 0 {
		return node.Decision{}, &node.InputError{Field: "max_wait", Value: fmt.Sprintf("%d ns", int64(c.MaxWait)), Allowed: "must be 0 with --redis-primary: Redis decides plain checks only", Err: algo.ErrReserveUnsupported}
	}
	if c.CreatedAt != 0 {
		return fc.limiter.Check(ctx, c)
	}
	d, err := fc.f.AllowN(ctx, c.Key, c.Limit, c.Hits)
	if err != nil {
		return node.Decision{}, err
	}
	r := d.Decision
	if d.Side == failover.SideRedis {
		r.Route, r.Owner = node.RouteOwner, RedisOwner
	}
	return r, nil
}
