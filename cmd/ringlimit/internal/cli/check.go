package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// checkJSON is the --json output of check.
type checkJSON struct {
	Key          string `json:"key"`
	Algorithm    string `json:"algorithm"`
	Allowed      bool   `json:"allowed"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterNS int64  `json:"retry_after_ns"`
	ResetAfterNS int64  `json:"reset_after_ns"`
	Route        string `json:"route"`
}

func newCheckCmd() *cobra.Command {
	var (
		lf      limitFlags
		sf      secFlags
		addr    string
		asJSON  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "check KEY",
		Short: "Check one key against a daemon over gRPC and print the decision",
		Long: `check sends one check for KEY to the ringlimitd at --addr (gRPC) and prints the
decision. Exit code 0 when the hits were admitted, 1 when denied, 2 on error.
retry_after is -1ns ("never") when the hits exceed the limit's capacity.`,
		Example: `  ringlimit check --addr 127.0.0.1:8081 user:42
  ringlimit check --algorithm token_bucket --limit 100 --period 1s --burst 20 --json user:42`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := algo.ValidateKey(key, 0, nil); err != nil {
				return fmt.Errorf("KEY: %s", node.Message(err))
			}
			l, hits, err := lf.parse(0)
			if err != nil {
				return err
			}
			if strings.TrimSpace(addr) == "" {
				return errors.New("--addr: empty")
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout %v: must be > 0", timeout)
			}
			sec, err := sf.resolve(cmd.Flags())
			if err != nil {
				return err
			}
			c, closeFn, err := sec.dial(addr)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			res, err := c.Check(ctx, node.Check{Key: key, Limit: l, Hits: hits})
			if err != nil {
				return err
			}
			if err := printDecision(cmd, key, l, res, asJSON); err != nil {
				return err
			}
			if !res.Decision.Allowed {
				return &exitError{code: ExitNo} // the output already says "denied"
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", "127.0.0.1:8081", "gRPC address (host:port) of a ringlimitd")
	fs.BoolVar(&asJSON, "json", false, "print the decision as one JSON object (durations in ns)")
	fs.DurationVar(&timeout, "timeout", 5*time.Second, "deadline of the check")
	lf.register(fs, true, DefaultBurst)
	sf.register(fs)
	return cmd
}

func printDecision(cmd *cobra.Command, key string, l algo.Limit, res node.Decision, asJSON bool) error {
	d := res.Decision
	w := cmd.OutOrStdout()
	if asJSON {
		return json.NewEncoder(w).Encode(checkJSON{
			Key: key, Algorithm: l.Kind.String(), Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
			RetryAfterNS: int64(d.RetryAfter), ResetAfterNS: int64(d.ResetAfter), Route: res.Route.String(),
		})
	}
	verdict := "allowed"
	if !d.Allowed {
		verdict = "denied"
	}
	retry := d.RetryAfter.String()
	if d.RetryAfter == algo.RetryNever {
		retry = "never"
	}
	_, err := fmt.Fprintf(w, "%s  key=%s algorithm=%s limit=%d remaining=%d retry_after=%s reset_after=%v route=%s\n",
		verdict, key, l.Kind, d.Limit, d.Remaining, retry, d.ResetAfter, res.Route.String())
	return err
}
