// Package rls is ringlimitd's Envoy front door: the
// envoy.service.ratelimit.v3.RateLimitService (ShouldRateLimit) that Envoy's and
// Istio's global rate-limit filter (envoy.filters.http.ratelimit) calls, answered
// from the policy file (node/policy) on the cluster, so moving from
// envoyproxy/ratelimit + Redis to ringlimit is changing the filter's cluster
// address.
//
// Data flow: ShouldRateLimit validates the request, turns its descriptors into
// policy.Descriptors (request-level hits_addend, 0 meaning 1, and each
// descriptor's own hits_addend), calls policy.Limiter.Check (every limited
// descriptor decided on its key's owner, under one policy version), and maps
// each Decision to a DescriptorStatus: code, current_limit (the rule's
// requests_per_unit, unit and name), limit_remaining and duration_until_reset.
// As envoyproxy/ratelimit does, an unknown domain or a descriptor no rule
// matches is OK with no current_limit, and a shadow_mode rule answers OK while
// its would-be denial is counted.
//
// Who may call it: it is registered on the daemon's client gRPC listener, which
// in secure mode serves TLS and authenticates callers (client certificate or
// bearer token). What it can change: the rate-limit state of the keys the
// policy file builds from the descriptors.
package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
)

// MaxDescriptors bounds the descriptors of one request.
const MaxDescriptors = 64

// Server implements ratelimitv3.RateLimitServiceServer over a policy.Limiter.
type Server struct {
	ratelimitv3.UnimplementedRateLimitServiceServer
	lim *policy.Limiter
}

// New returns a Server deciding with lim. It returns an error for a nil lim.
func New(lim *policy.Limiter) (*Server, error) {
	if lim == nil {
		return nil, errors.New("rls: nil policy limiter")
	}
	return &Server{lim: lim}, nil
}

// ShouldRateLimit answers Envoy's rate-limit request. Errors are gRPC statuses:
// InvalidArgument for a request that cannot be decided (empty domain, no
// descriptors, an entry with an empty key, negative hits, a limit override),
// Unavailable when the cluster could not decide (the filter's
// failure_mode_deny then decides), never Unknown.
func (s *Server) ShouldRateLimit(ctx context.Context, req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
	if n := len(req.GetDescriptors()); n > MaxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "descriptors: %d, want at most %d", n, MaxDescriptors)
	}
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1 // Envoy: hits_addend 0 means 1
	}
	descs := make([]policy.Descriptor, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		if d.GetLimit() != nil {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].limit: limit overrides are not supported; put the limit in the policy file", i)
		}
		if d.GetIsNegativeHits() {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].is_negative_hits: refunds are not supported", i)
		}
		for _, e := range d.GetEntries() {
			descs[i].Entries = append(descs[i].Entries, policy.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		if h := d.GetHitsAddend(); h != nil {
			if h.GetValue() > uint64(algo.MaxHits) {
				return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].hits_addend: %d, want 0..%d", i, h.GetValue(), algo.MaxHits)
			}
			v := int64(h.GetValue())
			descs[i].Hits = &v
		}
	}
	res, err := s.lim.Check(ctx, req.GetDomain(), descs, hits)
	if err != nil {
		return nil, statusOf(err)
	}
	out := &ratelimitv3.RateLimitResponse{OverallCode: ratelimitv3.RateLimitResponse_OK}
	if !res.Allowed {
		out.OverallCode = ratelimitv3.RateLimitResponse_OVER_LIMIT
	}
	out.Statuses = make([]*ratelimitv3.RateLimitResponse_DescriptorStatus, len(res.Decisions))
	for i := range res.Decisions {
		out.Statuses[i] = descriptorStatus(&res.Decisions[i])
	}
	return out, nil
}

// descriptorStatus maps one policy Decision to Envoy's DescriptorStatus.
func descriptorStatus(d *policy.Decision) *ratelimitv3.RateLimitResponse_DescriptorStatus {
	st := &ratelimitv3.RateLimitResponse_DescriptorStatus{Code: ratelimitv3.RateLimitResponse_OK}
	if !d.Allowed {
		st.Code = ratelimitv3.RateLimitResponse_OVER_LIMIT
	}
	r := d.Rule
	if r == nil || r.Unlimited || d.Replaced {
		return st // no limit applies: OK with no current_limit, as envoyproxy/ratelimit
	}
	st.CurrentLimit = &ratelimitv3.RateLimitResponse_RateLimit{
		Name:            r.Name,
		RequestsPerUnit: uint32(min(r.RequestsPerUnit, math.MaxUint32)),
		Unit:            unitOf(r),
	}
	st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
	reset := d.ResetAfter
	if d.Banned && !d.Allowed && d.RetryAfter > reset {
		reset = d.RetryAfter // a ban lasts past the window
	}
	if reset > 0 {
		st.DurationUntilReset = durationpb.New(reset)
	}
	return st
}

// unitOf maps the rule's unit (or a period equal to one unit) to Envoy's enum;
// any other period is UNKNOWN.
func unitOf(r *policy.Rule) ratelimitv3.RateLimitResponse_RateLimit_Unit {
	switch r.Unit {
	case policy.UnitNone:
	default:
		if u, ok := envoyUnit(r.Unit.String()); ok {
			return u
		}
	}
	switch r.Limit.Period {
	case time.Second:
		return ratelimitv3.RateLimitResponse_RateLimit_SECOND
	case time.Minute:
		return ratelimitv3.RateLimitResponse_RateLimit_MINUTE
	case time.Hour:
		return ratelimitv3.RateLimitResponse_RateLimit_HOUR
	case 24 * time.Hour:
		return ratelimitv3.RateLimitResponse_RateLimit_DAY
	}
	return ratelimitv3.RateLimitResponse_RateLimit_UNKNOWN
}

func envoyUnit(name string) (ratelimitv3.RateLimitResponse_RateLimit_Unit, bool) {
	v, ok := ratelimitv3.RateLimitResponse_RateLimit_Unit_value[name]
	return ratelimitv3.RateLimitResponse_RateLimit_Unit(v), ok
}

// statusOf maps an error of a descriptor check to a gRPC status by its
// node.Class; an invalid or forbidden request's message is its node.Message
// (the field, its value and what is allowed; what the caller's scope forbids).
func statusOf(err error) error {
	switch node.Classify(err) {
	case node.ClassInvalid:
		return status.Error(codes.InvalidArgument, node.Message(err))
	case node.ClassPermission:
		return status.Error(codes.PermissionDenied, node.Message(err))
	case node.ClassFull:
		st := status.New(codes.ResourceExhausted, node.Message(err))
		if d := node.RetryAfter(err); d > 0 {
			if withInfo, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); derr == nil {
				st = withInfo
			}
		}
		return st.Err()
	case node.ClassTimeout:
		return status.Error(codes.DeadlineExceeded, "the check was not decided in time")
	case node.ClassCanceled:
		return status.Error(codes.Canceled, "the call was cancelled")
	case node.ClassUnavailable:
		return status.Error(codes.Unavailable, fmt.Sprintf("the cluster could not decide: %v; try later", err))
	}
	return status.Error(codes.Internal, fmt.Sprintf("internal error: %v", err))
}
