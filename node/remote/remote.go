// Package remote is a client of a ringlimit daemon's gRPC Limiter service that
// speaks node's words: a node.Check in, a node.Decision or an error that
// node.Classify sorts out. The CLI and other programs that check keys on a
// cluster they do not belong to use it instead of package transport.
//
// A check goes through transport.Client (one gRPC connection, dialled lazily);
// the answer's route and decision are converted back, and a refused input
// comes back as the server's *node.InputError (field, value, allowed), rebuilt
// from the status's details rather than its text.
package remote

import (
	"context"
	"crypto/tls"
	"fmt"

	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/transport"
)

// Client checks keys on a daemon's Limiter service. Its methods may be called
// concurrently.
type Client struct {
	c *transport.Client
}

// Dial returns a Client for the Limiter service at addr (host:port, or any
// gRPC target); tlsCfg nil dials plaintext. It connects on first use, so an
// unreachable address shows up as an error (ClassUnavailable) of the first
// check; Dial itself fails only for a malformed target.
func Dial(addr string, tlsCfg *tls.Config) (*Client, error) {
	c, err := transport.Dial(addr, tlsCfg)
	if err != nil {
		return nil, err
	}
	return &Client{c: c}, nil
}

// Check decides c on the cluster (c.CreatedAt only where the daemon accepts
// caller timestamps). A denied check is a Decision with Allowed false, not an
// error. Errors: input the server refuses is an error matching node.ErrInvalid
// that holds the server's *node.InputError; any other failure (unreachable,
// stopped, ctx done) matches node.ErrUnavailable. node.Classify sorts both.
func (c *Client) Check(ctx context.Context, chk node.Check) (node.Decision, error) {
	r, err := c.c.Check(ctx, transport.Check{Key: chk.Key, Limit: chk.Limit, Hits: chk.Hits, CreatedAt: chk.CreatedAt, Penalty: transport.Penalty(chk.Penalty)})
	if err != nil {
		if node.Classify(err) == node.ClassUnavailable {
			err = fmt.Errorf("%w: %w", node.ErrUnavailable, err)
		}
		return node.Decision{}, err
	}
	return node.Decision{Decision: r.Decision, Route: node.Route(r.Route), Owner: r.Owner, Banned: r.Banned}, nil
}

// Close closes the connection; checks in flight fail with ClassUnavailable
// errors. Safe to call more than once.
func (c *Client) Close() error { return c.c.Close() }
