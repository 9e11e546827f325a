package policy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// The envoyproxy/ratelimit README's "Examples" section (Example 1 to 9, and the
// rate-limit definition's units), written here from that documentation
// (github.com/envoyproxy/ratelimit, README.md, "The configuration format").
const (
	envoyExample1 = `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`
	envoyExample2 = `
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`
	envoyExample3 = `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`
	envoyExample4NoMatch = `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`
	envoyExample4Match = `
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`
	envoyExample5 = `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`
	envoyExample6 = `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`
	envoyExample7 = `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`
	envoyExample8 = `
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
`
	envoyExample9 = `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
`
)

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

func ents(kv ...string) []Entry {
	out := make([]Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// TestEnvoyExamplesLookup checks which rule each documented request gets.
func TestEnvoyExamplesLookup(t *testing.T) {
	t.Parallel()
	type want struct {
		path      string // "" = no rule
		rpu       int64
		unit      Unit
		unlimited bool
		shadow    bool
	}
	tests := []struct {
		name, src, domain string
		entries           []Entry
		want              want
	}{
		{"ex1 users", envoyExample1, "mongo_cps", ents("database", "users"), want{"mongo_cps/database=users", 500, Second, false, false}},
		{"ex1 default", envoyExample1, "mongo_cps", ents("database", "default"), want{"mongo_cps/database=default", 500, Second, false, false}},
		{"ex1 other value has no rule", envoyExample1, "mongo_cps", ents("database", "orders"), want{}},
		{"ex1 unknown domain", envoyExample1, "nope", ents("database", "users"), want{}},
		{"ex2 marketing nested", envoyExample2, "messaging", ents("message_type", "marketing", "to_number", "2061111111"), want{"messaging/message_type=marketing/to_number", 5, Day, false, false}},
		{"ex2 to_number default", envoyExample2, "messaging", ents("to_number", "2061111111"), want{"messaging/to_number", 100, Day, false, false}},
		{"ex2 marketing alone has no rule", envoyExample2, "messaging", ents("message_type", "marketing"), want{}},
		{"ex2 other message type", envoyExample2, "messaging", ents("message_type", "transactional", "to_number", "1"), want{}},
		{"ex3 any ip", envoyExample3, "edge_proxy_per_ip", ents("remote_address", "50.0.0.1"), want{"edge_proxy_per_ip/remote_address", 10, Second, false, false}},
		{"ex3 key+value wins", envoyExample3, "edge_proxy_per_ip", ents("remote_address", "50.0.0.5"), want{"edge_proxy_per_ip/remote_address=50.0.0.5", 0, Second, false, false}},
		{"ex4 depth mismatch", envoyExample4NoMatch, "example4", ents("key", "value", "subkey", "subvalue"), want{}},
		{"ex4 nested match", envoyExample4Match, "example4", ents("key", "value", "subkey", "subvalue"), want{"example4/key=value/subkey", 300, Second, false, false}},
		{"ex5 unlimited", envoyExample5, "internal", ents("ldap", "x"), want{"internal/ldap", 0, UnitNone, true, false}},
		{"ex5 limited", envoyExample5, "internal", ents("azure", "x"), want{"internal/azure", 100, Minute, false, false}},
		{"ex6 shadow user-a", envoyExample6, "example6", ents("service", "auth-service", "user", "user-a"), want{"example6/service/user=user-a", 10, Second, false, true}},
		{"ex6 user-b", envoyExample6, "example6", ents("service", "auth-service", "user", "user-b"), want{"example6/service/user=user-b", 20, Second, false, false}},
		{"ex6 user-c none", envoyExample6, "example6", ents("service", "auth-service", "user", "user-c"), want{}},
		{"ex8 unspecified value", envoyExample8, "example8", ents("key1", "unspecified_value"), want{"example8/key1", 10, Minute, false, false}},
		{"ex8 value1", envoyExample8, "example8", ents("key1", "value1"), want{"example8/key1=value1", 20, Minute, false, false}},
		{"ex9 wildcard value_1", envoyExample9, "example9", ents("key1", "value_1"), want{"example9/key1=value*", 20, Minute, false, false}},
		{"ex9 wildcard value_2", envoyExample9, "example9", ents("key1", "value_2"), want{"example9/key1=value*", 20, Minute, false, false}},
		{"ex9 wildcard miss", envoyExample9, "example9", ents("key1", "other"), want{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := mustParse(t, tt.src).Lookup(tt.domain, tt.entries)
			if tt.want.path == "" {
				if r != nil {
					t.Fatalf("got rule %s, want none", r.Path)
				}
				return
			}
			if r == nil {
				t.Fatalf("got no rule, want %s", tt.want.path)
			}
			got := want{r.Path, r.RequestsPerUnit, r.Unit, r.Unlimited, r.ShadowMode}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestUnitsAsEnvoy checks every unit's window length (envoyproxy/ratelimit's
// utils.UnitToDivider) and that a rule with a unit becomes an epoch-aligned
// FixedWindow of requests_per_unit per unit.
func TestUnitsAsEnvoy(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		unit string
		want time.Duration
	}{
		{"second", time.Second}, {"MINUTE", time.Minute}, {"Hour", time.Hour}, {"day", 86400 * time.Second},
		{"week", 7 * 86400 * time.Second}, {"month", 30 * 86400 * time.Second}, {"year", 365 * 86400 * time.Second},
	} {
		p := mustParse(t, fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: %s, requests_per_unit: 7}\n", tt.unit))
		r := p.Lookup("d", ents("k", "v"))
		want := algo.Limit{Kind: algo.FixedWindow, Limit: 7, Period: tt.want}
		if r == nil || r.Limit != want {
			t.Errorf("unit %s: got %+v, want %+v", tt.unit, r, want)
		}
	}
}

// fakeChecker decides on algo states in memory at a settable time, applying no
// penalty: the policy layer's own tests need no cluster.
type fakeChecker struct {
	mu     sync.Mutex
	now    int64
	states map[string]*algo.State
	calls  int
}

func newFake(now time.Time) *fakeChecker {
	return &fakeChecker{now: now.UnixNano(), states: make(map[string]*algo.State)}
}

func (f *fakeChecker) AllowPenalized(_ context.Context, key string, l algo.Limit, hits int64, _ node.Penalty) (node.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	st := f.states[key]
	if st == nil {
		st = &algo.State{}
		f.states[key] = st
	}
	d, err := st.Take(f.now, hits, l)
	return node.Decision{Decision: d, Route: node.RouteOwner, Owner: "fake"}, err
}

func (f *fakeChecker) set(t time.Time) {
	f.mu.Lock()
	f.now = t.UnixNano()
	f.mu.Unlock()
}

func newLimiter(t testing.TB, c Checker, src string) *Limiter {
	t.Helper()
	l, err := NewLimiter(c, mustParse(t, src), nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func one(kv ...string) []Descriptor { return []Descriptor{{Entries: ents(kv...)}} }

// TestEnvoyExample2DayWindow: 5 marketing messages a day per number, the day
// starting at UTC midnight as in Envoy (window start = now - now mod 86400 s).
func TestEnvoyExample2DayWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(time.Date(2026, 5, 17, 23, 59, 0, 0, time.UTC))
	l := newLimiter(t, f, envoyExample2)
	desc := one("message_type", "marketing", "to_number", "2061111111")
	for i := 0; i < 5; i++ {
		res, err := l.Check(ctx, "messaging", desc, 1)
		if err != nil || !res.Allowed {
			t.Fatalf("message %d: got %+v, %v, want allowed", i, res, err)
		}
	}
	res, _ := l.Check(ctx, "messaging", desc, 1)
	if res.Allowed {
		t.Fatal("6th message of the day: got allowed, want denied")
	}
	if got, want := res.Decisions[0].RetryAfter, time.Minute; got != want {
		t.Fatalf("RetryAfter: got %v, want %v (until UTC midnight)", got, want)
	}
	// Another number has its own 5.
	if res, _ := l.Check(ctx, "messaging", one("message_type", "marketing", "to_number", "2062222222"), 1); !res.Allowed {
		t.Fatal("another number: got denied, want allowed")
	}
	f.set(time.Date(2026, 5, 18, 0, 0, 0, 0, time.UTC))
	if res, _ := l.Check(ctx, "messaging", desc, 1); !res.Allowed {
		t.Fatal("after UTC midnight: got denied, want allowed")
	}
}

// TestEnvoyExample2MultipleDescriptors: the overall answer is the OR of the
// descriptors' denials, and every matched descriptor takes its hit.
func TestEnvoyExample2MultipleDescriptors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(time.Date(2026, 5, 17, 12, 0, 0, 0, time.UTC))
	l := newLimiter(t, f, envoyExample2)
	descs := []Descriptor{
		{Entries: ents("message_type", "marketing", "to_number", "2061111111")},
		{Entries: ents("to_number", "2061111111")},
	}
	for i := 0; i < 5; i++ {
		if res, _ := l.Check(ctx, "messaging", descs, 1); !res.Allowed {
			t.Fatalf("check %d: got denied, want allowed", i)
		}
	}
	res, _ := l.Check(ctx, "messaging", descs, 1)
	if res.Allowed || res.Decisions[0].Allowed || !res.Decisions[1].Allowed {
		t.Fatalf("6th: got overall %v, per descriptor %v/%v; want denied by the marketing rule only",
			res.Allowed, res.Decisions[0].Allowed, res.Decisions[1].Allowed)
	}
	if got, want := res.Decisions[1].Remaining, int64(100-6); got != want {
		t.Fatalf("to_number remaining: got %d, want %d (every matched descriptor takes its hit)", got, want)
	}
	if b := res.Binding(); b != 0 {
		t.Fatalf("Binding: got %d, want 0 (the denied descriptor)", b)
	}
}

// TestEnvoyExample3Blocklist: requests_per_unit 0 denies every check of that
// IP without asking the node; other IPs get 10 per second.
func TestEnvoyExample3Blocklist(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(time.Unix(1_700_000_000, 0))
	l := newLimiter(t, f, envoyExample3)
	res, err := l.Check(ctx, "edge_proxy_per_ip", one("remote_address", "50.0.0.5"), 1)
	if err != nil || res.Allowed || res.Decisions[0].RetryAfter != algo.RetryNever || f.calls != 0 {
		t.Fatalf("blocked IP: got %+v, %v, %d node calls; want denied, RetryNever, no node call", res, err, f.calls)
	}
	for i := 0; i < 10; i++ {
		if res, _ := l.Check(ctx, "edge_proxy_per_ip", one("remote_address", "50.0.0.1"), 1); !res.Allowed {
			t.Fatalf("check %d: got denied, want allowed", i)
		}
	}
	if res, _ := l.Check(ctx, "edge_proxy_per_ip", one("remote_address", "50.0.0.1"), 1); res.Allowed {
		t.Fatal("11th in one second: got allowed, want denied")
	}
}

// TestEnvoyExample5Unlimited and no-rule descriptors never reach the node.
func TestEnvoyExample5Unlimited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(time.Unix(1_700_000_000, 0))
	l := newLimiter(t, f, envoyExample5)
	for i := 0; i < 1000; i++ {
		res, err := l.Check(ctx, "internal", one("ldap", "bind"), 1)
		if err != nil || !res.Allowed || res.Decisions[0].Outcome() != OutcomeUnlimited {
			t.Fatalf("ldap %d: got %+v, %v; want allowed unlimited", i, res, err)
		}
	}
	res, _ := l.Check(ctx, "internal", one("nothing", "here"), 1)
	if !res.Allowed || res.Decisions[0].Outcome() != OutcomeNoRule {
		t.Fatalf("no rule: got %+v, want allowed, no_rule", res)
	}
	if f.calls != 0 {
		t.Fatalf("node calls: got %d, want 0", f.calls)
	}
}

// TestEnvoyExample6Shadow: user-a is never limited but its would-be denials are
// reported; user-b is limited at 20 per second.
func TestEnvoyExample6Shadow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(time.Unix(1_700_000_000, 0))
	m := &countMetrics{}
	l, err := NewLimiter(f, mustParse(t, envoyExample6), m)
	if err != nil {
		t.Fatal(err)
	}
	shadowDenied := 0
	for i := 0; i < 30; i++ {
		res, _ := l.Check(ctx, "example6", one("service", "auth-service", "user", "user-a"), 1)
		if !res.Allowed {
			t.Fatalf("user-a check %d: got denied, want allowed (shadow mode)", i)
		}
		if res.Decisions[0].WouldDeny {
			shadowDenied++
		}
	}
	if shadowDenied != 20 {
		t.Fatalf("user-a would-deny count: got %d, want 20", shadowDenied)
	}
	if got := m.get("example6/service/user=user-a", OutcomeShadowDenied); got != 20 {
		t.Fatalf("shadow_denied metric: got %d, want 20", got)
	}
	allowed := 0
	for i := 0; i < 30; i++ {
		if res, _ := l.Check(ctx, "example6", one("service", "auth-service", "user", "user-b"), 1); res.Allowed {
			allowed++
		}
	}
	if allowed != 20 {
		t.Fatalf("user-b allowed: got %d, want 20", allowed)
	}
}

// TestEnvoyExample7Replaces: with both rules matched in one check, the 10/s rule
// replaces specific_limit, whose 5/s counter is left untouched.
func TestEnvoyExample7Replaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(time.Unix(1_700_000_000, 0))
	l := newLimiter(t, f, envoyExample7)
	both := []Descriptor{
		{Entries: ents("key_1", "value_1", "user", "bkthomps")},
		{Entries: ents("key_2", "value_2", "user", "bkthomps")},
	}
	allowed := 0
	for i := 0; i < 12; i++ {
		res, _ := l.Check(ctx, "example7", both, 1)
		if !res.Decisions[0].Replaced {
			t.Fatal("specific_limit: got not replaced, want replaced")
		}
		if res.Allowed {
			allowed++
		}
	}
	if allowed != 10 {
		t.Fatalf("both descriptors: got %d allowed, want 10", allowed)
	}
	allowed = 0
	for i := 0; i < 7; i++ {
		if res, _ := l.Check(ctx, "example7", both[:1], 1); res.Allowed {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("key_1 alone: got %d allowed, want 5 (its counter untouched by the replaced checks)", allowed)
	}
}

// TestSeedAppAPIFlow is the seed's flow: descriptors app_id and api_id, a
// default per api_id, and an override for one app_id.
func TestSeedAppAPIFlow(t *testing.T) {
	t.Parallel()
	const src = `
domain: gateway
descriptors:
  - key: app_id
    descriptors:
      - key: api_id
        value: reply
        rate_limit: {unit: minute, requests_per_unit: 3, name: reply_default}
  - key: app_id
    value: laoqian
    descriptors:
      - key: api_id
        value: reply
        rate_limit: {period: 1m, requests_per_unit: 5, algorithm: gcra, burst: 4, name: reply_laoqian}
`
	ctx := context.Background()
	f := newFake(time.Unix(1_700_000_000, 0))
	l := newLimiter(t, f, src)
	count := func(app string) (int, string) {
		n, rule := 0, ""
		for i := 0; i < 10; i++ {
			res, err := l.Check(ctx, "gateway", one("app_id", app, "api_id", "reply"), 1)
			if err != nil {
				t.Fatal(err)
			}
			rule = res.Decisions[0].Rule.ID()
			if res.Allowed {
				n++
			}
		}
		return n, rule
	}
	if n, rule := count("someone"); n != 3 || rule != "reply_default" {
		t.Fatalf("default app: got %d allowed by %s, want 3 by reply_default", n, rule)
	}
	if n, rule := count("other"); n != 3 || rule != "reply_default" {
		t.Fatalf("second default app: got %d allowed by %s, want its own 3 by reply_default", n, rule)
	}
	if n, rule := count("laoqian"); n != 5 || rule != "reply_laoqian" {
		t.Fatalf("override app: got %d allowed by %s, want 5 by reply_laoqian", n, rule)
	}
	if res, _ := l.Check(ctx, "gateway", one("app_id", "x", "api_id", "other"), 1); res.Decisions[0].Rule != nil {
		t.Fatalf("unknown api: got rule %s, want none", res.Decisions[0].Rule.ID())
	}
}

// TestDefaultRateLimit: with default_rate_limit, a descriptor no rule matches
// is limited by the default, per descriptor.
func TestDefaultRateLimit(t *testing.T) {
	t.Parallel()
	const src = `
domain: d
default_rate_limit: {unit: second, requests_per_unit: 2}
descriptors:
  - key: vip
    rate_limit: {unlimited: true}
`
	ctx := context.Background()
	f := newFake(time.Unix(1_700_000_000, 0))
	l := newLimiter(t, f, src)
	allowed := 0
	for i := 0; i < 5; i++ {
		if res, _ := l.Check(ctx, "d", one("ip", "1.2.3.4"), 1); res.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("default rule: got %d allowed, want 2", allowed)
	}
	res, _ := l.Check(ctx, "d", one("ip", "5.6.7.8"), 1)
	if !res.Allowed || res.Decisions[0].Rule.Path != "d/<default>" {
		t.Fatalf("another descriptor: got %+v, want allowed by d/<default>", res.Decisions[0])
	}
	if res, _ := l.Check(ctx, "d", one("vip", "x"), 1); res.Decisions[0].Outcome() != OutcomeUnlimited {
		t.Fatalf("vip: got %s, want unlimited", res.Decisions[0].Outcome())
	}
}

// TestKeyNoCollision: entries are length-prefixed, so a_b+c and a+b_c (and the
// same bytes split anywhere else) give distinct keys.
func TestKeyNoCollision(t *testing.T) {
	t.Parallel()
	cases := [][]Entry{
		{{"a_b", "c"}},
		{{"a", "b_c"}},
		{{"a", "b"}, {"c", ""}},
		{{"a", ""}, {"b", "c"}},
		{{"a_b_c", ""}},
		{{"a", "b"}, {"", "c"}},
		{{"1:a", "b"}},
		{{"a", "1:b"}},
	}
	seen := map[string]int{}
	for i, c := range cases {
		k := Key("d", c)
		if j, dup := seen[k]; dup {
			t.Fatalf("Key(%v) == Key(%v) == %q", c, cases[j], k)
		}
		seen[k] = i
	}
	if Key("d_a", ents("b", "c")) == Key("d", ents("a_b", "c")) {
		t.Fatal("domain and entry collide")
	}
}

// TestLimiterValidates: bad requests are typed errors.
func TestLimiterValidates(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, newFake(time.Unix(0, 0)), envoyExample1)
	neg := int64(-1)
	for name, call := range map[string]func() error{
		"empty domain":   func() error { _, err := l.Check(context.Background(), "", one("a", "b"), 1); return err },
		"no descriptors": func() error { _, err := l.Check(context.Background(), "d", nil, 1); return err },
		"no entries":     func() error { _, err := l.Check(context.Background(), "d", []Descriptor{{}}, 1); return err },
		"empty key":      func() error { _, err := l.Check(context.Background(), "d", one("", "b"), 1); return err },
		"negative hits":  func() error { _, err := l.Check(context.Background(), "d", one("a", "b"), -1); return err },
		"desc hits": func() error {
			_, err := l.Check(context.Background(), "d", []Descriptor{{Entries: ents("a", "b"), Hits: &neg}}, 1)
			return err
		},
	} {
		if err := call(); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: got %v, want ErrInvalidRequest", name, err)
		}
	}
	if _, err := NewLimiter(nil, nil, nil); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("nil checker: got %v, want ErrInvalidRequest", err)
	}
}

