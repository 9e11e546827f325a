package node

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/ringlimit/ringlimit/node/internal/seeds"
)

// errNoSeed is returned by joinSeeds when no entry of Config.Join resolved to
// an address this attempt.
var errNoSeed = errors.New("node: no seed address resolved")

// joinSeeds resolves the seeds of Config.Join again (seeds.Resolve) and joins
// the addresses found that are not live members already (notLive). memberlist's
// Join would resolve names itself; resolving here instead lets Config.Resolver
// stand in for DNS, and makes sure every attempt, the first at New and each
// rejoin, asks the resolver anew.
func (n *Node) joinSeeds() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Gossip.TCPTimeout)
	defer cancel()
	go func() { // Close cancels a lookup in flight
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	found, errs := seeds.Resolve(ctx, n.cfg.Join, n.resolver())
	for _, err := range errs {
		n.log.Debug("seed not resolved", "err", err)
	}
	if len(found) == 0 {
		return 0, fmt.Errorf("%w: %w", errNoSeed, errors.Join(errs...))
	}
	// The node's own copy of the members (membership.Table), not memberlist's
	// Members(): memberlist mutates the *Node values it hands out under its
	// own lock, so reading their Addr here would race with gossip.
	found = seeds.NotLive(found, n.mem.GossipAddrs(), int(n.ml.LocalNode().Port))
	if len(found) == 0 {
		return 0, nil // every seed is a live member already: nothing to merge
	}
	return n.ml.Join(found)
}

// resolver returns Config.Resolver, or the system resolver when it is nil.
func (n *Node) resolver() func(context.Context, string) ([]string, error) {
	if n.cfg.Resolver != nil {
		return n.cfg.Resolver
	}
	return net.DefaultResolver.LookupHost
}
