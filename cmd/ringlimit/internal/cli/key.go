package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringlimit/ringlimit/algo"
)

// newKeyCmd is `ringlimit key inspect|reset|unban|top`: the daemon's key
// operations (HTTP /v1/keys/..., callers whose scope has admin).
func newKeyCmd(deps Deps) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Inspect, reset or unban a key, or list the most-limited keys (needs the admin scope)",
		Long: `key operates one key on its owner through a ringlimitd's HTTP port
(POST /v1/keys/inspect, /v1/keys/reset, /v1/keys/unban; GET /v1/keys/top).
The credential's scope must have admin: true (--client-scopes-file); others
get 403. inspect and reset take the key's limit (--algorithm, --limit,
--period, --burst); unban does not. Answers are printed as JSON.`,
		Example: `  ringlimit key inspect --addr 127.0.0.1:8080 --token-file token --algorithm gcra --limit 10 --period 1m user:42
  ringlimit key reset --addr 127.0.0.1:8080 --token-file token --algorithm gcra --limit 10 --period 1m user:42
  ringlimit key unban --addr 127.0.0.1:8080 --token-file token user:42
  ringlimit key top --addr 127.0.0.1:8080 --token-file token --n 20`,
	}
	for _, op := range []string{"inspect", "reset", "unban", "top"} {
		cmd.AddCommand(newKeyOpCmd(deps, op))
	}
	return cmd
}

func newKeyOpCmd(deps Deps, op string) *cobra.Command {
	var (
		addr, algorithm string
		limit, burst    int64
		period, timeout time.Duration
		n               int
		sf              secFlags
	)
	use := op + " <key>"
	args := cobra.ExactArgs(1)
	if op == "top" {
		use, args = "top", cobra.NoArgs
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: map[string]string{"inspect": "Show a key's state on its owner, its ban, owner, backup and whether the replica agrees", "reset": "Reset a key under a limit's algorithm to full capacity on every member", "unban": "Lift a key's penalty ban on every member", "top": "List the keys this daemon's callers were denied most over the last minute"}[op],
		Args:  args,
		RunE: func(cmd *cobra.Command, a []string) error {
			sec, err := sf.resolve(cmd.Flags())
			if err != nil {
				return err
			}
			base, err := membersURL(addr, sec.tls != nil)
			if err != nil {
				return err
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout %v: must be > 0", timeout)
			}
			u := strings.TrimSuffix(base, "/v1/members") + "/v1/keys/" + op
			method, body := http.MethodPost, []byte(nil)
			if op == "top" {
				if n < 1 || n > 1000 {
					return fmt.Errorf("--n %d: must be in 1..1000", n)
				}
				method, u = http.MethodGet, u+"?n="+url.QueryEscape(fmt.Sprint(n))
			} else {
				req := map[string]any{"key": a[0]}
				if op != "unban" {
					if _, err := algo.ParseKind(algorithm); err != nil {
						return fmt.Errorf("--algorithm: %w", err)
					}
					req["algorithm"], req["limit"], req["period_ns"], req["burst"] = algorithm, limit, int64(period), burst
				}
				body, _ = json.Marshal(req)
			}
			hc := deps.HTTPClient
			if hc == nil {
				hc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: sec.tls}}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
			if err != nil {
				return err
			}
			if sec.token != "" {
				req.Header.Set("Authorization", "Bearer "+sec.token)
			}
			if body != nil {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := hc.Do(req)
			if err != nil {
				return fmt.Errorf("key %s: %w", op, err)
			}
			defer resp.Body.Close()
			out, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
			if err != nil {
				return fmt.Errorf("key %s: read %s: %w", op, u, err)
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("key %s: %s %s: %s: %s", op, method, u, resp.Status, strings.TrimSpace(string(out)))
			}
			var v any
			if err := json.Unmarshal(out, &v); err != nil {
				return fmt.Errorf("key %s: %s: not JSON: %w", op, u, err)
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", "127.0.0.1:8080", "HTTP address (host:port or URL) of a ringlimitd")
	fs.DurationVar(&timeout, "timeout", 5*time.Second, "deadline of the request")
	switch op {
	case "inspect", "reset":
		fs.StringVar(&algorithm, "algorithm", "gcra", "the key's algorithm ("+algo.KindNames(", ")+")")
		fs.Int64Var(&limit, "limit", 10, "the key's limit: hits per period")
		fs.DurationVar(&period, "period", time.Second, "the key's period")
		fs.Int64Var(&burst, "burst", 0, "the key's burst (GCRA max_burst, token bucket capacity)")
	case "top":
		fs.IntVar(&n, "n", 10, "how many keys, 1..1000")
	}
	sf.register(fs)
	return cmd
}
