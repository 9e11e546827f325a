// Package httpapi is ringlimitd's HTTP/JSON interface, as two handlers for two
// listeners: NewHandler serves the client API (POST /v1/check, GET
// /v1/members), which the daemon puts behind TLS and caller authentication in
// secure mode; NewAdminHandler serves the read-only admin API (GET /healthz,
// /readyz and extra handlers such as Prometheus' /metrics) for probes and
// scrapers, and changes nothing. A wrong method on any path is 405 with an
// Allow header; an unknown path is 404.
//
// Data flow: a request to /v1/check is read through http.MaxBytesReader (MaxBody),
// checked to be text encoding/json will not rewrite (valid UTF-8, no unpaired
// surrogate escape), decoded strictly (unknown fields and trailing data are
// errors), turned into a node.Check and passed to the Limiter, which validates it
// (node.Check.Validate, the one validation of every front door) and routes it
// to the key's owner. The node.Decision comes back as a CheckResponse. Being over
// the limit is an answer, not an error: a denied check is 200 with "allowed":
// false. Every failure is a JSON Error with a 4xx status naming the problem (the
// request) or a 5xx status (the node could not decide), chosen by the error's
// node.Class (statusOf); nothing a client sends stops the server.
package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/internal/duration"
	"github.com/ringlimit/ringlimit/node"
)

// MaxKeyLen is the longest key accepted, in bytes (1024, the node's default
// algo.DefaultMaxKeyLen); the node checks it. Keys are compared byte for byte.
const MaxKeyLen = algo.DefaultMaxKeyLen

// MaxBody is the largest request body accepted, in bytes (64 KiB). Larger bodies
// are answered 413.
const MaxBody = 64 << 10

// Limiter is what the client API needs from a node. *node.Node provides Check;
// the daemon adapts its Members.
type Limiter interface {
	// Check validates c, routes it to its owner and returns the decision (see
	// node.Node.Check); node.Classify sorts its errors.
	Check(ctx context.Context, c node.Check) (node.Decision, error)
	// Members lists the cluster as this node sees it, refused members included.
	Members() []Member
}

// Health is what the admin API needs from a node.
type Health interface {
	// Ready reports whether the node serves checks.
	Ready() bool
}

// Member is one cluster member as listed by GET /v1/members.
type Member struct {
	// Name is the member name, unique in the cluster.
	Name string `json:"name"`
	// Addr is the peer gRPC address.
	Addr string `json:"addr"`
	// GossipAddr is the memberlist address.
	GossipAddr string `json:"gossip_addr"`
	// ID is the instance id, new on every start.
	ID string `json:"id"`
	// Self marks the member that answered.
	Self bool `json:"self"`
	// State is the member's standing in this node's ring: "admitted" (it owns
	// keys), or a state in which it owns none, such as "pending" (handshake not
	// done yet) or "refused" (handshake failed; Reason says why). Empty when the
	// node does not report it.
	State string `json:"state,omitempty"`
	// Reason says why a member is not admitted; empty when it is.
	Reason string `json:"reason,omitempty"`
}

