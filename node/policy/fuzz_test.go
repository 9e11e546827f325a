package policy

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func writeFile(path, src string) error { return os.WriteFile(path, []byte(src), 0o600) }

// FuzzParse: any input either loads or fails with a *LoadError; a loaded
// policy answers lookups without panicking.
func FuzzParse(f *testing.F) {
	for _, s := range []string{envoyExample1, envoyExample2, envoyExample3, envoyExample4Match, envoyExample5,
		envoyExample6, envoyExample7, envoyExample8, envoyExample9,
		"domain: d\ndefault_rate_limit: {period: 1s, requests_per_unit: 2, algorithm: gcra, burst: 1}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, penalty: {denials: 2, within: 1s, ban: 1m}}\n",
		"domain: &a d\ndescriptors: *a\n", "- 1\n- 2\n", "domain: d\n---\ndomain: e\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := Parse("fuzz.yaml", []byte(src))
		if err != nil {
			var le *LoadError
			if !errors.As(err, &le) || !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("error is not a *LoadError: %v", err)
			}
			return
		}
		for _, d := range p.Domains() {
			for _, e := range [][]Entry{{{"k", "v"}}, {{"a", "b"}, {"c", "d"}}, {{"key1", "value_1"}}} {
				if r := p.Lookup(d, e); r != nil && !r.Unlimited && !r.Blocks() {
					if err := r.Limit.Validate(); err != nil {
						t.Fatalf("loaded an invalid limit at %s: %v", r.Path, err)
					}
				}
			}
		}
	})
}

// ruleFile builds a policy of n rules: n/10 apps, each with 10 APIs, plus a
// default per API, the shape of the seed's app_id/api_id policies.
func ruleFile(n int) string {
	var b strings.Builder
	b.WriteString("domain: bench\ndescriptors:\n  - key: app_id\n    descriptors:\n")
	for api := 0; api < 10; api++ {
		fmt.Fprintf(&b, "      - key: api_id\n        value: api%d\n        rate_limit: {unit: minute, requests_per_unit: 100}\n", api)
	}
	for app := 0; app < n/10-1; app++ {
		fmt.Fprintf(&b, "  - key: app_id\n    value: app%d\n    descriptors:\n", app)
		for api := 0; api < 10; api++ {
			fmt.Fprintf(&b, "      - key: api_id\n        value: api%d\n        rate_limit: {unit: second, requests_per_unit: %d}\n", api, app+1)
		}
	}
	return b.String()
}

// BenchmarkLookup1000Rules: Policy.Lookup on a 1,000-rule file, for an
// overridden app (key+value at both levels) and for a default (key-only at the
// first level).
func BenchmarkLookup1000Rules(b *testing.B) {
	p, err := Parse("bench.yaml", []byte(ruleFile(1000)))
	if err != nil {
		b.Fatal(err)
	}
	if p.Rules() != 1000 {
		b.Fatalf("rules: got %d, want 1000", p.Rules())
	}
	over := []Entry{{"app_id", "app57"}, {"api_id", "api3"}}
	def := []Entry{{"app_id", "nobody"}, {"api_id", "api3"}}
	b.Run("override", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if p.Lookup("bench", over) == nil {
				b.Fatal("no rule")
			}
		}
	})
	b.Run("default", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if p.Lookup("bench", def) == nil {
				b.Fatal("no rule")
			}
		}
	})
	b.Run("key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = Key("bench", over)
		}
	})
}
