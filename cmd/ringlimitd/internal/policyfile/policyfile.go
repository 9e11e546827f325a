// Package policyfile is ringlimitd's policy file: it loads --policy-file into a
// policy.Limiter over the daemon's node, reloads it when the file changes
// (fsnotify) or on demand (SIGHUP), and serves POST /v1/check_descriptors.
//
// Data flow: Start loads the file (an invalid file at start is an error: the
// daemon refuses to start on a policy it cannot read). A watcher goroutine
// watches the file's directory, so editors that write a new file and rename
// it, and Kubernetes' ConfigMap symlink swaps, are seen as well as writes;
// events are coalesced for Debounce, then Reload parses the file and swaps
// the new policy in atomically. A file that fails to load leaves the old
// policy in place: the error is logged with its file:line and descriptor
// path and counted (ringlimit_policy_reloads_total{result="error"}); the node
// stays ready. The HTTP handler decodes a descriptor check strictly, calls
// policy.Limiter.Check and answers JSON.
package policyfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
)

// Debounce is how long the watcher waits after a file event for more events
// before it reloads (100 ms): a save is often several events.
const Debounce = 100 * time.Millisecond

// MaxBody is the largest /v1/check_descriptors body accepted (64 KiB).
const MaxBody = 64 << 10

// ReloadTimeout bounds one reload (10 s): a load that has not returned by then
// (a hung network file system) fails the reload and keeps the old policy;
// the next reload fails at once until that load returns.
const ReloadTimeout = 10 * time.Second

// Named errors of package policyfile.
var (
	// ErrReloadTimeout is wrapped by Reload's error when the file did not load
	// within ReloadTimeout, or an earlier such load has still not returned.
	ErrReloadTimeout = errors.New("policyfile: reload timed out")
	// ErrClosed is returned by Reload after Close.
	ErrClosed = errors.New("policyfile: closed")
)

// Watcher holds the daemon's policy.Limiter and keeps its policy in step with
// the file.
type Watcher struct {
	path string
	lim  *policy.Limiter
	log  *slog.Logger
	met  *metrics

	mu sync.Mutex // serializes Reload
	// hung is closed when the load that outlived its reload's deadline
	// returns; nil when none did. Under mu.
	hung chan struct{}
	// load and timeout are policy.Load and ReloadTimeout (tests replace them).
	load    func(string) (*policy.Policy, error)
	timeout time.Duration
	fsw     *fsnotify.Watcher
	stop    chan struct{}
	done    chan struct{}
	close   sync.Once
}

type metrics struct {
	reloads     *prometheus.CounterVec
	version     prometheus.Gauge
	descriptors *prometheus.CounterVec
}

// Descriptor implements policy.Metrics.
func (m *metrics) Descriptor(domain, rule string, o policy.Outcome) {
	m.descriptors.WithLabelValues(domain, rule, string(o)).Inc()
}

// Start loads path, builds the Limiter over c and starts watching the file.
// reg, when not nil, receives the collectors ringlimit_policy_reloads_total
// {result}, ringlimit_policy_version and ringlimit_policy_descriptors_total
// {domain,rule,outcome}, whose domain and rule labels come from the policy
// file (a domain it does not have is "unknown"), never from a caller: their
// series are bounded by the file. Errors: the file cannot be loaded (a
// *policy.LoadError or the file system's error), or the watch cannot be set
// up.
func Start(path string, c policy.Checker, reg prometheus.Registerer, log *slog.Logger) (*Watcher, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_policy_reloads_total",
			Help: "Policy file loads by result (ok, error); an error keeps the previous policy.",
		}, []string{"result"}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringlimit_policy_version",
			Help: "Version of the policy in force (1 at start, +1 per successful reload).",
		}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_policy_descriptors_total",
			Help: "Descriptors decided through the policy file, by domain (of the policy file; \"unknown\" for any other), rule and outcome (no_rule, unlimited, replaced, allowed, denied, banned, shadow_denied).",
		}, []string{"domain", "rule", "outcome"}),
	}
	p, err := policy.Load(path)
	if err != nil {
		return nil, err
	}
	lim, err := policy.NewLimiter(c, p, m)
	if err != nil {
		return nil, err
	}
	if reg != nil {
		for _, col := range []prometheus.Collector{m.reloads, m.version, m.descriptors} {
			if err := reg.Register(col); err != nil {
				return nil, fmt.Errorf("policyfile: metrics: %w", err)
			}
		}
	}
	m.reloads.WithLabelValues("ok").Inc()
	m.version.Set(1)
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("policyfile: watch: %w", err)
	}
	if err := fsw.Add(filepath.Dir(path)); err != nil {
		fsw.Close()
		return nil, fmt.Errorf("policyfile: watch %s: %w", filepath.Dir(path), err)
	}
	w := &Watcher{path: path, lim: lim, log: log, met: m, fsw: fsw, stop: make(chan struct{}), done: make(chan struct{}),
		load: func(p string) (*policy.Policy, error) { return policy.Load(p) }, timeout: ReloadTimeout}
	go w.loop()
	log.Info("policy loaded", "file", path, "domains", len(p.Domains()), "rules", p.Rules(), "version", 1)
	return w, nil
}

