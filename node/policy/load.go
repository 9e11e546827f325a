package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// ErrNotRegular is wrapped by Load's error for a path that is not a regular
// file (a FIFO would block the reader until a writer comes).
var ErrNotRegular = errors.New("policy: not a regular file")

// openRegular opens path for reading without blocking on a FIFO and returns it
// only if it is a regular file.
func openRegular(path string) (*os.File, error) {
	fh, err := openNonBlocking(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("policy: %w", err)
	}
	if !st.Mode().IsRegular() {
		fh.Close()
		return nil, fmt.Errorf("%w: %s is a %v", ErrNotRegular, path, fileKind(st.Mode()))
	}
	return fh, nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m.IsDir():
		return "directory"
	case m&os.ModeDevice != 0:
		return "device"
	case m&os.ModeSocket != 0:
		return "socket"
	}
	return "special file (" + m.Type().String() + ")"
}

// MaxFileSize is the largest policy file Parse and Load accept (16 MiB).
const MaxFileSize = 16 << 20

// MaxDepth is the deepest descriptor nesting a policy may have (32 levels).
const MaxDepth = 32

// Load reads and parses the named files into one Policy (see Parse). Two files
// may not define the same domain. Each must be a regular file (or a symbolic
// link to one): a FIFO, device or directory wraps ErrNotRegular, decided
// without blocking on it. Errors are *LoadError (wrapping ErrInvalidPolicy),
// ErrNotRegular or the file system's error.
func Load(files ...string) (*Policy, error) {
	p := &Policy{domains: make(map[string]*domainTree)}
	for _, f := range files {
		fh, err := openRegular(f)
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("policy: %s: %w", f, err)
		}
		if err := p.parse(f, data); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Parse parses one policy file's content; name is used in errors (the file
// name). A file holds one or more YAML documents ("---" between them), each one
// domain in envoyproxy/ratelimit's format:
//
//	domain: <name, required, unique>
//	default_rate_limit: <rate_limit block>   # extension: applies when no rule does
//	descriptors:
//	  - key: <required>
//	    value: <optional; a trailing "*" matches any value with that prefix>
//	    rate_limit:                          # optional
//	      unit: second|minute|hour|day|week|month|year   # or period (extension)
//	      requests_per_unit: <0..2^31>       # required unless unlimited; 0 blocks
//	      unlimited: <bool>                  # no unit, no other field
//	      name: <optional>
//	      replaces: [{name: <name>}, ...]
//	      algorithm: <a name of algo.KindNames, e.g. gcra>
//	      burst: <hits>                      # gcra and token_bucket only
//	      period: <Go duration, e.g. 90s>    # instead of unit
//	      penalty: {denials: <1..1024>, within: <duration>, ban: <duration>}
//	    shadow_mode: <bool>
//	    detailed_metric: <bool>              # accepted; metrics only in Envoy, no effect here
//	    descriptors: [<nested descriptors>]
//
// Without algorithm a rule is a FixedWindow of requests_per_unit per unit,
// aligned to the epoch like Envoy's windows. Without burst, GCRA gets
// Burst = requests_per_unit-1 and TokenBucket Burst = requests_per_unit, so every
// algorithm admits requests_per_unit hits at once on a fresh key.
//
// Strict: an unknown or repeated field, a value of the wrong type, a missing
// key or domain, a duplicate key/value at one level, a duplicate domain, a
// limit algo.Limit.Validate rejects, or nesting deeper than MaxDepth is a
// *LoadError naming the line and descriptor path.
func Parse(name string, data []byte) (*Policy, error) {
	p := &Policy{domains: make(map[string]*domainTree)}
	if err := p.parse(name, data); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Policy) parse(name string, data []byte) error {
	p.files = append(p.files, name)
	if len(data) > MaxFileSize {
		return &LoadError{File: name, Msg: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	docs := 0
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return &LoadError{File: name, Line: yamlErrLine(err), Msg: err.Error()}
		}
		docs++
		if len(doc.Content) == 0 {
			continue
		}
		l := &loader{file: name, p: p}
		if err := l.document(doc.Content[0]); err != nil {
			return err
		}
	}
	if docs == 0 {
		return &LoadError{File: name, Msg: "no domain: the file is empty"}
	}
	return nil
}

// yamlErrLine extracts "line N" from a yaml.v3 syntax error (it has no typed
// position), 0 when absent.
func yamlErrLine(err error) int {
	s := err.Error()
	i := strings.Index(s, "line ")
	if i < 0 {
		return 0
	}
	s = s[i+5:]
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	n, _ := strconv.Atoi(s[:j])
	return n
}

type loader struct {
	file string
	p    *Policy
}

func (l *loader) errf(n *yaml.Node, path string, format string, args ...any) error {
	e := &LoadError{File: l.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// fields checks that n is a mapping with only the allowed keys, each at most
// once, and returns key -> (key node, value node).
func (l *loader) fields(n *yaml.Node, path, what string, allowed ...string) (map[string][2]*yaml.Node, error) {
	if n.Kind == yaml.AliasNode {
		return nil, l.errf(n, path, "%s: YAML aliases are not supported", what)
	}
	if n.Kind != yaml.MappingNode {
		return nil, l.errf(n, path, "%s must be a mapping, got %s", what, kindName(n))
	}
	out := make(map[string][2]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, l.errf(k, path, "%s: field names must be strings", what)
		}
		known := false
		for _, a := range allowed {
			if a == k.Value {
				known = true
				break
			}
		}
		if !known {
			return nil, l.errf(k, path, "%s: unknown field %q (want one of %s)", what, k.Value, strings.Join(allowed, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, l.errf(k, path, "%s: field %q repeated", what, k.Value)
		}
		if v.Kind == yaml.AliasNode {
			return nil, l.errf(v, path, "%s: YAML aliases are not supported", what)
		}
		out[k.Value] = [2]*yaml.Node{k, v}
	}
	return out, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an alias"
}

func (l *loader) str(n *yaml.Node, path, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", l.errf(n, path, "%s must be a string, got %s", field, kindName(n))
	}
	return n.Value, nil
}

func (l *loader) boolean(n *yaml.Node, path, field string) (bool, error) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		return false, l.errf(n, path, "%s must be true or false, got %s", field, kindName(n))
	}
	return b, nil
}

func (l *loader) integer(n *yaml.Node, path, field string, lo, hi int64) (int64, error) {
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		return 0, l.errf(n, path, "%s must be an integer, got %s", field, kindName(n))
	}
	if v < lo || v > hi {
		return 0, l.errf(n, path, "%s %d outside %d..%d", field, v, lo, hi)
	}
	return v, nil
}