// CheckRequest is the body of POST /v1/check.
type CheckRequest struct {
	// Key is the limited subject as a JSON string: 1..1024 bytes once decoded
	// (algo.DefaultMaxKeyLen), compared byte for byte. The body must be
	// valid UTF-8 and may not hold an unpaired surrogate escape ("\ud800"):
	// encoding/json would rewrite either to U+FFFD and make distinct keys
	// collide, so both are refused with a 400 naming the byte offset. Exactly
	// one of Key and KeyBase64 is required.
	Key string `json:"key,omitempty"`
	// KeyBase64 is the key as standard, padded base64 (RFC 4648 §4, canonical:
	// unused trailing bits must be zero), for keys that are arbitrary bytes. The
	// decoded key follows the same 1..1024-byte rule as Key.
	KeyBase64 string `json:"key_base64,omitempty"`
	// Algorithm is the name of an algo.Kind (one of algo.KindNames);
	// required.
	Algorithm string `json:"algorithm"`
	// Limit is hits per Period; required, > 0.
	Limit int64 `json:"limit"`
	// Period is a Go duration string ("1m", "250ms"). Exactly one of Period and
	// PeriodNS is required.
	Period string `json:"period,omitempty"`
	// PeriodNS is the period in nanoseconds.
	PeriodNS int64 `json:"period_ns,omitempty"`
	// Burst is GCRA's max_burst or TokenBucket's capacity. Default 0, the same
	// on every front door (gRPC's zero value, the CLI's --burst): GCRA then
	// admits one hit per emission interval; a token bucket needs >= 1.
	Burst int64 `json:"burst,omitempty"`
	// Hits to take; default 1 when absent; 0 peeks.
	Hits *int64 `json:"hits,omitempty"`
	// CreatedAtUnixNS is the caller's timestamp in Unix ns, used instead of the
	// owner's clock when the daemon accepts caller timestamps; 0 or absent = the
	// owner's clock.
	CreatedAtUnixNS int64 `json:"created_at_unix_ns,omitempty"`
	// MaxWait is a Go duration ("2s"): wait up to this long for the hits'
	// slot instead of answering denied (gcra and token_bucket only; the
	// owner books the slot and the answer comes when it is due, with
	// delay_ns). Bounded by the request's own deadline and by node.MaxWait
	// (24h). At most one of MaxWait and MaxWaitNS; absent = no wait.
	MaxWait string `json:"max_wait,omitempty"`
	// MaxWaitNS is MaxWait in nanoseconds.
	MaxWaitNS int64 `json:"max_wait_ns,omitempty"`
}

// CheckResponse is the 200 answer of POST /v1/check: the Decision, the path that
// decided it and the member that decided.
type CheckResponse struct {
	// Allowed reports whether the hits were admitted.
	Allowed bool `json:"allowed"`
	// Limit is the capacity the caller sees.
	Limit int64 `json:"limit"`
	// Remaining is how many more hits would be allowed now.
	Remaining int64 `json:"remaining"`
	// RetryAfterNS is, when denied, the wait in ns until the same check would pass;
	// 0 when allowed; -1 when it never can.
	RetryAfterNS int64 `json:"retry_after_ns"`
	// ResetAfterNS is the time in ns until the key is back to full capacity.
	ResetAfterNS int64 `json:"reset_after_ns"`
	// Route is "owner", "forwarded", "cached_denial" (denied by this node from
	// an owner's earlier denial, no forward), "lease" (admitted by this node
	// from capacity the owner lent it, no forward), "backup" or "fallback".
	Route string `json:"route"`
	// Owner is the member that decided ("" when unknown, as on some fallbacks).
	Owner string `json:"owner"`
	// DelayNS is, for an allowed check with a max_wait, how long (ns) it
	// waited for its slot before this answer; absent when 0.
	DelayNS int64 `json:"delay_ns,omitempty"`
}

// Error is the body of every non-2xx answer.
type Error struct {
	// Error says what is wrong, naming the field or method at fault.
	Error string `json:"error"`
}

// Options configure the client handler.
type Options struct {
	// Logger receives one line per failed request (debug for 4xx, warn for 5xx).
	// nil discards.
	Logger *slog.Logger
	// Extra client handlers by path (the daemon's POST /v1/check_descriptors);
	// they answer on the same port behind the same authentication.
	Extra map[string]http.Handler
}

type api struct {
	lim Limiter
	log *slog.Logger
}

// NewHandler returns the client API serving lim: POST /v1/check and GET (or
// HEAD) /v1/members. It authenticates nobody: the daemon wraps it.
func NewHandler(lim Limiter, opts Options) http.Handler {
	a := &api{lim: lim, log: opts.Logger}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/check", a.check)
	mux.HandleFunc("/v1/members", a.members)
	for path, h := range opts.Extra {
		mux.Handle(path, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fail(a.log, w, r, http.StatusNotFound, fmt.Sprintf("no such path %q (want /v1/check or /v1/members; /metrics, /healthz and /readyz are on the admin port)", r.URL.Path))
	})
	return mux
}