// Limiter returns the Limiter whose policy the Watcher keeps current.
func (w *Watcher) Limiter() *policy.Limiter { return w.lim }

// Reload loads the file again and, when it loads, swaps it in (every check
// sees the old or the new policy, whole). When it does not (the file is
// invalid, not a regular file, or does not load within ReloadTimeout), the
// old policy stays, the error is logged and counted, and returned. It returns
// ErrClosed at once once Close is called.
func (w *Watcher) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.stop:
		return ErrClosed
	default:
	}
	if w.hung != nil {
		select {
		case <-w.hung:
			w.hung = nil
		default:
			return w.failed(fmt.Errorf("%w: an earlier load of %s has not returned", ErrReloadTimeout, w.path))
		}
	}
	type loaded struct {
		p   *policy.Policy
		err error
	}
	res := make(chan loaded, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p, err := w.load(w.path)
		res <- loaded{p, err}
	}()
	timer := time.NewTimer(w.timeout)
	defer timer.Stop()
	var r loaded
	select {
	case r = <-res:
	case <-timer.C:
		w.hung = done
		return w.failed(fmt.Errorf("%w: %s did not load within %v", ErrReloadTimeout, w.path, w.timeout))
	case <-w.stop:
		w.hung = done
		return ErrClosed
	}
	if r.err != nil {
		return w.failed(r.err)
	}
	v := w.lim.Swap(r.p)
	w.met.reloads.WithLabelValues("ok").Inc()
	w.met.version.Set(float64(v))
	w.log.Info("policy reloaded", "file", w.path, "domains", len(r.p.Domains()), "rules", r.p.Rules(), "version", v)
	return nil
}

// failed logs and counts a failed reload and returns err.
func (w *Watcher) failed(err error) error {
	w.met.reloads.WithLabelValues("error").Inc()
	_, v := w.lim.Policy()
	attrs := []any{"err", err, "file", w.path, "kept_version", v}
	var le *policy.LoadError
	if errors.As(err, &le) {
		attrs = append(attrs, "line", le.Line, "path", le.Path)
	}
	w.log.Error("policy reload failed, keeping the previous policy", attrs...)
	return err
}

func (w *Watcher) loop() {
	defer close(w.done)
	var timer *time.Timer
	var fire <-chan time.Time
	base := filepath.Base(w.path)
	for {
		select {
		case <-w.stop:
			if timer != nil {
				timer.Stop()
			}
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			name := filepath.Base(ev.Name)
			// The file itself, or a Kubernetes ConfigMap swap ("..data" and its
			// timestamped siblings).
			if name != base && (len(name) < 2 || name[:2] != "..") {
				continue
			}
			if timer == nil {
				timer = time.NewTimer(Debounce)
			} else {
				timer.Reset(Debounce)
			}
			fire = timer.C
		case <-fire:
			fire = nil
			_ = w.Reload() // logged and counted
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.log.Warn("policy file watch", "err", err)
		}
	}
}

// Close stops watching. The Limiter keeps its last policy. Safe to call twice.
func (w *Watcher) Close() error {
	var err error
	w.close.Do(func() {
		close(w.stop)
		err = w.fsw.Close()
		<-w.done
	})
	return err
}

// CheckRequest is the body of POST /v1/check_descriptors.
type CheckRequest struct {
	// Domain is the policy domain; required.
	Domain string `json:"domain"`
	// Descriptors are checked in order; at least one.
	Descriptors []DescriptorJSON `json:"descriptors"`
	// Hits per descriptor; default 1 when absent; 0 peeks.
	Hits *int64 `json:"hits,omitempty"`
}

// DescriptorJSON is one descriptor of a CheckRequest.
type DescriptorJSON struct {
	// Entries are the descriptor's key/value pairs, in order.
	Entries []EntryJSON `json:"entries"`
	// Hits replaces the request's hits for this descriptor when present.
	Hits *int64 `json:"hits,omitempty"`
}

