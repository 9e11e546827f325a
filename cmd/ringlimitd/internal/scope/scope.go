// Package scope bounds what each client credential may do on the client
// doors: which keys it may check with its own limits, whether it may send
// limits at all or only name the policy file's descriptors, the longest period
// and largest limit it may ask for, which policy domains it may use, and how
// many keys it may create through this node.
//
// Data flow: Load reads --client-scopes-file (YAML, unknown fields refused)
// into Scopes: a default scope for every credential the file does not name,
// and one per credential name (a bearer token's name in the token file, or a
// client certificate's name; insecure callers have none and get the
// default). The daemon wraps the checker of every door with Direct (checks
// that carry their own limit) and the policy file's checker with Policy
// (descriptor checks, after the policy chose the limit); both find the
// caller's name in the request context and refuse out-of-scope checks with a
// *node.PermissionError matching ErrOutOfScope and node.ErrPermissionDenied,
// which each door answers as permission denied (HTTP 403, gRPC
// PermissionDenied, RESP -NOPERM), never as a decision nor as invalid input.
//
// A credential at its key cap gets a *node.KeyTableFullError (node.ClassFull:
// HTTP 503 with Retry-After, gRPC ResourceExhausted, RESP -OOM), as a full
// node does. The key cap counts, per credential, the distinct keys it checked through
// this node whose state may still be held (a key counts for algo.Limit.Hold
// after its last check: its period, or longer when a burst takes longer to
// drain); it is node-local: a credential spread over n
// nodes may create up to n times MaxKeys.
package scope

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// PolicyPrefix starts every key the policy file's descriptors build
// (policy.Key): no direct check may use it, whatever its scope, so a caller
// cannot lock a descriptor's key under a limit of its own.
const PolicyPrefix = "rl:"

// DefaultMaxPeriod is the default scope's MaxPeriod: 31 days.
const DefaultMaxPeriod = 31 * 24 * time.Hour

// Named errors of package scope.
var (
	// ErrOutOfScope is matched, with node.ErrPermissionDenied, by every
	// refusal of a check outside the caller's scope.
	ErrOutOfScope = errors.New("scope: outside the caller's scope")
	// ErrNotAdmin is matched, with ErrOutOfScope, by the refusal of a key
	// operation to a credential without the admin permission.
	ErrNotAdmin = fmt.Errorf("%w: no admin permission", ErrOutOfScope)
	// ErrFile is wrapped by every error of Load and Parse.
	ErrFile = errors.New("scope: invalid scopes file")
)

// Scope is what one credential may do. The zero value allows nothing but
// descriptor checks in any domain.
type Scope struct {
	// OwnLimits allows checks that carry their own limit (HTTP /v1/check,
	// gRPC Check, CL.THROTTLE, RL.CHECK). false: only the policy file's
	// descriptors (envoyproxy/ratelimit's model). Default true.
	OwnLimits bool `yaml:"own_limits"`
	// KeyPrefixes, when not empty, are the prefixes a key checked with an
	// own limit must start with. Default: any key (but PolicyPrefix).
	KeyPrefixes []string `yaml:"key_prefixes"`
	// Domains, when not empty, are the policy domains the credential may
	// check descriptors in. Default: any.
	Domains []string `yaml:"domains"`
	// MaxPeriod is the longest period (or window) an own limit may have;
	// 0: no bound. Default DefaultMaxPeriod.
	MaxPeriod time.Duration `yaml:"max_period"`
	// MaxLimit is the largest limit or burst an own limit may have, in hits;
	// 0: no bound. Default 0.
	MaxLimit int64 `yaml:"max_limit"`
	// MaxKeys bounds the keys the credential may hold through this node at
	// once (a key counts as long as the node may keep its state after the
	// credential's last check of it: algo.Limit.Hold, its period for most
	// limits, longer for a burst above the limit);
	// 0: no bound but the node's --max-keys. Default 0. A new key beyond it
	// is refused with a *node.KeyTableFullError (the doors' "key table
	// full" answer, with when the credential's earliest key frees).
	MaxKeys int `yaml:"max_keys"`
	// Admin allows the key operations: inspect, reset and unban a key
	// (HTTP /v1/keys/..., gRPC InspectKey/ResetKey/UnbanKey, RESP DEL).
	// Default false.
	Admin bool `yaml:"admin"`
}