func (l *loader) duration(n *yaml.Node, path, field string) (time.Duration, error) {
	s, err := l.str(n, path, field)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, l.errf(n, path, "%s: %v", field, err)
	}
	if d <= 0 || d > algo.MaxDuration {
		return 0, l.errf(n, path, "%s %s must be above 0 and at most %v", field, s, algo.MaxDuration)
	}
	return d, nil
}

func (l *loader) document(n *yaml.Node) error {
	f, err := l.fields(n, "", "document", "domain", "descriptors", "default_rate_limit")
	if err != nil {
		return err
	}
	dn, ok := f["domain"]
	if !ok {
		return l.errf(n, "", "domain is missing")
	}
	name, err := l.str(dn[1], "", "domain")
	if err != nil {
		return err
	}
	if name == "" {
		return l.errf(dn[1], "", "domain is empty")
	}
	if _, dup := l.p.domains[name]; dup {
		return l.errf(dn[1], name, "domain %q is defined twice", name)
	}
	d := &domainTree{name: name}
	if dr, ok := f["default_rate_limit"]; ok {
		path := name + "/<default>"
		d.def, err = l.rateLimit(dr[1], name, path, false)
		if err != nil {
			return err
		}
	}
	if ds, ok := f["descriptors"]; ok {
		if err := l.descriptors(ds[1], name, name, &d.root, 1); err != nil {
			return err
		}
	}
	l.p.domains[name] = d
	return nil
}

