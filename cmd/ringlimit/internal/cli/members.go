package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// member is one entry of a daemon's GET /v1/members answer.
type member struct {
	Name       string `json:"name"`
	Addr       string `json:"addr"`
	GossipAddr string `json:"gossip_addr"`
	ID         string `json:"id"`
	Self       bool   `json:"self"`
	State      string `json:"state,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// membersURL turns "host:port" or an http(s) URL into the /v1/members URL;
// a bare host:port gets https when secure, http otherwise.
func membersURL(addr string, secure bool) (string, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return "", errors.New("--addr: empty")
	}
	if !strings.Contains(addr, "://") {
		if secure {
			addr = "https://" + addr
		} else {
			addr = "http://" + addr
		}
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("--addr %q: want host:port or an http(s) URL", addr)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/members"
	return u.String(), nil
}

func newMembersCmd(deps Deps) *cobra.Command {
	var (
		addr    string
		asJSON  bool
		timeout time.Duration
		sf      secFlags
	)
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List the cluster members a daemon sees (HTTP GET /v1/members)",
		Example: `  ringlimit members --addr 127.0.0.1:8080 --certs-dir certs
  ringlimit members --addr https://limiter.internal:8080 --token-file token --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sec, err := sf.resolve(cmd.Flags())
			if err != nil {
				return err
			}
			u, err := membersURL(addr, sec.tls != nil)
			if err != nil {
				return err
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout %v: must be > 0", timeout)
			}
			hc := deps.HTTPClient
			if hc == nil {
				hc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: sec.tls}}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return err
			}
			if sec.token != "" {
				req.Header.Set("Authorization", "Bearer "+sec.token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return fmt.Errorf("members: %w", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
			if err != nil {
				return fmt.Errorf("members: read %s: %w", u, err)
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("members: GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
			}
			var ms []member
			if err := json.Unmarshal(body, &ms); err != nil {
				return fmt.Errorf("members: GET %s: not a member list: %w", u, err)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(ms)
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPEER\tGOSSIP\tID\tSELF\tSTATE\tREASON")
			for _, m := range ms {
				self := ""
				if m.Self {
					self = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.Addr, m.GossipAddr, m.ID, self, m.State, m.Reason)
			}
			return tw.Flush()
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", "127.0.0.1:8080", "HTTP address (host:port or URL) of a ringlimitd")
	fs.BoolVar(&asJSON, "json", false, "print the members as JSON")
	fs.DurationVar(&timeout, "timeout", 5*time.Second, "deadline of the request")
	sf.register(fs)
	return cmd
}