// AdminOptions configure the admin handler.
type AdminOptions struct {
	// Logger receives one line per failed request. nil discards.
	Logger *slog.Logger
	// Extra read-only handlers by path (for example "/metrics"): each is served
	// for GET and HEAD only; any other method is 405.
	Extra map[string]http.Handler
	// Insecure makes /healthz and /readyz say so in their body ("insecure":
	// true), so that a probe or an operator sees a daemon running with
	// --insecure.
	Insecure bool
}

type admin struct {
	h    Health
	log  *slog.Logger
	opts AdminOptions
}

// NewAdminHandler returns the admin API: GET (or HEAD) /healthz (200 while the
// process runs), /readyz (200 once h is ready, 503 before) and opts.Extra. It
// changes nothing: every path answers GET and HEAD only.
func NewAdminHandler(h Health, opts AdminOptions) http.Handler {
	ad := &admin{h: h, log: opts.Logger, opts: opts}
	if ad.log == nil {
		ad.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", ad.healthz)
	mux.HandleFunc("/readyz", ad.readyz)
	paths := []string{"/healthz", "/readyz"}
	for path, h := range opts.Extra {
		paths = append(paths, path)
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if allow(ad.log, w, r, http.MethodGet, http.MethodHead) {
				h.ServeHTTP(w, r)
			}
		})
	}
	slices.Sort(paths)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fail(ad.log, w, r, http.StatusNotFound, fmt.Sprintf("no such path %q on the admin port (want %s)", r.URL.Path, strings.Join(paths, ", ")))
	})
	return mux
}

func (a *api) check(w http.ResponseWriter, r *http.Request) {
	if !allow(a.log, w, r, http.MethodPost) {
		return
	}
	var req CheckRequest
	if status, err := decode(http.MaxBytesReader(w, r.Body, MaxBody), &req); err != nil {
		fail(a.log, w, r, status, err.Error())
		return
	}
	c, err := req.toCheck()
	if err != nil {
		fail(a.log, w, r, http.StatusBadRequest, node.Message(err))
		return
	}
	res, err := a.lim.Check(r.Context(), c)
	if err != nil {
		status := statusOf(err)
		a.log.Debug("check failed", "error", err) // the full chain, package prefixes included
		SetRetryAfter(w, err)
		fail(a.log, w, r, status, node.Message(err))
		return
	}
	d := res.Decision
	writeJSON(w, http.StatusOK, CheckResponse{
		Allowed:      d.Allowed,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		RetryAfterNS: int64(d.RetryAfter),
		ResetAfterNS: int64(d.ResetAfter),
		Route:        res.Route.String(),
		Owner:        res.Owner,
		DelayNS:      int64(res.Delay),
	})
}

// decode reads exactly one JSON object into v, refusing unknown fields,
// trailing data and text that encoding/json would rewrite (see checkText). The
// status is 413 for a body over MaxBody, 400 otherwise.
func decode(body io.Reader, v any) (int, error) {
	raw, err := io.ReadAll(body)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return http.StatusRequestEntityTooLarge, fmt.Errorf("body larger than %d bytes", tooBig.Limit)
	}
	if err != nil {
		return http.StatusBadRequest, fmt.Errorf("read body: %v", err)
	}
	if err := checkText(raw); err != nil {
		return http.StatusBadRequest, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("trailing data after the JSON object")
		}
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
		return 0, nil
	case errors.Is(err, io.EOF):
		return http.StatusBadRequest, errors.New("empty body: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return http.StatusBadRequest, errors.New("malformed JSON: unexpected end of body")
	case errors.As(err, &syntax):
		return http.StatusBadRequest, fmt.Errorf("malformed JSON at byte %d: %v", syntax.Offset, err)
	case errors.As(err, &typ) && typ.Field == "":
		return http.StatusBadRequest, fmt.Errorf("body: want a JSON object, got JSON %s", typ.Value)
	case errors.As(err, &typ):
		return http.StatusBadRequest, fmt.Errorf("field %q: want %s, got JSON %s", typ.Field, jsonType(typ.Type.String()), typ.Value)
	}
	if name, ok := unknownField(raw, v); ok {
		return http.StatusBadRequest, fmt.Errorf("unknown field %q", name)
	}
	return http.StatusBadRequest, fmt.Errorf("malformed JSON: %v", err)
}

