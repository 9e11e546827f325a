// Package cli builds the ringlimit command line: cobra commands for check,
// members, bench, replay and demo, wired to the tested packages accesslog,
// replay and bench.
//
// Execute builds a fresh command tree per call (no package-level commands or
// flags), runs it with the given arguments and writers, and maps the outcome to
// an exit code. Everything that needs a running node comes in through Deps, so
// the commands can be tested with fakes; main supplies the real in-process
// cluster.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/inprocess"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/node"
)

// Exit codes of Execute. They follow grep's convention so that scripts can
// tell "the answer is no" from "something is broken".
const (
	// ExitOK: success; for check, the hits were admitted.
	ExitOK = 0
	// ExitNo: the command ran and the answer is negative: check was denied,
	// replay or demo found a decision that differs from the reference (or a check
	// the cluster failed to decide), bench saw a key admitted beyond its bound or
	// checks that failed.
	ExitNo = 1
	// ExitError: the command could not do its job: bad flags or arguments, an
	// unreachable address, an unreadable log, a cluster that would not start.
	ExitError = 2
)

// InProcessFunc starts an in-process cluster as o describes (o.Nodes nodes on
// loopback; o.AcceptCallerTimestamps must be true for replays) and returns one
// Target per node (named after the node) and a function that stops the
// cluster. inprocess.Start is the real one.
type InProcessFunc func(ctx context.Context, o inprocess.Options) (targets []target.Target, stop func() error, err error)

// Deps are the outside services the commands use.
type Deps struct {
	// InProcess starts in-process clusters (--target inprocess, demo). nil makes
	// those modes fail with an error.
	InProcess InProcessFunc
	// HTTPClient is used by members; nil means a client with a 10 s timeout.
	HTTPClient *http.Client
}

// exitError carries an exit code other than ExitError through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// no wraps err so that Execute exits with ExitNo.
func no(err error) error { return &exitError{code: ExitNo, err: err} }

// Execute runs the ringlimit command line with args (without the program name;
// nil means none, never the process's own arguments) and returns the exit
// code. Output goes to stdout, diagnostics and progress to stderr.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer, deps Deps) int {
	root := NewRoot(stdout, stderr, deps)
	if args == nil {
		args = []string{} // cobra reads the process's os.Args for nil args
	}
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.code == ExitNo && ee.err != nil {
			fmt.Fprintln(stderr, "ringlimit:", node.Message(ee.err))
		}
		return ee.code
	}
	// One error shape on every front door: the field, its value and what is
	// allowed, without internal package prefixes.
	fmt.Fprintln(stderr, "ringlimit:", node.Message(err))
	return ExitError
}

// NewRoot returns a new ringlimit command tree writing to stdout and stderr.
func NewRoot(stdout, stderr io.Writer, deps Deps) *cobra.Command {
	root := &cobra.Command{
		Use:   "ringlimit",
		Short: "Client, load generator and replay tool for a ringlimit cluster",
		Long: `ringlimit talks to a ringlimit cluster: a daemon cluster (ringlimitd) over gRPC
and HTTP, or a cluster of nodes started inside this process on loopback.

Exit codes: 0 success (check: allowed); 1 a negative answer (check: denied;
replay/demo: a decision differs from the single-node reference; bench: a key was
admitted beyond what its limit allows, or checks failed); 2 an error (bad flags,
unreachable address, unreadable log).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w\nsee '%s --help'", err, c.CommandPath())
	})
	root.AddCommand(
		newCheckCmd(),
		newCertCmd(),
		newMembersCmd(deps),
		newKeyCmd(deps),
		newBenchCmd(deps),
		newReplayCmd(deps),
		newDemoCmd(deps),
	)
	return root
}
