// Package target names the cluster entry points the CLI sends checks to.
//
// A Target pairs a name for reports with a Checker: a *node.Node of an
// in-process cluster, or a *transport.Client dialled to a daemon's gRPC address.
// replay and bench depend only on Checker, so their tests run against fakes.
package target

import (
	"context"

	"github.com/ringlimit/ringlimit/transport"
)

// Checker decides one check. *node.Node and *transport.Client implement it.
// Implementations must be safe for concurrent use. An error means the check was
// not decided (invalid input, node stopped, daemon unreachable); being over the
// limit is a decided Result, not an error.
type Checker interface {
	Check(ctx context.Context, c transport.Check) (transport.Result, error)
}

// Target is one entry point into a cluster.
type Target struct {
	// Name identifies the target in reports: a node name or a "host:port".
	Name string
	// Checker sends checks to it.
	Checker Checker
}