func (l *loader) descriptors(n *yaml.Node, domain, parent string, lv *level, depth int) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return l.errf(n, parent, "descriptors must be a list, got %s", kindName(n))
	}
	if depth > MaxDepth {
		return l.errf(n, parent, "descriptors nested deeper than %d levels", MaxDepth)
	}
	for _, dn := range n.Content {
		f, err := l.fields(dn, parent, "descriptor", "key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric")
		if err != nil {
			return err
		}
		kn, ok := f["key"]
		if !ok {
			return l.errf(dn, parent, "descriptor has no key")
		}
		key, err := l.str(kn[1], parent, "key")
		if err != nil {
			return err
		}
		if key == "" {
			return l.errf(kn[1], parent, "descriptor has an empty key")
		}
		var value string
		if vn, ok := f["value"]; ok {
			if value, err = l.str(vn[1], parent, "value"); err != nil {
				return err
			}
		}
		path := parent + "/" + key
		if value != "" {
			path += "=" + value
		}
		shadow := false
		if sn, ok := f["shadow_mode"]; ok {
			if shadow, err = l.boolean(sn[1], path, "shadow_mode"); err != nil {
				return err
			}
		}
		if mn, ok := f["detailed_metric"]; ok {
			if _, err = l.boolean(mn[1], path, "detailed_metric"); err != nil {
				return err
			}
		}
		nd := &dnode{}
		if rn, ok := f["rate_limit"]; ok {
			if nd.rule, err = l.rateLimit(rn[1], domain, path, shadow); err != nil {
				return err
			}
		}
		if sub, ok := f["descriptors"]; ok {
			if err := l.descriptors(sub[1], domain, path, &nd.next, depth+1); err != nil {
				return err
			}
		}
		switch {
		case value == "":
			if lv.byKey == nil {
				lv.byKey = make(map[string]*dnode)
			}
			if lv.byKey[key] != nil {
				return l.errf(dn, path, "duplicate descriptor: key %q without value appears twice at this level", key)
			}
			lv.byKey[key] = nd
		case strings.HasSuffix(value, "*"):
			prefix := strings.TrimSuffix(value, "*")
			for _, w := range lv.wildcard {
				if w.key == key && w.prefix == prefix {
					return l.errf(dn, path, "duplicate descriptor: key %q value %q appears twice at this level", key, value)
				}
			}
			lv.wildcard = append(lv.wildcard, wildNode{key: key, prefix: prefix, n: nd})
		default:
			if lv.exact == nil {
				lv.exact = make(map[Entry]*dnode)
			}
			e := Entry{Key: key, Value: value}
			if lv.exact[e] != nil {
				return l.errf(dn, path, "duplicate descriptor: key %q value %q appears twice at this level", key, value)
			}
			lv.exact[e] = nd
		}
	}
	return nil
}

