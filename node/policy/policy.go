// Package policy names rate limits: a YAML policy file in envoyproxy/ratelimit's
// configuration format (domains, nested descriptors, rate_limit, shadow_mode)
// says which limit applies to a request described by a domain and a list of
// descriptors, and a Limiter applies the matched rules on a ringlimit node.
//
// Data flows in three steps. Parse or Load reads the file(s) once into an
// immutable Policy: a tree per domain, every error a *LoadError naming the file,
// line and descriptor path. Policy.Lookup walks a descriptor's entries down the
// tree exactly as envoyproxy/ratelimit does (key+value first, then a value
// prefix ending in "*", then the key-only default; a rule applies only at the
// depth of the last entry). Limiter.Check looks every descriptor up in the
// policy it holds (one atomic load per check, so a reload is seen whole or not
// at all), builds each matched descriptor's key with Key (domain and entries,
// length-prefixed, so distinct descriptor lists never share a key), asks the
// node to decide it on the key's owner (with the rule's penalty), and folds
// shadow mode and unlimited rules into per-descriptor Decisions and an overall
// verdict.
//
// Envoy's format is read unchanged; the extensions (algorithm, burst, period,
// penalty inside rate_limit, and default_rate_limit at the top level) are
// optional. See Parse for every field and rule.
package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// ErrInvalidPolicy is wrapped by every *LoadError: the policy file cannot be
// loaded (YAML syntax, unknown field, bad value, impossible limit, duplicate
// domain or descriptor).
var ErrInvalidPolicy = errors.New("policy: invalid policy file")

// ErrInvalidRequest is matched by the error of Limiter.Check for a request that
// cannot be decided: an empty domain, no descriptors, a descriptor without
// entries, an entry with an empty key, hits outside 0..algo.MaxHits, or a check
// the node refuses. The error holds a *node.InputError naming the field
// (node.Message gives its text) and node.Classify sorts it as ClassInvalid.
var ErrInvalidRequest = errors.New("policy: invalid request")

// LoadError is a policy file error: where it is and what is wrong.
type LoadError struct {
	// File is the file name given to Parse or Load.
	File string
	// Line and Column locate the offending YAML node (1-based; 0 when unknown).
	Line, Column int
	// Path is the descriptor path of the offending node, "domain/key=value/key",
	// or "" at the top of a document.
	Path string
	// Msg says what is wrong.
	Msg string
}

// Error returns "file:line:col: path: msg".
func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalidPolicy.
func (e *LoadError) Unwrap() error { return ErrInvalidPolicy }

// Unit is an envoyproxy/ratelimit rate-limit unit: a fixed window aligned to
// the Unix epoch (window start = now - now mod unit), as their service computes
// it (utils.UnitToDivider). DAY windows therefore start at UTC midnight, WEEK
// windows on Thursdays 00:00 UTC (the epoch's weekday), MONTH is 30 days and
// YEAR 365 days counted from the epoch, not calendar months or years.
type Unit uint8

// The units of envoyproxy/ratelimit's rate_limit.unit (case-insensitive in the
// file).
const (
	UnitNone Unit = iota // the rule gives a period instead (extension)
	Second
	Minute
	Hour
	Day
	Week
	Month
	Year
)

// unitName returns the name of u as Envoy spells it, "" for UnitNone, and
// false for a Unit that has none.
func unitName(u Unit) (string, bool) {
	switch u {
	case UnitNone:
		return "", true
	case Second:
		return "SECOND", true
	case Minute:
		return "MINUTE", true
	case Hour:
		return "HOUR", true
	case Day:
		return "DAY", true
	case Week:
		return "WEEK", true
	case Month:
		return "MONTH", true
	case Year:
		return "YEAR", true
	}
	return "", false
}

// String returns the unit's name as Envoy spells it ("SECOND" .. "YEAR"), "" for
// UnitNone.
func (u Unit) String() string {
	if name, ok := unitName(u); ok {
		return name
	}
	return "unit(" + strconv.Itoa(int(u)) + ")"
}

// Duration returns the unit's window length: 1s, 1m, 1h, 24h, 7×24h, 30×24h,
// 365×24h; 0 for UnitNone.
func (u Unit) Duration() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 30 * day
	case Year:
		return 365 * day
	}
	return 0
}

func parseUnit(s string) (Unit, bool) {
	up := strings.ToUpper(s)
	for u := Second; u <= Year; u++ {
		if name, _ := unitName(u); name == up {
			return u, true
		}
	}
	return UnitNone, false
}

