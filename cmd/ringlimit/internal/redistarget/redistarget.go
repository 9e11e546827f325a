// Package redistarget is the target of `ringlimit bench --redis URL`: the same
// checks as a cluster target, decided by the Redis-backed limiter (package
// node/failover/redislimit, the same algorithms as Lua scripts on the caller's
// clock), so that ringlimit and Redis can be compared on one machine.
package redistarget

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/failover/redislimit"
)

// Name is the target's name in reports, and the Owner of its Results.
const Name = "redis"

// checker adapts a redislimit.Limiter to target.Checker.
type checker struct{ l *redislimit.Limiter }

// Check decides c on Redis at the CLI's clock (or c.CreatedAt when set).
func (c checker) Check(ctx context.Context, ch node.Check) (node.Decision, error) {
	now := ch.CreatedAt
	if now == 0 {
		now = time.Now().UnixNano()
	}
	d, err := c.l.Take(ctx, ch.Key, now, ch.Hits, ch.Limit)
	if err != nil {
		return node.Decision{}, err
	}
	return node.Decision{Decision: d, Route: node.RouteOwner, Owner: Name}, nil
}

// Open connects to the Redis at url (redis:// or rediss://, single node,
// Sentinel or Cluster, see redislimit.NewClient); a single node gets a pool of
// at least poolSize connections (one per bench caller, so callers do not queue
// for connections). It loads the scripts, which checks that Redis answers.
// stop closes the client.
func Open(ctx context.Context, url string, poolSize int) (targets []target.Target, stop func() error, err error) {
	var c redis.UniversalClient
	if strings.Contains(url, "master_name=") || strings.Contains(url, "addr=") {
		c, err = redislimit.NewClient(url) // Sentinel or Cluster: pool per node as the URL says
	} else {
		var o *redis.Options
		if o, err = redislimit.ClientOptions(url); err == nil {
			o.PoolSize = max(o.PoolSize, poolSize)
			c = redis.NewClient(o)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	l, err := redislimit.New(c, redislimit.Options{})
	if err == nil {
		err = l.Load(ctx)
	}
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("redis %s: %w", url, err)
	}
	return []target.Target{{Name: Name, Checker: checker{l}}}, c.Close, nil
}