// DefaultScope is the scope of every credential when no scopes file says
// otherwise: own limits on any key but PolicyPrefix's, any domain, periods
// up to DefaultMaxPeriod, no limit or key cap.
func DefaultScope() Scope {
	return Scope{OwnLimits: true, MaxPeriod: DefaultMaxPeriod}
}

// Scopes maps credential names to their scope. Safe for concurrent use.
type Scopes struct {
	def     Scope
	clients map[string]Scope
	now     func() time.Time

	mu   sync.Mutex
	held map[string]*keySet // by credential name, for MaxKeys
}

type keySet struct {
	until map[string]time.Time // key -> when its state is surely idle
}

// Default returns Scopes giving every credential DefaultScope.
func Default() *Scopes { return newScopes(DefaultScope(), nil) }

func newScopes(def Scope, clients map[string]Scope) *Scopes {
	return &Scopes{def: def, clients: clients, now: time.Now, held: map[string]*keySet{}}
}

// file is the YAML form of a scopes file.
type file struct {
	Default yaml.Node            `yaml:"default"`
	Clients map[string]yaml.Node `yaml:"clients"`
}

// Load reads the scopes file at path (see Parse).
func Load(path string) (*Scopes, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFile, err)
	}
	s, err := Parse(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Parse reads a scopes file:
//
//	default:               # every credential not named below; DefaultScope's fields when absent
//	  own_limits: true
//	  max_period: 744h
//	clients:
//	  billing:             # a token's name in the token file, or a client certificate's name
//	    key_prefixes: ["billing:"]
//	    domains: [billing]
//	    max_period: 24h
//	    max_limit: 1000
//	    max_keys: 100000
//	  envoy:
//	    own_limits: false  # only the policy file's descriptors
//
// A client's scope starts from the default scope, then takes the fields it
// sets. Unknown fields, negative bounds and empty prefixes or domains are
// errors wrapping ErrFile, naming the line.
func Parse(r io.Reader) (*Scopes, error) {
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	var f file
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %v", ErrFile, err)
	}
	def := DefaultScope()
	if !f.Default.IsZero() {
		if err := decodeScope(&f.Default, &def, "default"); err != nil {
			return nil, err
		}
	}
	clients := make(map[string]Scope, len(f.Clients))
	for name, n := range f.Clients {
		if name == "" {
			return nil, fmt.Errorf("%w: line %d: empty client name", ErrFile, n.Line)
		}
		sc := def
		sc.KeyPrefixes = append([]string(nil), def.KeyPrefixes...)
		sc.Domains = append([]string(nil), def.Domains...)
		if err := decodeScope(&n, &sc, "client "+strconv.Quote(name)); err != nil {
			return nil, err
		}
		clients[name] = sc
	}
	return newScopes(def, clients), nil
}

