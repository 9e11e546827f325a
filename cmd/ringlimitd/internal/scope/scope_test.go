package scope

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
)

const testFile = `
default:
  max_period: 48h
clients:
  billing:
    key_prefixes: ["billing:"]
    domains: [billing]
    max_limit: 100
    max_keys: 2
  envoy:
    own_limits: false
`

func gcra(limit int64, period time.Duration) algo.Limit {
	return algo.Limit{Kind: algo.GCRA, Limit: limit, Period: period}
}

func TestDirect(t *testing.T) {
	t.Parallel()
	s, err := Parse(strings.NewReader(testFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key string
		l         algo.Limit
		want      string // "" allowed, else in the error
	}{
		{"", "any:key", gcra(10, time.Hour), ""},
		{"", "any:key", gcra(1, 876000*time.Hour), "this caller may not ask for period 876000h0m0s: above its max_period 48h0m0s"},
		{"", "rl:4:edge3:key", gcra(1, time.Second), `may not check keys starting "rl:": they belong to the policy file`},
		{"other", "x", gcra(1, 48*time.Hour), ""},
		{"billing", "billing:a", gcra(100, time.Hour), ""},
		{"billing", "orders:a", gcra(1, time.Hour), `credential "billing" may only check keys starting with one of its key_prefixes ["billing:"]`},
		{"billing", "billing:b", gcra(101, time.Hour), "limit 101 (burst 0): above its max_limit 100"},
		{"billing", "billing:c", gcra(1, 49*time.Hour), "max_period 48h"}, // inherited from default
		{"envoy", "k", gcra(1, time.Second), "only check the policy file's descriptors"},
	} {
		err := s.Direct(tc.name, tc.key, tc.l)
		if tc.want == "" {
			if err != nil {
				t.Errorf("Direct(%q, %q, %v): got %v, want allowed", tc.name, tc.key, tc.l, err)
			}
			continue
		}
		if !errors.Is(err, ErrOutOfScope) || !errors.Is(err, node.ErrPermissionDenied) || errors.Is(err, node.ErrInvalid) ||
			node.Classify(err) != node.ClassPermission || !strings.Contains(node.Message(err), tc.want) {
			t.Errorf("Direct(%q, %q, %v): got %v (class %v), want ClassPermission, ErrOutOfScope, not ErrInvalid, with %q", tc.name, tc.key, tc.l, err, node.Classify(err), tc.want)
		}
	}
}

func TestMaxKeys(t *testing.T) {
	t.Parallel()
	s, err := Parse(strings.NewReader(testFile))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	for i, tc := range []struct {
		key  string
		at   time.Duration
		want bool
	}{
		{"billing:1", 0, true},
		{"billing:1", time.Second, true}, // the same key again
		{"billing:2", 0, true},
		{"billing:3", 0, false},          // a third key while two are held
		{"billing:3", time.Minute, true}, // billing:1 and :2 idle after their 1 m period
	} {
		now = time.Unix(1000, 0).Add(tc.at)
		err := s.Direct("billing", tc.key, gcra(1, time.Minute-2*time.Second))
		if (err == nil) != tc.want {
			t.Errorf("step %d: %s at +%v: got %v, want allowed=%v", i, tc.key, tc.at, err, tc.want)
		}
		// A credential at its cap is a full key table (ClassFull), naming
		// the cap and when its earliest key frees (billing:2, 58 s on).
		const want = `key table full: credential "billing" holds 2 keys through this node, its max_keys; the earliest key frees in 58s`
		if !tc.want && (!errors.Is(err, node.ErrTooManyKeys) || node.Classify(err) != node.ClassFull || node.RetryAfter(err) != 58*time.Second || node.Message(err) != want) {
			t.Errorf("step %d: got %v (class %v, retry after %v), want ClassFull %q", i, err, node.Classify(err), node.RetryAfter(err), want)
		}
	}
	// A burst above the limit holds a key until it drains, not one period:
	// 1 per second with burst 99 is held 100 s.
	now = time.Unix(5000, 0)
	burst := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Second, Burst: 99}
	for _, k := range []string{"billing:b1", "billing:b2"} {
		if err := s.Direct("billing", k, burst); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	now = now.Add(99 * time.Second)
	if err := s.Direct("billing", "billing:b3", burst); node.Classify(err) != node.ClassFull || node.RetryAfter(err) != time.Second {
		t.Errorf("a third key 99 s after two bursts of 100 s: got %v (retry after %v), want ClassFull, 1s", err, node.RetryAfter(err))
	}
	now = now.Add(time.Second)
	if err := s.Direct("billing", "billing:b3", burst); err != nil {
		t.Errorf("a third key once the bursts drained: got %v, want allowed", err)
	}
	// An invalid limit is not counted (the node refuses the check).
	if err := s.Direct("billing", "billing:bad", algo.Limit{Kind: algo.GCRA, Period: time.Second}); err != nil {
		t.Errorf("invalid limit: got %v, want it left to the node", err)
	}

	// Other credentials are not counted against billing's cap.
	if err := s.Direct("other", "billing:9", gcra(1, time.Minute)); err != nil {
		t.Errorf("another credential: %v", err)
	}
}

func TestPolicyDomains(t *testing.T) {
	t.Parallel()
	s, err := Parse(strings.NewReader(testFile))
	if err != nil {
		t.Fatal(err)
	}
	key := policy.Key("billing", []policy.Entry{{Key: "user", Value: "a"}})
	if d, ok := DomainOf(key); !ok || d != "billing" {
		t.Fatalf("DomainOf(%q): got %q %v, want billing", key, d, ok)
	}
	if err := s.Policy("billing", "billing", key, gcra(1, time.Hour)); err != nil {
		t.Errorf("billing in billing: %v", err)
	}
	if err := s.Policy("billing", "edge", policy.Key("edge", nil), gcra(1, time.Hour)); !errors.Is(err, ErrOutOfScope) {
		t.Errorf("billing in edge: got %v, want ErrOutOfScope", err)
	}
	if err := s.Policy("envoy", "edge", policy.Key("edge", nil), gcra(1, 1000*time.Hour)); err != nil {
		t.Errorf("envoy in edge (the policy's limit, not capped): %v", err)
	}
	if _, ok := DomainOf("user:1"); ok {
		t.Error("DomainOf of a direct key: got ok")
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ text, want string }{
		{"default:\n  max_periods: 1h\n", "field max_periods not found"},
		{"clients:\n  a:\n    max_keys: -1\n", "line 3: client \"a\": max_keys -1"},
		{"clients:\n  a:\n    key_prefixes: [\"\"]\n", "empty key prefix"},
		{"other: 1\n", "field other not found"},
	} {
		_, err := Parse(strings.NewReader(tc.text))
		if !errors.Is(err, ErrFile) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q): got %v, want ErrFile with %q", tc.text, err, tc.want)
		}
	}
	s, err := Parse(strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.For("x"); !got.OwnLimits || got.MaxPeriod != DefaultMaxPeriod {
		t.Errorf("empty file: got %+v, want DefaultScope", got)
	}
}

// BenchmarkDirect is what a scope adds to each own-limit check: the
// default scope, and a named one with prefixes and a key cap.
//
//	go test -run XXX -bench Direct ./cmd/ringlimitd/internal/scope/
func BenchmarkDirect(b *testing.B) {
	s, err := Parse(strings.NewReader(testFile + "  capped:\n    key_prefixes: [\"a:\", \"b:\"]\n    max_keys: 1000\n"))
	if err != nil {
		b.Fatal(err)
	}
	l := gcra(10, time.Minute)
	for _, c := range []struct{ name, key string }{{"", "k"}, {"billing", "billing:key"}, {"capped", "b:key"}} {
		b.Run("caller="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Direct(c.name, c.key, l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
