package transport

import (
	"context"
	"fmt"

	"github.com/ringlimit/ringlimit/algo"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// KeyOp is an operation on one key (the KeyOp RPC of the Peer service).
type KeyOp uint8

// The key operations.
const (
	// KeyOpInspect answers the owner's state of the key under the limit (a
	// peek, nothing taken, no state created) and its ban.
	KeyOpInspect KeyOp = iota + 1
	// KeyOpReset drops the owner's state of the key under the limit's
	// algorithm: back to full capacity.
	KeyOpReset
	// KeyOpUnban lifts the key's penalty ban on its owner.
	KeyOpUnban
	// KeyOpInvalidate drops the receiver's cached denials of the key.
	KeyOpInvalidate
	// KeyOpInspectReplica answers the receiver's replica of the key.
	KeyOpInspectReplica
)

// KeyOpRequest is one key operation: Op on Key under Limit (Limit is unused
// by Unban and Invalidate; Reset uses only its Kind). All, for Reset: drop
// the key's states under every algorithm and its ban (Limit unused); for
// Invalidate: the backup drops its replicas of them too.
type KeyOpRequest struct {
	Op    KeyOp
	Key   string
	Limit algo.Limit
	All   bool
}

// KeyOpResult is the answer to a KeyOpRequest: Code (CodeNotOwner when the
// receiver does not own the key), Message for a code other than CodeOK;
// Found whether a state (or ban) was there; Decision the state as a peek
// decides it (Inspect); BanUntil the ban's end (Unix ns, 0 = none).
type KeyOpResult struct {
	Code     Code
	Message  string
	Found    bool
	Decision algo.Decision
	BanUntil int64
	// The public Limiter.OperateKey only (peers leave them zero): Inspect's
	// owner and backup, replica state and ban remaining (ns); Warning for an
	// operation whose invalidation some member did not acknowledge.
	Owner, Backup               string
	ReplicaFound, ReplicaAgrees bool
	BanRemaining                int64
	Warning                     string
}

// KeyOperator is an optional interface of a LimiterHandler: the public
// Limiter service answers OperateKey with it (UNIMPLEMENTED without). r.Op is
// KeyOpInspect, KeyOpReset or KeyOpUnban, r.Key and (but for Unban and a
// Reset with All) r.Limit validated. Its errors map to gRPC codes as Check's;
// a refusal for lack of permission should be a *status error
// (PERMISSION_DENIED).
type KeyOperator interface {
	OperateKey(ctx context.Context, r KeyOpRequest) (KeyOpResult, error)
}

// OperateKey serves the public Limiter.OperateKey RPC.
func (s *limiterServer) OperateKey(ctx context.Context, req *pb.KeyOpRequest) (*pb.KeyOpResponse, error) {
	ko, ok := s.h.(KeyOperator)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this server has no key operations")
	}
	r, err := keyOpFromWire(req, s.cfg.MaxKeyLen)
	if err == nil && r.Op != KeyOpInspect && r.Op != KeyOpReset && r.Op != KeyOpUnban {
		err = fmt.Errorf("op %v: want KEY_OP_INSPECT, KEY_OP_RESET or KEY_OP_UNBAN", req.GetOp())
	}
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	res, err := ko.OperateKey(ctx, r)
	if err != nil {
		if _, isStatus := status.FromError(err); isStatus {
			return nil, err
		}
		return nil, statusFromError(err)
	}
	out := &pb.KeyOpResponse{Code: codeToWire(res.Code), Message: res.Message, Found: res.Found, BanUntilUnixNs: res.BanUntil,
		Owner: res.Owner, Backup: res.Backup, ReplicaFound: res.ReplicaFound, ReplicaAgrees: res.ReplicaAgrees, BanRemainingNs: res.BanRemaining, Warning: res.Warning}
	if r.Op == KeyOpInspect {
		out.Decision = &pb.Decision{}
		decisionToWire(Result{Decision: res.Decision}, out.Decision)
	}
	return out, nil
}

// keyOpFromWire validates and converts a KeyOpRequest.
func keyOpFromWire(req *pb.KeyOpRequest, maxKeyLen int) (KeyOpRequest, error) {
	r := KeyOpRequest{Op: KeyOp(req.GetOp()), Key: string(req.GetKey()), All: req.GetAll()}
	if r.Op < KeyOpInspect || r.Op > KeyOpInspectReplica {
		return r, fmt.Errorf("op %d unknown", req.GetOp())
	}
	if err := algo.ValidateKey(r.Key, maxKeyLen, nil); err != nil {
		return r, err
	}
	if r.Op != KeyOpUnban && r.Op != KeyOpInvalidate && !(r.Op == KeyOpReset && r.All) {
		l, err := limitFromWire(req)
		if err == nil {
			err = l.Validate()
		}
		if err != nil {
			return r, err
		}
		r.Limit = l
	}
	return r, nil
}

// KeyOpHandler is an optional interface of a PeerHandler: the server answers
// KeyOp RPCs with it (UNIMPLEMENTED without).
type KeyOpHandler interface {
	KeyOp(ctx context.Context, r KeyOpRequest) (KeyOpResult, error)
}

func (s *peerServer) KeyOp(ctx context.Context, req *pb.KeyOpRequest) (*pb.KeyOpResponse, error) {
	kh, ok := s.h.(KeyOpHandler)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "transport: KeyOp is not served")
	}
	r, err := keyOpFromWire(req, s.cfg.MaxKeyLen)
	if err != nil {
		return &pb.KeyOpResponse{Code: pb.Code_CODE_INVALID_ARGUMENT, Message: err.Error()}, nil
	}
	res, err := kh.KeyOp(ctx, r)
	if err != nil {
		return nil, statusFromError(err)
	}
	out := &pb.KeyOpResponse{Code: codeToWire(res.Code), Message: res.Message, Found: res.Found, BanUntilUnixNs: res.BanUntil}
	if res.Code == CodeOK && (r.Op == KeyOpInspect || r.Op == KeyOpInspectReplica) {
		out.Decision = &pb.Decision{}
		decisionToWire(Result{Decision: res.Decision}, out.Decision)
	}
	return out, nil
}

// KeyOp sends r to the peer at addr, bounded by ctx and
// ClientConfig.TransferTimeout. Errors wrap ErrUnavailable for a transport
// failure.
func (p *Pool) KeyOp(ctx context.Context, addr string, r KeyOpRequest) (KeyOpResult, error) {
	pe, err := p.peer(addr)
	if err != nil {
		return KeyOpResult{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.TransferTimeout)
	defer cancel()
	req := &pb.KeyOpRequest{Op: pb.KeyOp(r.Op), Key: []byte(r.Key), All: r.All}
	if r.Limit.Kind.Valid() {
		req.Algorithm, req.Limit, req.PeriodNs, req.Burst = kindToWire(r.Limit.Kind), r.Limit.Limit, int64(r.Limit.Period), r.Limit.Burst
	}
	resp, err := pe.client.KeyOp(cctx, req)
	if err != nil {
		return KeyOpResult{}, fmt.Errorf("%w: key op on %s: %w", ErrUnavailable, addr, err)
	}
	out := KeyOpResult{Code: codeFromWire(resp.GetCode()), Message: resp.GetMessage(), Found: resp.GetFound(), BanUntil: resp.GetBanUntilUnixNs()}
	if d := resp.GetDecision(); d != nil {
		var res Result
		decisionFromWire(d, &res)
		out.Decision = res.Decision
	}
	return out, nil
}