// Rule is a rate_limit block of the policy file, resolved.
type Rule struct {
	// Domain is the rule's domain.
	Domain string
	// Path is the descriptor path of the rule, "domain/key=value/key" (a
	// key-only entry has no "="), or "domain/<default>" for default_rate_limit.
	Path string
	// Name is rate_limit.name ("" when not given).
	Name string
	// Replaces lists the names in rate_limit.replaces: when this rule applies to
	// one descriptor of a check, descriptors whose rule has one of these names
	// are not limited by that check (envoyproxy/ratelimit's replaces).
	Replaces []string
	// Unlimited is rate_limit.unlimited: the descriptor matches and is never
	// limited; the node is not asked.
	Unlimited bool
	// RequestsPerUnit is rate_limit.requests_per_unit. 0 (as in Envoy's
	// blocklist example) denies every check without asking the node.
	RequestsPerUnit int64
	// Unit is rate_limit.unit, or UnitNone when the rule gives period.
	Unit Unit
	// Limit is the limit the node applies: Kind from algorithm (default
	// FixedWindow, Envoy's), Limit = RequestsPerUnit, Period = the unit's
	// length or period, Burst from burst (see Parse for its default). Zero for
	// unlimited and blocking rules.
	Limit algo.Limit
	// ShadowMode is the descriptor's shadow_mode: the rule is decided and
	// counted, never enforced.
	ShadowMode bool
	// Penalty is rate_limit.penalty; zero when none.
	Penalty node.Penalty
	// File and Line locate the rate_limit block.
	File string
	Line int
}

// ID returns the rule's name when it has one, else its path: what a Decision
// and the metrics call the rule.
func (r *Rule) ID() string {
	if r.Name != "" {
		return r.Name
	}
	return r.Path
}

// Blocks reports whether the rule denies every check (requests_per_unit 0).
func (r *Rule) Blocks() bool { return !r.Unlimited && r.RequestsPerUnit == 0 }

// Entry is one key/value pair of a descriptor. Keys and values are
// case-sensitive.
type Entry struct {
	Key, Value string
}

// Descriptor is one descriptor of a check: its entries, in order, and
// optionally its own hits.
type Descriptor struct {
	// Entries are walked down the policy tree in order; at least one.
	Entries []Entry
	// Hits, when not nil, replaces the check's hits for this descriptor
	// (Envoy's per-descriptor hits_addend; 0 peeks).
	Hits *int64
}

// Policy is a loaded policy file: immutable, safe for concurrent use.
type Policy struct {
	domains map[string]*domainTree
	files   []string
	rules   int
}

type domainTree struct {
	name string
	root level
	def  *Rule // default_rate_limit, nil if none
}

// level is one nesting level of descriptors.
type level struct {
	exact    map[Entry]*dnode  // key+value entries
	wildcard []wildNode        // values ending in "*", in file order
	byKey    map[string]*dnode // key-only entries (the default for the key)
}

type wildNode struct {
	key, prefix string
	n           *dnode
}

type dnode struct {
	rule *Rule
	next level
}

func (l *level) empty() bool { return len(l.exact) == 0 && len(l.wildcard) == 0 && len(l.byKey) == 0 }

// find returns the entry's node at this level: key+value, then the first
// wildcard whose key equals and whose prefix the value has, then key only.
func (l *level) find(e Entry) *dnode {
	if n := l.exact[e]; n != nil {
		return n
	}
	for i := range l.wildcard {
		w := &l.wildcard[i]
		if w.key == e.Key && strings.HasPrefix(e.Value, w.prefix) {
			return w.n
		}
	}
	return l.byKey[e.Key]
}

// Domains returns the names of the loaded domains, in no particular order.
func (p *Policy) Domains() []string {
	out := make([]string, 0, len(p.domains))
	for d := range p.domains {
		out = append(out, d)
	}
	return out
}

// HasDomain reports whether the policy has domain (false for a nil Policy).
func (p *Policy) HasDomain(domain string) bool {
	if p == nil {
		return false
	}
	_, ok := p.domains[domain]
	return ok
}

// Rules returns the number of rate_limit blocks loaded (default rules
// included).
func (p *Policy) Rules() int { return p.rules }

// Files returns the file names the policy was loaded from.
func (p *Policy) Files() []string { return append([]string(nil), p.files...) }

// Lookup returns the rule that applies to entries in domain, as
// envoyproxy/ratelimit's GetLimit decides it: the entries walk the tree one
// level each, at each level key+value first, then a "value*" prefix, then the
// key-only default; a rule applies only when it sits at the level of the last
// entry; the walk stops where a node has no nested descriptors. When nothing
// applies it returns the domain's default_rate_limit, or nil (no limit). An
// unknown domain has no rules (nil).
func (p *Policy) Lookup(domain string, entries []Entry) *Rule {
	if p == nil {
		return nil
	}
	d := p.domains[domain]
	if d == nil {
		return nil
	}
	lv := &d.root
	for i, e := range entries {
		n := lv.find(e)
		if n == nil {
			break
		}
		if i == len(entries)-1 {
			if n.rule != nil {
				return n.rule
			}
			break
		}
		if n.next.empty() {
			break
		}
		lv = &n.next
	}
	return d.def
}

// Key returns the stored key of a descriptor in domain: "rl:" followed by the
// domain and each entry's key and value, each as <decimal length>":"<bytes>.
// The encoding is injective: no two distinct (domain, entries) give the same
// key, whatever bytes they contain.
func Key(domain string, entries []Entry) string {
	n := 3 + len(domain) + 4
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 8
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString("rl:")
	writeField(&b, domain)
	for _, e := range entries {
		writeField(&b, e.Key)
		writeField(&b, e.Value)
	}
	return b.String()
}

func writeField(b *strings.Builder, s string) {
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], int64(len(s)), 10))
	b.WriteByte(':')
	b.WriteString(s)
}