// EntryJSON is one key/value pair.
type EntryJSON struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// CheckResponse is the answer of POST /v1/check_descriptors.
type CheckResponse struct {
	// Allowed is false when any descriptor was denied (Envoy's overall_code).
	Allowed bool `json:"allowed"`
	// PolicyVersion is the version of the policy that decided.
	PolicyVersion uint64 `json:"policy_version"`
	// Descriptors holds one status per descriptor, in order.
	Descriptors []DescriptorStatus `json:"descriptors"`
}

// DescriptorStatus is one descriptor's decision.
type DescriptorStatus struct {
	Allowed bool `json:"allowed"`
	// Outcome is no_rule, unlimited, replaced, allowed, denied, banned or
	// shadow_denied.
	Outcome string `json:"outcome"`
	// Rule is the rule's name or path ("" for no_rule).
	Rule string `json:"rule,omitempty"`
	// Limit, Remaining, RetryAfterNS (-1: never), ResetAfterNS as in /v1/check.
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	RetryAfterNS int64 `json:"retry_after_ns"`
	ResetAfterNS int64 `json:"reset_after_ns"`
	// Banned: the key's penalty ban decided. WouldDeny: shadow mode admitted a
	// denial.
	Banned    bool `json:"banned,omitempty"`
	WouldDeny bool `json:"would_deny,omitempty"`
	// Route and Owner say who decided ("" when the node was not asked).
	Route string `json:"route,omitempty"`
	Owner string `json:"owner,omitempty"`
}

type errorBody struct {
	Error string `json:"error"`
}

// Handler serves POST /v1/check_descriptors: 200 with a CheckResponse (a
// denial is an answer, not an error), 400 for a malformed or invalid request,
// 405 for another method, 413 above MaxBody, 503 when the node could not
// decide.
func (w *Watcher) Handler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			rw.Header().Set("Allow", http.MethodPost)
			writeJSON(rw, http.StatusMethodNotAllowed, errorBody{"method " + r.Method + " not allowed (want POST)"})
			return
		}
		var req CheckRequest
		dec := json.NewDecoder(http.MaxBytesReader(rw, r.Body, MaxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			status := http.StatusBadRequest
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				status = http.StatusRequestEntityTooLarge
			}
			writeJSON(rw, status, errorBody{"body: " + err.Error()})
			return
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			writeJSON(rw, http.StatusBadRequest, errorBody{"body: data after the JSON object"})
			return
		}
		hits := int64(1)
		if req.Hits != nil {
			hits = *req.Hits
		}
		descs := make([]policy.Descriptor, len(req.Descriptors))
		for i, d := range req.Descriptors {
			descs[i].Hits = d.Hits
			descs[i].Entries = make([]policy.Entry, len(d.Entries))
			for j, e := range d.Entries {
				descs[i].Entries[j] = policy.Entry{Key: e.Key, Value: e.Value}
			}
		}
		res, err := w.lim.Check(r.Context(), req.Domain, descs, hits)
		if err != nil {
			if d := node.RetryAfter(err); d > 0 {
				rw.Header().Set("Retry-After", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
			}
			writeJSON(rw, httpStatus(err), errorBody{node.Message(err)})
			return
		}
		writeJSON(rw, http.StatusOK, Response(res))
	})
}

// Response maps a descriptor check's result to its JSON form.
func Response(res policy.Result) CheckResponse {
	out := CheckResponse{Allowed: res.Allowed, PolicyVersion: res.Version, Descriptors: make([]DescriptorStatus, len(res.Decisions))}
	for i := range res.Decisions {
		d := &res.Decisions[i]
		s := DescriptorStatus{Allowed: d.Allowed, Outcome: string(d.Outcome()), Limit: d.Limit, Remaining: d.Remaining,
			RetryAfterNS: int64(d.RetryAfter), ResetAfterNS: int64(d.ResetAfter), Banned: d.Banned, WouldDeny: d.WouldDeny, Owner: d.Owner}
		if d.Key != "" { // the cluster was asked: its route
			s.Route = d.Route.String()
		}
		if d.Rule != nil {
			s.Rule = d.Rule.ID()
		}
		out.Descriptors[i] = s
	}
	return out
}

// httpStatus maps an error of a descriptor check to an HTTP status by its
// node.Class.
func httpStatus(err error) int {
	switch node.Classify(err) {
	case node.ClassInvalid:
		return http.StatusBadRequest
	case node.ClassPermission:
		return http.StatusForbidden
	case node.ClassFull:
		return http.StatusServiceUnavailable // with Retry-After
	case node.ClassTimeout:
		return http.StatusGatewayTimeout
	case node.ClassCanceled:
		return 499 // client closed the request (nginx's convention)
	case node.ClassUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