// TestSwapIsAtomic reloads under concurrent checks: every Result must come
// whole from one policy version. Each version's rules are named after it, and
// a check carries two descriptors: a Check that looked the policy up per
// descriptor would, during a swap, report rules of two versions.
func TestSwapIsAtomic(t *testing.T) {
	t.Parallel()
	const versions = 200
	policies := make([]*Policy, versions)
	for i := range policies {
		policies[i] = mustParse(t, fmt.Sprintf(`
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1000000, name: a%[1]d}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1000000, name: b%[1]d}
`, i))
	}
	f := newFake(time.Unix(1_700_000_000, 0))
	l, err := NewLimiter(f, policies[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	byVersion := sync.Map{} // version -> policy index
	byVersion.Store(uint64(1), 0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var errs sync.Map
	var total atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			descs := []Descriptor{{Entries: ents("a", "x")}, {Entries: ents("b", "y")}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := l.Check(context.Background(), "d", descs, 1)
				if err != nil {
					errs.Store(w, err)
					return
				}
				total.Add(1)
				a, b := res.Decisions[0].Rule.ID(), res.Decisions[1].Rule.ID()
				if a[1:] != b[1:] {
					errs.Store(w, fmt.Errorf("one check mixed policies: rules %s and %s", a, b))
					return
				}
				if idx, ok := byVersion.Load(res.Version); ok && fmt.Sprint("a", idx) != a {
					errs.Store(w, fmt.Errorf("version %d decided by %s, want a%d", res.Version, a, idx))
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 1; i < versions; i++ {
		v := l.Swap(policies[i])
		byVersion.Store(v, i)
		// Let a few checks run under each version (bounded, so a stuck worker
		// fails below rather than hanging here).
		for seen := total.Load(); total.Load() < seen+3 && time.Now().Before(deadline); {
			runtime.Gosched()
		}
	}
	close(stop)
	wg.Wait()
	errs.Range(func(k, v any) bool {
		t.Errorf("worker %v: %v", k, v)
		return true
	})
	if total.Load() < versions {
		t.Fatalf("%d checks ran during %d swaps, want at least one per version", total.Load(), versions)
	}
}

type countMetrics struct {
	mu      sync.Mutex
	m       map[string]int
	domains map[string]bool
}

func (c *countMetrics) Descriptor(domain, rule string, o Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
		c.domains = map[string]bool{}
	}
	c.m[rule+"|"+string(o)]++
	c.domains[domain] = true
}

func (c *countMetrics) get(rule string, o Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[rule+"|"+string(o)]
}

// TestNoRuleCounted: an unmatched descriptor is counted as no_rule.
func TestNoRuleCounted(t *testing.T) {
	t.Parallel()
	m := &countMetrics{}
	l, _ := NewLimiter(newFake(time.Unix(0, 0)), mustParse(t, envoyExample1), m)
	l.Check(context.Background(), "mongo_cps", one("database", "orders"), 1)
	l.Check(context.Background(), "unknown", one("database", "users"), 1)
	if got := m.get("", OutcomeNoRule); got != 2 {
		t.Fatalf("no_rule count: got %d, want 2", got)
	}
}

// TestMetricsDomainsBounded: the domains reported to Metrics are the
// policy's, and UnknownDomain for 20,000 random ones a caller sends.
func TestMetricsDomainsBounded(t *testing.T) {
	t.Parallel()
	m := &countMetrics{}
	l, _ := NewLimiter(newFake(time.Unix(0, 0)), mustParse(t, envoyExample1), m)
	r := rand.New(rand.NewPCG(23, 4))
	for range 20_000 {
		d := fmt.Sprintf("d-%x", r.Uint64())
		if _, err := l.Check(context.Background(), d, one("database", "users"), 1); err != nil {
			t.Fatal(err)
		}
	}
	l.Check(context.Background(), "mongo_cps", one("database", "users"), 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.domains) != 2 || !m.domains[UnknownDomain] || !m.domains["mongo_cps"] {
		t.Errorf("domains reported: %d (%v...), want exactly %q and mongo_cps", len(m.domains), firstKeys(m.domains, 3), UnknownDomain)
	}
}

func firstKeys(m map[string]bool, n int) []string {
	var out []string
	for k := range m {
		if len(out) == n {
			break
		}
		out = append(out, k)
	}
	return out
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, src string
		line      int
		path, msg string
	}{
		{"unknown top field", "domain: d\nfoo: 1\n", 2, "", `unknown field "foo"`},
		{"unknown descriptor field", "domain: d\ndescriptors:\n  - key: k\n    vaule: x\n", 4, "d", `unknown field "vaule"`},
		{"unknown rate_limit field", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burts: 3\n", 7, "d/k", `unknown field "burts"`},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", 5, "d/k=v", "invalid rate limit unit"},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", 4, "d/k", "unlimited rule must not set unit"},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", 4, "d/k", "needs unit"},
		{"no requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n", 4, "d/k", "needs requests_per_unit"},
		{"negative rpu", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", 4, "d/k", "outside 0.."},
		{"rpu not int", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: lots}\n", 4, "d/k", "must be an integer"},
		{"unit and period", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, period: 2s, requests_per_unit: 1}\n", 4, "d/k", "both unit and period"},
		{"bad period", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {period: 2 weeks, requests_per_unit: 1}\n", 4, "d/k", "period"},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}\n", 4, "d/k", "algorithm"},
		{"burst on window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n", 4, "d/k", "burst applies to gcra and token_bucket"},
		{"impossible gcra", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {period: 1ns, requests_per_unit: 10, algorithm: gcra}\n", 4, "d/k", "impossible limit"},
		{"impossible log", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100000, algorithm: sliding_window_log}\n", 4, "d/k", "impossible limit"},
		{"penalty field", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, penalty: {denials: 5, within: 1m}}\n", 4, "d/k", "penalty needs ban"},
		{"penalty denials", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, penalty: {denials: 0, within: 1m, ban: 1m}}\n", 4, "d/k", "penalty denials 0 outside"},
		{"duplicate descriptor", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", 5, "d/k=v", "duplicate descriptor"},
		{"duplicate field", "domain: d\ndomain: e\n", 2, "", `field "domain" repeated`},
		{"no domain", "descriptors: []\n", 1, "", "domain is missing"},
		{"empty key", "domain: d\ndescriptors:\n  - key: \"\"\n", 3, "d", "empty key"},
		{"no key", "domain: d\ndescriptors:\n  - value: v\n", 3, "d", "no key"},
		{"nested path", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    descriptors:\n      - key: c\n        rate_limit: {unit: eon, requests_per_unit: 1}\n", 7, "d/a=b/c", "invalid rate limit unit"},
		{"duplicate domain", "domain: d\n---\ndomain: d\n", 3, "d", "defined twice"},
		{"shadow not bool", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: yes please\n", 4, "d/k", "true or false"},
		{"descriptors not list", "domain: d\ndescriptors: {key: k}\n", 2, "d", "must be a list"},
		{"yaml syntax", "domain: d\ndescriptors:\n  - key: [\n", 3, "", "yaml"},
		{"empty file", "", 0, "", "empty"},
		{"replaces self", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n", 4, "d/k", "replaces names the rule itself"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("policy.yaml", []byte(tt.src))
			var le *LoadError
			if !errors.As(err, &le) || !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("got %v, want a *LoadError wrapping ErrInvalidPolicy", err)
			}
			if le.File != "policy.yaml" || le.Line != tt.line || le.Path != tt.path || !strings.Contains(le.Msg, tt.msg) {
				t.Fatalf("got file %q line %d path %q msg %q; want policy.yaml line %d path %q msg containing %q",
					le.File, le.Line, le.Path, le.Msg, tt.line, tt.path, tt.msg)
			}
			if !strings.HasPrefix(err.Error(), "policy.yaml") {
				t.Fatalf("error text %q does not start with the file name", err)
			}
		})
	}
}

// TestExtensions: algorithm, burst, period, penalty and their defaults.
func TestExtensions(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
domain: d
descriptors:
  - key: g
    rate_limit: {unit: minute, requests_per_unit: 30, algorithm: gcra}
  - key: g15
    rate_limit: {unit: minute, requests_per_unit: 30, algorithm: gcra, burst: 15}
  - key: tb
    rate_limit: {period: 90s, requests_per_unit: 10, algorithm: token_bucket}
  - key: log
    rate_limit: {period: 250ms, requests_per_unit: 3, algorithm: sliding_window_log,
                 penalty: {denials: 5, within: 1m, ban: 10m}}
`)
	for _, tt := range []struct {
		key  string
		want algo.Limit
		pen  node.Penalty
	}{
		{"g", algo.Limit{Kind: algo.GCRA, Limit: 30, Period: time.Minute, Burst: 29}, node.Penalty{}},
		{"g15", algo.Limit{Kind: algo.GCRA, Limit: 30, Period: time.Minute, Burst: 15}, node.Penalty{}},
		{"tb", algo.Limit{Kind: algo.TokenBucket, Limit: 10, Period: 90 * time.Second, Burst: 10}, node.Penalty{}},
		{"log", algo.Limit{Kind: algo.SlidingWindowLog, Limit: 3, Period: 250 * time.Millisecond},
			node.Penalty{Denials: 5, Within: time.Minute, Ban: 10 * time.Minute}},
	} {
		r := p.Lookup("d", ents(tt.key, "x"))
		if r == nil || r.Limit != tt.want || r.Penalty != tt.pen {
			t.Errorf("%s: got %+v, want limit %+v penalty %+v", tt.key, r, tt.want, tt.pen)
		}
	}
	if p.Rules() != 4 {
		t.Errorf("Rules: got %d, want 4", p.Rules())
	}
}

// TestLoadFiles: Load reads several files, and a domain may not repeat across
// them.
func TestLoadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, src string) string {
		path := dir + "/" + name
		if err := writeFile(path, src); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a, b := write("a.yaml", envoyExample1), write("b.yaml", envoyExample2)
	p, err := Load(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if p.Lookup("messaging", ents("to_number", "1")) == nil || p.Lookup("mongo_cps", ents("database", "users")) == nil {
		t.Fatal("a domain of one of the files is missing")
	}
	_, err = Load(a, write("c.yaml", envoyExample1))
	var le *LoadError
	if !errors.As(err, &le) || !strings.HasSuffix(le.File, "c.yaml") {
		t.Fatalf("duplicate domain across files: got %v, want a LoadError in c.yaml", err)
	}
	if _, err := Load(dir + "/missing.yaml"); err == nil {
		t.Fatal("missing file: got nil error")
	}
}

// TestWindowBoundariesAsEnvoy: windows start where envoyproxy/ratelimit's do
// (now - now mod unit, from the Unix epoch): WEEK on Thursdays 00:00 UTC
// (1970-01-01 was a Thursday), MONTH every 30 days (2026-11-03 is day 692×30),
// YEAR every 365 days (2026-12-18 is day 57×365), not calendar weeks, months
// or years.
func TestWindowBoundariesAsEnvoy(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		unit     string
		boundary time.Time
	}{
		{"day", time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)},
		{"week", time.Date(2026, 11, 19, 0, 0, 0, 0, time.UTC)},
		{"month", time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)},
		{"year", time.Date(2026, 12, 18, 0, 0, 0, 0, time.UTC)},
	} {
		f := newFake(tt.boundary.Add(-time.Second))
		l := newLimiter(t, f, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: "+tt.unit+", requests_per_unit: 1}\n")
		ctx := context.Background()
		if res, _ := l.Check(ctx, "d", one("k", "v"), 1); !res.Allowed {
			t.Fatalf("%s: first check before the boundary denied", tt.unit)
		}
		res, _ := l.Check(ctx, "d", one("k", "v"), 1)
		if res.Allowed || res.Decisions[0].RetryAfter != time.Second {
			t.Fatalf("%s: second check: got allowed=%v RetryAfter %v, want denied for 1s (until %v)", tt.unit, res.Allowed, res.Decisions[0].RetryAfter, tt.boundary)
		}
		f.set(tt.boundary)
		if res, _ := l.Check(ctx, "d", one("k", "v"), 1); !res.Allowed {
			t.Fatalf("%s: at the boundary %v: denied, want a new window", tt.unit, tt.boundary)
		}
	}
}