func decodeScope(n *yaml.Node, sc *Scope, what string) error {
	// Decode strictly: a yaml.Node decodes without the decoder's KnownFields,
	// so re-encode and decode it with them.
	b, err := yaml.Marshal(n)
	if err != nil {
		return fmt.Errorf("%w: line %d: %s: %v", ErrFile, n.Line, what, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(sc); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: line %d: %s: %v", ErrFile, n.Line, what, err)
	}
	switch {
	case sc.MaxPeriod < 0:
		return fmt.Errorf("%w: line %d: %s: max_period %v must be >= 0", ErrFile, n.Line, what, sc.MaxPeriod)
	case sc.MaxLimit < 0:
		return fmt.Errorf("%w: line %d: %s: max_limit %d must be >= 0", ErrFile, n.Line, what, sc.MaxLimit)
	case sc.MaxKeys < 0:
		return fmt.Errorf("%w: line %d: %s: max_keys %d must be >= 0", ErrFile, n.Line, what, sc.MaxKeys)
	}
	for _, p := range sc.KeyPrefixes {
		if p == "" {
			return fmt.Errorf("%w: line %d: %s: an empty key prefix (leave key_prefixes out for any key)", ErrFile, n.Line, what)
		}
	}
	for _, d := range sc.Domains {
		if d == "" {
			return fmt.Errorf("%w: line %d: %s: an empty domain (leave domains out for any)", ErrFile, n.Line, what)
		}
	}
	return nil
}

// For returns the scope of the credential named name ("" for an anonymous
// caller: the default scope).
func (s *Scopes) For(name string) Scope {
	if sc, ok := s.clients[name]; ok {
		return sc
	}
	return s.def
}

// Len returns the number of credentials the file names.
func (s *Scopes) Len() int { return len(s.clients) }

// refuse returns the *node.PermissionError of a check outside the scope of
// the credential named name; forbids completes "<credential> ...".
func refuse(name, format string, args ...any) *node.PermissionError {
	return &node.PermissionError{Who: who(name), Forbids: fmt.Sprintf(format, args...), Err: ErrOutOfScope}
}

// who names a credential as a refusal shows it.
func who(name string) string {
	if name == "" {
		return "this caller"
	}
	return "credential " + strconv.Quote(name)
}

// Admin returns nil when the credential named name may operate keys
// (Scope.Admin), else a *node.PermissionError matching ErrOutOfScope and
// ErrNotAdmin.
func (s *Scopes) Admin(name string) error {
	if s.For(name).Admin {
		return nil
	}
	e := refuse(name, "may not inspect, reset or unban keys (its scope has no admin permission)")
	e.Err = ErrNotAdmin
	return e
}

// Direct decides whether the credential named name may check key under its
// own limit l: nil, or a *node.PermissionError (matching ErrOutOfScope and
// node.ErrPermissionDenied) saying which bound of its scope it broke.
func (s *Scopes) Direct(name, key string, l algo.Limit) error {
	sc := s.For(name)
	if !sc.OwnLimits {
		return refuse(name, "may only check the policy file's descriptors, not send its own limits")
	}
	if strings.HasPrefix(key, PolicyPrefix) {
		return refuse(name, "may not check keys starting %q: they belong to the policy file's descriptors", PolicyPrefix)
	}
	if len(sc.KeyPrefixes) > 0 && !hasPrefix(key, sc.KeyPrefixes) {
		return refuse(name, "may only check keys starting with one of its key_prefixes %q", sc.KeyPrefixes)
	}
	if sc.MaxPeriod > 0 && l.Period > sc.MaxPeriod {
		return refuse(name, "may not ask for period %v: above its max_period %v", l.Period, sc.MaxPeriod)
	}
	if sc.MaxLimit > 0 && (l.Limit > sc.MaxLimit || l.Burst > sc.MaxLimit) {
		return refuse(name, "may not ask for limit %d (burst %d): above its max_limit %d", l.Limit, l.Burst, sc.MaxLimit)
	}
	return s.hold(name, sc, key, l)
}

// Policy decides whether the credential named name may check the
// descriptor key key in domain, under the policy's limit l.
func (s *Scopes) Policy(name, domain, key string, l algo.Limit) error {
	sc := s.For(name)
	if len(sc.Domains) > 0 && !contains(sc.Domains, domain) {
		return refuse(name, "may not check domain %q: outside its domains %q", domain, sc.Domains)
	}
	return s.hold(name, sc, key, l)
}

// hold counts key against the credential's MaxKeys until l.Hold() from now:
// as long as the node may keep its state (its period, two for a sliding
// window counter, the time a GCRA or token bucket burst takes to drain). An
// invalid l is not counted: the node refuses the check.
func (s *Scopes) hold(name string, sc Scope, key string, l algo.Limit) error {
	if sc.MaxKeys == 0 || l.Validate() != nil {
		return nil
	}
	period := l.Hold()
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.held[name]
	if ks == nil {
		ks = &keySet{until: map[string]time.Time{}}
		s.held[name] = ks
	}
	until := now.Add(period)
	if old, ok := ks.until[key]; ok {
		if until.After(old) {
			ks.until[key] = until
		}
		return nil
	}
	if len(ks.until) >= sc.MaxKeys {
		var earliest time.Time
		for k, u := range ks.until {
			switch {
			case !u.After(now):
				delete(ks.until, k)
			case earliest.IsZero() || u.Before(earliest):
				earliest = u
			}
		}
		if len(ks.until) >= sc.MaxKeys {
			return &node.KeyTableFullError{Who: who(name), Text: fmt.Sprintf("holds %d keys through this node, its max_keys", sc.MaxKeys),
				RetryAfter: roundUpSeconds(earliest.Sub(now))}
		}
	}
	ks.until[key] = until
	return nil
}

// roundUpSeconds rounds d > 0 up to whole seconds, as a Retry-After header
// says it.
func roundUpSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

func hasPrefix(key string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// DomainOf returns the domain of a key policy.Key built ("rl:" then the
// domain as <decimal length>":"<bytes>), and false for any other key.
func DomainOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, PolicyPrefix)
	if !ok {
		return "", false
	}
	lenText, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return "", false
	}
	n, err := strconv.Atoi(lenText)
	if err != nil || n < 0 || n > len(rest) {
		return "", false
	}
	return rest[:n], true
}
