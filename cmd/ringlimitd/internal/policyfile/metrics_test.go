package policyfile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
)

// admitAll is a policy.Checker that admits every check.
type admitAll struct{}

func (admitAll) AllowPenalized(_ context.Context, _ string, l algo.Limit, _ int64, _ node.Penalty) (node.Decision, error) {
	var d node.Decision
	d.Allowed, d.Limit, d.Remaining = true, l.Limit, l.Limit
	return d, nil
}

// series returns the number of series reg holds.
func series(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

// The metrics' size does not depend on what callers send: 20,000 checks with
// random domains (and a 1 MB one) add no series beyond the policy's domain
// and the one "unknown" domain.
func TestDescriptorMetricsBounded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	src := "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w, err := Start(path, admitAll{}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	check := func(domain string) {
		t.Helper()
		descs := []policy.Descriptor{{Entries: []policy.Entry{{Key: "user", Value: "u1"}}}}
		if _, err := w.Limiter().Check(context.Background(), domain, descs, 1); err != nil {
			t.Fatal(err)
		}
	}
	check("api")
	check("first-unknown")
	before := series(t, reg)
	r := rand.New(rand.NewPCG(20_000, 1))
	for range 20_000 {
		check(fmt.Sprintf("random-%x", r.Uint64()))
	}
	check(string(make([]byte, 1<<20)))
	if after := series(t, reg); after != before {
		t.Errorf("series after 20,000 random domains: %d, before %d", after, before)
	}
}
