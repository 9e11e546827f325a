package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// KeyOperator operates one key on its owner (*node.Node implements it).
type KeyOperator interface {
	InspectKey(ctx context.Context, key string, l algo.Limit) (node.KeyInfo, error)
	ResetKey(ctx context.Context, key string, l algo.Limit) (bool, error)
	UnbanKey(ctx context.Context, key string) (bool, error)
	TopDenied(n int) []node.DeniedKey
}

// TopKey is one element of the answer of GET /v1/keys/top: a key and the
// denials this node's callers got for it over the last minute (an
// overestimate by at most error).
type TopKey struct {
	Key     string `json:"key"`
	Denials int64  `json:"denials"`
	Error   int64  `json:"error"`
}

// KeyRequest is the body of POST /v1/keys/inspect, /v1/keys/reset and
// /v1/keys/unban: the key (Key or KeyBase64) and, for inspect and reset,
// its limit with the fields of CheckRequest (hits, created_at and max_wait
// refused; unban ignores the limit).
type KeyRequest = CheckRequest

// KeyResponse is the 200 answer of the /v1/keys paths.
type KeyResponse struct {
	// Found: inspect, the owner holds a state of the key under the limit's
	// algorithm; reset, there was one (now dropped); unban, the key had a
	// ban state (now lifted).
	Found bool `json:"found"`
	// Limit, Remaining and ResetAfterNS: inspect only, the state as a peek
	// decides it (capacity, hits left, ns until full).
	Limit        int64 `json:"limit,omitempty"`
	Remaining    int64 `json:"remaining,omitempty"`
	ResetAfterNS int64 `json:"reset_after_ns,omitempty"`
	// BanRemainingNS: inspect only, ns the key's ban still lasts (0 none).
	BanRemainingNS int64 `json:"ban_remaining_ns,omitempty"`
	// Owner, Backup, ReplicaFound, ReplicaAgrees: inspect only (see
	// node.KeyInfo).
	Owner         string `json:"owner,omitempty"`
	Backup        string `json:"backup,omitempty"`
	ReplicaFound  bool   `json:"replica_found,omitempty"`
	ReplicaAgrees bool   `json:"replica_agrees,omitempty"`
	// Warning: reset and unban, set when some member did not acknowledge the
	// invalidation of its cached denials in time (the operation happened).
	Warning string `json:"warning,omitempty"`
}

// NewKeysHandler returns POST /v1/keys/inspect, /v1/keys/reset and
// /v1/keys/unban over ops, for the client port behind its authentication.
// authorize(ctx) must return nil for a caller with the admin permission; its
// error is answered 403.
func NewKeysHandler(ops KeyOperator, authorize func(ctx context.Context) error, logger *slog.Logger) map[string]http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := func(op string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !allow(logger, w, r, http.MethodPost) {
				return
			}
			if err := authorize(r.Context()); err != nil {
				fail(logger, w, r, http.StatusForbidden, node.Message(err))
				return
			}
			var req KeyRequest
			if status, err := decode(http.MaxBytesReader(w, r.Body, MaxBody), &req); err != nil {
				fail(logger, w, r, status, err.Error())
				return
			}
			var l algo.Limit
			key, err := req.key()
			if err == nil && op != "unban" {
				if req.Hits != nil || req.CreatedAtUnixNS != 0 || req.MaxWait != "" || req.MaxWaitNS != 0 {
					err = errors.New("hits, created_at_unix_ns and max_wait are for checks, not key operations")
				} else {
					var c node.Check
					if c, err = req.toCheck(); err == nil {
						l = c.Limit
					}
				}
			}
			if err != nil {
				fail(logger, w, r, http.StatusBadRequest, node.Message(err))
				return
			}
			var out KeyResponse
			switch op {
			case "inspect":
				var ki node.KeyInfo
				ki, err = ops.InspectKey(r.Context(), key, l)
				out = KeyResponse{Found: ki.Found, Limit: ki.Decision.Limit, Remaining: ki.Decision.Remaining, ResetAfterNS: int64(ki.Decision.ResetAfter),
					BanRemainingNS: int64(ki.BanRemaining), Owner: ki.Owner, Backup: ki.Backup, ReplicaFound: ki.ReplicaFound, ReplicaAgrees: ki.ReplicaAgrees}
			case "reset":
				out.Found, err = ops.ResetKey(r.Context(), key, l)
			default:
				out.Found, err = ops.UnbanKey(r.Context(), key)
			}
			if errors.Is(err, node.ErrInvalidationIncomplete) {
				out.Warning, err = err.Error(), nil
			}
			if err != nil {
				fail(logger, w, r, statusOf(err), node.Message(err))
				return
			}
			writeJSON(w, http.StatusOK, out)
		})
	}
	top := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allow(logger, w, r, http.MethodGet, http.MethodHead) {
			return
		}
		if err := authorize(r.Context()); err != nil {
			fail(logger, w, r, http.StatusForbidden, node.Message(err))
			return
		}
		n := 10
		if v := r.URL.Query().Get("n"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 1000 {
				fail(logger, w, r, http.StatusBadRequest, fmt.Sprintf("n %q: want an integer in 1..1000", v))
				return
			}
		}
		out := []TopKey{}
		for _, k := range ops.TopDenied(n) {
			out = append(out, TopKey{Key: k.Key, Denials: k.Denials, Error: k.Error})
		}
		writeJSON(w, http.StatusOK, out)
	})
	return map[string]http.Handler{"/v1/keys/inspect": h("inspect"), "/v1/keys/reset": h("reset"), "/v1/keys/unban": h("unban"), "/v1/keys/top": top}
}