// toCheck checks what the HTTP layer owns (presence, the algorithm's name, the
// period's syntax, base64) and builds the check; the node validates every value
// (node.Check.Validate), with the same messages as every other door.
func (req *CheckRequest) toCheck() (node.Check, error) {
	key, err := req.key()
	if err != nil {
		return node.Check{}, err
	}
	if req.Algorithm == "" {
		return node.Check{}, fmt.Errorf(`field "algorithm" is required (%s)`, algo.KindNames(", "))
	}
	kind, err := algo.ParseKind(req.Algorithm)
	if err != nil {
		return node.Check{}, err
	}
	var period time.Duration
	switch {
	case req.Period != "" && req.PeriodNS != 0:
		return node.Check{}, errors.New(`give "period" or "period_ns", not both`)
	case req.Period != "":
		period, err = duration.Parse(req.Period)
		switch {
		case errors.Is(err, duration.ErrOverflow):
			return node.Check{}, fmt.Errorf(`field "period" = %q: too long, the maximum is %v (%d ns)`, req.Period, duration.Max, int64(duration.Max))
		case err != nil:
			return node.Check{}, fmt.Errorf(`field "period" = %q: want a Go duration such as "1m" or "250ms"`, req.Period)
		}
	case req.PeriodNS != 0:
		period = time.Duration(req.PeriodNS)
	default:
		return node.Check{}, errors.New(`field "period" (Go duration, "1m") or "period_ns" is required`)
	}
	hits := int64(1)
	if req.Hits != nil {
		hits = *req.Hits
	}
	var maxWait time.Duration
	switch {
	case req.MaxWait != "" && req.MaxWaitNS != 0:
		return node.Check{}, errors.New(`give "max_wait" or "max_wait_ns", not both`)
	case req.MaxWait != "":
		maxWait, err = duration.Parse(req.MaxWait)
		if err != nil {
			return node.Check{}, fmt.Errorf(`field "max_wait" = %q: want a Go duration such as "2s" or "250ms"`, req.MaxWait)
		}
	default:
		maxWait = time.Duration(req.MaxWaitNS)
	}
	return node.Check{
		Key:       key,
		Limit:     algo.Limit{Kind: kind, Limit: req.Limit, Period: period, Burst: req.Burst},
		Hits:      hits,
		CreatedAt: req.CreatedAtUnixNS,
		MaxWait:   maxWait,
	}, nil
}

// key returns the key given by exactly one of Key and KeyBase64, checked
// against the 1..MaxKeyLen rule.
func (req *CheckRequest) key() (string, error) {
	key := req.Key
	switch {
	case req.Key != "" && req.KeyBase64 != "":
		return "", errors.New(`give "key" or "key_base64", not both`)
	case req.KeyBase64 != "":
		b, err := base64.StdEncoding.Strict().DecodeString(req.KeyBase64)
		if err != nil {
			return "", fmt.Errorf(`field "key_base64": not canonical standard base64 (RFC 4648 §4, padded): %v`, err)
		}
		key = string(b)
	case req.Key == "":
		return "", errors.New(`field "key" (or "key_base64") is required`)
	}
	return key, nil
}

// jsonType names a Go field type of CheckRequest in JSON terms.
func jsonType(goType string) string {
	switch strings.TrimPrefix(goType, "*") {
	case "int64":
		return "an integer"
	case "string":
		return "a string"
	}
	return goType
}

