package transport

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// DescriptorCheck is a CheckDescriptors request: descriptors of a policy
// domain (envoyproxy/ratelimit's model).
type DescriptorCheck struct {
	// Domain is the policy domain.
	Domain string
	// Descriptors are checked in order.
	Descriptors []Descriptor
	// Hits per descriptor; 1 when the request did not set it.
	Hits int64
}

// Descriptor is one descriptor of a DescriptorCheck.
type Descriptor struct {
	// Entries are the key/value pairs, in order.
	Entries []DescriptorEntry
	// Hits replaces DescriptorCheck.Hits when not nil.
	Hits *int64
}

// DescriptorEntry is one key/value pair.
type DescriptorEntry struct{ Key, Value string }

// DescriptorResult answers a DescriptorCheck.
type DescriptorResult struct {
	// Allowed is false when any descriptor was denied.
	Allowed bool
	// PolicyVersion is the version of the policy that decided.
	PolicyVersion uint64
	// Statuses holds one status per descriptor, in order.
	Statuses []DescriptorStatus
}

// DescriptorStatus is one descriptor's decision.
type DescriptorStatus struct {
	// Result carries the Decision, Route, Owner and Banned (Code is CodeOK).
	Result
	// Outcome is no_rule, unlimited, replaced, allowed, denied, banned or
	// shadow_denied.
	Outcome string
	// Rule is the rule's name or path, "" for no_rule.
	Rule string
	// WouldDeny is set when a shadow_mode rule would have denied.
	WouldDeny bool
}

// DescriptorHandler serves CheckDescriptors (implemented by the daemon over
// its policy file). Errors: wrap ErrInvalidCheck for bad input
// (InvalidArgument), ErrUnavailable when it cannot decide (Unavailable).
type DescriptorHandler interface {
	CheckDescriptors(ctx context.Context, c DescriptorCheck) (DescriptorResult, error)
}

// CheckDescriptors serves the RPC with ServerConfig.Descriptors (UNIMPLEMENTED
// when nil); bad input is INVALID_ARGUMENT.
func (s *limiterServer) CheckDescriptors(ctx context.Context, req *pb.CheckDescriptorsRequest) (*pb.CheckDescriptorsResponse, error) {
	if s.desc == nil {
		return nil, status.Error(codes.Unimplemented, "this server has no policy file (ringlimitd --policy-file)")
	}
	if len(req.GetDescriptors()) > s.cfg.MaxBatch {
		return nil, batchTooLarge("descriptors", len(req.GetDescriptors()), s.cfg.MaxBatch)
	}
	c := DescriptorCheck{Domain: req.GetDomain(), Hits: 1, Descriptors: make([]Descriptor, len(req.GetDescriptors()))}
	if req.Hits != nil {
		c.Hits = req.GetHits()
	}
	for i, d := range req.GetDescriptors() {
		if len(d.GetEntries()) > s.cfg.MaxBatch {
			return nil, status.Errorf(codes.InvalidArgument, "%v: descriptors[%d] has %d entries, above %d", ErrInvalidCheck, i, len(d.GetEntries()), s.cfg.MaxBatch)
		}
		if d.Hits != nil {
			h := d.GetHits()
			c.Descriptors[i].Hits = &h
		}
		c.Descriptors[i].Entries = make([]DescriptorEntry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			c.Descriptors[i].Entries[j] = DescriptorEntry{Key: e.GetKey(), Value: e.GetValue()}
		}
	}
	r, err := s.desc.CheckDescriptors(ctx, c)
	if err != nil {
		return nil, statusFromError(err)
	}
	out := &pb.CheckDescriptorsResponse{Allowed: r.Allowed, PolicyVersion: r.PolicyVersion, Statuses: make([]*pb.DescriptorStatus, len(r.Statuses))}
	for i, st := range r.Statuses {
		d := &pb.Decision{}
		decisionToWire(st.Result, d)
		out.Statuses[i] = &pb.DescriptorStatus{Outcome: st.Outcome, Rule: st.Rule, Decision: d, WouldDeny: st.WouldDeny}
	}
	return out, nil
}

// DescriptorResultFromWire maps a CheckDescriptorsResponse back to a
// DescriptorResult (for clients).
func DescriptorResultFromWire(m *pb.CheckDescriptorsResponse) DescriptorResult {
	r := DescriptorResult{Allowed: m.GetAllowed(), PolicyVersion: m.GetPolicyVersion(), Statuses: make([]DescriptorStatus, len(m.GetStatuses()))}
	for i, st := range m.GetStatuses() {
		r.Statuses[i] = DescriptorStatus{Outcome: st.GetOutcome(), Rule: st.GetRule(), WouldDeny: st.GetWouldDeny()}
		decisionFromWire(st.GetDecision(), &r.Statuses[i].Result)
	}
	return r
}
