// Package target names the cluster entry points the CLI sends checks to.
//
// A Target pairs a name for reports with a Checker: a *node.Node of an
// in-process cluster, or a *remote.Client dialled to a daemon's gRPC address.
// replay and bench depend only on Checker, so their tests run against fakes.
package target

import (
	"github.com/ringlimit/ringlimit/node"
)

// Checker decides one check (node.Checker). *node.Node and *remote.Client
// implement it. Implementations must be safe for concurrent use. An error
// means the check was not decided (invalid input, node stopped, daemon
// unreachable; node.Classify sorts it); being over the limit is a decided
// Decision, not an error.
type Checker = node.Checker

// Target is one entry point into a cluster.
type Target struct {
	// Name identifies the target in reports: a node name or a "host:port".
	Name string
	// Checker sends checks to it.
	Checker Checker
	// Received, when not nil, returns the forward messages (batches of
	// checks, lease renewals among them) the target has received from the
	// other members so far, as the owner of their keys: the in-process
	// cluster knows it, a daemon does not tell.
	Received func() int64
}
