package nodetest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/node"
)

// Cluster is a set of nodes started in one process on loopback: the in-process
// cluster of the CLI's demo and bench, and of tests.
type Cluster struct {
	nodes []*node.Node
}

// StartCluster starts size nodes from base (usually TestConfig()), named
// "node-0".."node-<size-1>", each joining the first, and waits until every node
// has all size members in its ring and they agree on every owner. On error, or if
// ctx ends first, the nodes already started are aborted and the error returned.
func StartCluster(ctx context.Context, size int, base node.Config) (*Cluster, error) {
	if size < 1 {
		return nil, fmt.Errorf("%w: cluster size %d", node.ErrInvalidConfig, size)
	}
	c := &Cluster{}
	for i := 0; i < size; i++ {
		cfg := base
		cfg.Name = fmt.Sprintf("node-%d", i)
		if i > 0 {
			cfg.Join = []string{c.nodes[0].GossipAddr()}
		}
		n, err := node.New(cfg)
		if err != nil {
			c.abort()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	if err := WaitConverged(ctx, c.nodes...); err != nil {
		c.abort()
		return nil, err
	}
	return c, nil
}

// Nodes returns the cluster's nodes in start order.
func (c *Cluster) Nodes() []*node.Node { return c.nodes }

// Close closes every node gracefully, one after another, and returns the joined
// errors.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

func (c *Cluster) abort() {
	for _, n := range c.nodes {
		n.Abort()
	}
}

// WaitConverged polls (every 10 ms) until every given node has exactly
// len(nodes) members in its ring and all their partition tables are equal, or ctx
// ends (its error is returned, wrapped with what was still missing).
func WaitConverged(ctx context.Context, nodes ...*node.Node) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		why := converged(nodes)
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodetest: cluster did not converge: %s: %w", why, ctx.Err())
		case <-t.C:
		}
	}
}

func converged(nodes []*node.Node) string {
	if len(nodes) == 0 {
		return ""
	}
	d := nodes[0].RingDigest()
	for _, n := range nodes {
		if got := n.Stats().Members; got != len(nodes) {
			return fmt.Sprintf("%s sees %d members, want %d", n.Name(), got, len(nodes))
		}
		if n.RingDigest() != d {
			return fmt.Sprintf("%s has another partition table than %s", n.Name(), nodes[0].Name())
		}
	}
	return ""
}
