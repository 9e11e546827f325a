package daemon

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/scope"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/transport"
)

// adminLimiter is the public gRPC Limiter with the key operations
// (Limiter.OperateKey) for callers whose scope has admin.
type adminLimiter struct {
	transport.LimiterHandler
	n      *node.Node
	scopes *scope.Scopes
}

func (a adminLimiter) OperateKey(ctx context.Context, r transport.KeyOpRequest) (transport.KeyOpResult, error) {
	if err := a.scopes.Admin(callerName(ctx)); err != nil {
		return transport.KeyOpResult{}, status.Error(codes.PermissionDenied, node.Message(err))
	}
	var (
		res transport.KeyOpResult
		err error
	)
	switch {
	case r.Op == transport.KeyOpInspect:
		var ki node.KeyInfo
		ki, err = a.n.InspectKey(ctx, r.Key, r.Limit)
		res = transport.KeyOpResult{Found: ki.Found, Decision: ki.Decision, BanRemaining: int64(ki.BanRemaining), Owner: ki.Owner, Backup: ki.Backup,
			ReplicaFound: ki.ReplicaFound, ReplicaAgrees: ki.ReplicaAgrees}
	case r.Op == transport.KeyOpReset && r.All:
		res.Found, err = a.n.DeleteKey(ctx, r.Key)
	case r.Op == transport.KeyOpReset:
		res.Found, err = a.n.ResetKey(ctx, r.Key, r.Limit)
	default:
		res.Found, err = a.n.UnbanKey(ctx, r.Key)
	}
	if errors.Is(err, node.ErrInvalidationIncomplete) {
		res.Warning, err = err.Error(), nil
	}
	if err != nil {
		return transport.KeyOpResult{}, node.WireError(err)
	}
	return res, nil
}
