package policy

import (
	"testing"

	"github.com/ringlimit/ringlimit/algo"
)

// TestEveryKindLoads: a rule may name every algorithm of algo's name table,
// and loads with that algorithm and a limit it accepts (step 5 of algo's
// checklist).
func TestEveryKindLoads(t *testing.T) {
	t.Parallel()
	for _, k := range algo.Kinds() {
		src := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: " + k.String() + "}\n"
		p, err := Parse("kinds.yaml", []byte(src))
		if err != nil {
			t.Errorf("%v: %v", k, err)
			continue
		}
		r := p.Lookup("d", []Entry{{Key: "k"}})
		if r == nil || r.Limit.Kind != k {
			t.Errorf("%v: got rule %+v, want one with that algorithm", k, r)
			continue
		}
		if err := r.Limit.Validate(); err != nil {
			t.Errorf("%v: loaded limit %+v: %v", k, r.Limit, err)
		}
	}
}
