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
	r := KeyOpRequest{Op: KeyOp(req.GetOp()), Key: string(req.GetKey()), All: req.GetAll()}
	if r.Op < KeyOpInspect || r.Op > KeyOpInspectReplica {
		return &pb.KeyOpResponse{Code: pb.Code_CODE_INVALID_ARGUMENT, Message: fmt.Sprintf("op %d unknown", req.GetOp())}, nil
	}
	if err := algo.ValidateKey(r.Key, s.cfg.MaxKeyLen, nil); err != nil {
		return &pb.KeyOpResponse{Code: pb.Code_CODE_INVALID_ARGUMENT, Message: err.Error()}, nil
	}
	if r.Op != KeyOpUnban && r.Op != KeyOpInvalidate && !(r.Op == KeyOpReset && r.All) {
		l, err := limitFromWire(req)
		if err == nil {
			err = l.Validate()
		}
		if err != nil {
			return &pb.KeyOpResponse{Code: pb.Code_CODE_INVALID_ARGUMENT, Message: err.Error()}, nil
		}
		r.Limit = l
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
