package node_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// A member of a secure cluster, as README.md shows it: certificates made by
// `ringlimit cert`, the gossip key in base64, one check. The example is
// compiled by the tests but not run (it needs the files and a cluster).
func ExampleNew() {
	check := func(ctx context.Context) error {
		cfg := node.DefaultConfig()          // LAN timings; every field documented
		cfg.Name = "api-7"                   // unique; node.crt must name it
		cfg.Join = []string{"10.0.0.1:7946"} // any live members' gossip addresses
		cfg.TLSCAFile, cfg.TLSCertFile, cfg.TLSKeyFile = "certs/ca.crt", "certs/node.crt", "certs/node.key"
		b, err := os.ReadFile("certs/gossip.key") // `ringlimit cert create-gossip-key`
		if err != nil {
			return err
		}
		if cfg.SecretKey, err = base64.StdEncoding.DecodeString(strings.TrimSpace(string(b))); err != nil {
			return err
		}
		n, err := node.New(cfg) // joins the cluster; errors.Is(err, node.ErrInvalidConfig) names the field
		if err != nil {
			return err
		}
		defer n.Close() // leaves and hands every key to its new owner

		// redis-cell's `CL.THROTTLE reply:laoqian 15 30 60`: burst 15, 30 per minute.
		limit := algo.Limit{Kind: algo.GCRA, Burst: 15, Limit: 30, Period: time.Minute}
		d, err := n.Allow(ctx, "reply:laoqian", limit)
		if err != nil {
			return err // invalid input, node stopped, key table full, ctx done
		}
		if !d.Allowed {
			fmt.Printf("retry in %v (decided by %s, route %s)\n", d.RetryAfter, d.Owner, d.Route)
		}
		return nil
	}
	if err := check(context.Background()); err != nil {
		log.Print(err)
	}
}

// TestReadmeExampleIsExampleNew keeps README.md's library example equal to the
// body of ExampleNew's check, so that the README shows code that compiles.
func TestReadmeExampleIsExampleNew(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_cluster_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "## The library in twenty lines\n\n```go\n")
	if !ok {
		t.Fatal("README.md has no \"## The library in twenty lines\" section with a Go block")
	}
	block, _, _ = strings.Cut(block, "```")
	_, body, _ := strings.Cut(string(src), "check := func(ctx context.Context) error {\n")
	body, _, _ = strings.Cut(body, "\t\treturn nil\n\t}")
	var want strings.Builder
	for _, line := range strings.SplitAfter(body, "\n") {
		want.WriteString(strings.TrimPrefix(line, "\t\t"))
	}
	if block != want.String() {
		t.Errorf("README.md's library example differs from ExampleNew's body:\ngot:\n%s\nwant:\n%s", block, want.String())
	}
}