// unknownField returns the first key of the JSON object raw that no field of
// the struct *v takes (encoding/json matches names case-insensitively), for the
// message of a decode that DisallowUnknownFields refused.
func unknownField(raw []byte, v any) (string, bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return "", false
	}
	t := reflect.TypeOf(v).Elem()
	names := make([]string, 0, len(obj))
	for name := range obj {
		names = append(names, name)
	}
	slices.Sort(names)
next:
	for _, name := range names {
		for i := range t.NumField() {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if strings.EqualFold(tag, name) {
				continue next
			}
		}
		return name, true
	}
	return "", false
}

// SetRetryAfter sets the Retry-After header (whole seconds, rounded up) of
// an answer to err when node.RetryAfter knows when the same check may pass:
// a full key table's earliest key to free.
func SetRetryAfter(w http.ResponseWriter, err error) {
	if d := node.RetryAfter(err); d > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
	}
}

// statusOf maps an error of Limiter.Check to an HTTP status by its node.Class.
func statusOf(err error) int {
	switch node.Classify(err) {
	case node.ClassInvalid:
		return http.StatusBadRequest
	case node.ClassPermission:
		return http.StatusForbidden
	case node.ClassFull:
		return http.StatusServiceUnavailable // with Retry-After (SetRetryAfter)
	case node.ClassTimeout:
		return http.StatusGatewayTimeout
	case node.ClassCanceled:
		return 499 // client closed the request (nginx's convention); never seen by it
	case node.ClassUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (a *api) members(w http.ResponseWriter, r *http.Request) {
	if !allow(a.log, w, r, http.MethodGet, http.MethodHead) {
		return
	}
	ms := a.lim.Members()
	if ms == nil {
		ms = []Member{}
	}
	writeJSON(w, http.StatusOK, ms)
}

func (ad *admin) healthz(w http.ResponseWriter, r *http.Request) {
	if !allow(ad.log, w, r, http.MethodGet, http.MethodHead) {
		return
	}
	writeJSON(w, http.StatusOK, Status{Status: "ok", Insecure: ad.opts.Insecure})
}

func (ad *admin) readyz(w http.ResponseWriter, r *http.Request) {
	if !allow(ad.log, w, r, http.MethodGet, http.MethodHead) {
		return
	}
	if !ad.h.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, Status{Status: "not ready", Insecure: ad.opts.Insecure})
		return
	}
	writeJSON(w, http.StatusOK, Status{Status: "ready", Insecure: ad.opts.Insecure})
}

// Status is the body of /healthz and /readyz.
type Status struct {
	// Status is "ok" (healthz), "ready" or "not ready" (readyz).
	Status string `json:"status"`
	// Insecure is true when the daemon runs with --insecure: no TLS, no caller
	// authentication, no peer authentication.
	Insecure bool `json:"insecure,omitempty"`
}

// allow answers 405 with an Allow header unless r's method is one of methods.
func allow(log *slog.Logger, w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if slices.Contains(methods, r.Method) {
		return true
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	fail(log, w, r, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s (want %s)", r.Method, r.URL.Path, strings.Join(methods, " or ")))
	return false
}

// fail logs a failed request and answers status with a JSON Error.
func fail(log *slog.Logger, w http.ResponseWriter, r *http.Request, status int, msg string) {
	level := slog.LevelDebug
	if status >= 500 {
		level = slog.LevelWarn
	}
	log.Log(r.Context(), level, "http request failed", "method", r.Method, "path", r.URL.Path, "status", status, "error", msg)
	WriteError(w, status, msg)
}

// WriteError answers status with the JSON Error{msg}: the body of every non-2xx
// answer of the daemon's HTTP listeners (the auth middleware's 401 too).
func WriteError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, Error{Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // JSON for programs: "<token>" stays readable
	_ = enc.Encode(v)
}