func (l *loader) rateLimit(n *yaml.Node, domain, path string, shadow bool) (*Rule, error) {
	f, err := l.fields(n, path, "rate_limit", "unit", "requests_per_unit", "unlimited", "name", "replaces",
		"algorithm", "burst", "period", "penalty")
	if err != nil {
		return nil, err
	}
	r := &Rule{Domain: domain, Path: path, ShadowMode: shadow, File: l.file, Line: n.Line}
	l.p.rules++
	if nn, ok := f["name"]; ok {
		if r.Name, err = l.str(nn[1], path, "name"); err != nil {
			return nil, err
		}
	}
	if rn, ok := f["replaces"]; ok {
		if rn[1].Kind != yaml.SequenceNode {
			return nil, l.errf(rn[1], path, "replaces must be a list, got %s", kindName(rn[1]))
		}
		for _, e := range rn[1].Content {
			ef, err := l.fields(e, path, "replaces entry", "name")
			if err != nil {
				return nil, err
			}
			en, ok := ef["name"]
			if !ok {
				return nil, l.errf(e, path, "replaces entry has no name")
			}
			s, err := l.str(en[1], path, "replaces name")
			if err != nil {
				return nil, err
			}
			if s == "" {
				return nil, l.errf(en[1], path, "replaces entry has an empty name")
			}
			if s == r.Name {
				return nil, l.errf(en[1], path, "replaces names the rule itself (%q)", s)
			}
			r.Replaces = append(r.Replaces, s)
		}
	}
	if un, ok := f["unlimited"]; ok {
		if r.Unlimited, err = l.boolean(un[1], path, "unlimited"); err != nil {
			return nil, err
		}
	}
	if r.Unlimited {
		for _, k := range []string{"unit", "requests_per_unit", "algorithm", "burst", "period", "penalty"} {
			if kn, ok := f[k]; ok {
				return nil, l.errf(kn[0], path, "unlimited rule must not set %s", k)
			}
		}
		return r, nil
	}
	un, hasUnit := f["unit"]
	pn, hasPeriod := f["period"]
	switch {
	case hasUnit && hasPeriod:
		return nil, l.errf(pn[0], path, "rate_limit sets both unit and period; give one")
	case hasUnit:
		s, err := l.str(un[1], path, "unit")
		if err != nil {
			return nil, err
		}
		u, ok := parseUnit(s)
		if !ok {
			return nil, l.errf(un[1], path, "invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", s)
		}
		r.Unit = u
		r.Limit.Period = u.Duration()
	case hasPeriod:
		if r.Limit.Period, err = l.duration(pn[1], path, "period"); err != nil {
			return nil, err
		}
	default:
		return nil, l.errf(n, path, "rate_limit needs unit (or period), or unlimited: true")
	}
	rpu, ok := f["requests_per_unit"]
	if !ok {
		return nil, l.errf(n, path, "rate_limit needs requests_per_unit")
	}
	if r.RequestsPerUnit, err = l.integer(rpu[1], path, "requests_per_unit", 0, algo.MaxHits); err != nil {
		return nil, err
	}
	r.Limit.Kind = algo.FixedWindow
	if an, ok := f["algorithm"]; ok {
		s, err := l.str(an[1], path, "algorithm")
		if err != nil {
			return nil, err
		}
		if r.Limit.Kind, err = algo.ParseKind(s); err != nil {
			return nil, l.errf(an[1], path, "algorithm: %v", err)
		}
	}
	r.Limit.Limit = r.RequestsPerUnit
	bn, hasBurst := f["burst"]
	switch {
	case hasBurst && r.Limit.Kind != algo.GCRA && r.Limit.Kind != algo.TokenBucket:
		return nil, l.errf(bn[0], path, "burst applies to gcra and token_bucket only, not %s", r.Limit.Kind)
	case hasBurst:
		if r.Limit.Burst, err = l.integer(bn[1], path, "burst", 0, math.MaxInt64); err != nil {
			return nil, err
		}
	case r.Limit.Kind == algo.GCRA:
		r.Limit.Burst = max(r.RequestsPerUnit-1, 0)
	case r.Limit.Kind == algo.TokenBucket:
		r.Limit.Burst = r.RequestsPerUnit
	}
	if pen, ok := f["penalty"]; ok {
		if r.Penalty, err = l.penalty(pen[1], path); err != nil {
			return nil, err
		}
	}
	if r.RequestsPerUnit == 0 {
		if hasBurst || r.Penalty != (node.Penalty{}) {
			return nil, l.errf(rpu[1], path, "requests_per_unit 0 blocks every check; burst and penalty make no sense with it")
		}
		r.Limit = algo.Limit{}
		return r, nil
	}
	if err := r.Limit.Validate(); err != nil {
		return nil, l.errf(n, path, "impossible limit: %v", err)
	}
	return r, nil
}

func (l *loader) penalty(n *yaml.Node, path string) (node.Penalty, error) {
	f, err := l.fields(n, path, "penalty", "denials", "within", "ban")
	if err != nil {
		return node.Penalty{}, err
	}
	for _, k := range []string{"denials", "within", "ban"} {
		if _, ok := f[k]; !ok {
			return node.Penalty{}, l.errf(n, path, "penalty needs %s", k)
		}
	}
	var p node.Penalty
	if p.Denials, err = l.integer(f["denials"][1], path, "penalty denials", 1, node.MaxPenaltyDenials); err != nil {
		return p, err
	}
	if p.Within, err = l.duration(f["within"][1], path, "penalty within"); err != nil {
		return p, err
	}
	if p.Ban, err = l.duration(f["ban"][1], path, "penalty ban"); err != nil {
		return p, err
	}
	return p, nil
}
