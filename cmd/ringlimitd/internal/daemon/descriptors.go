package daemon

import (
	"context"

	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
	"github.com/ringlimit/ringlimit/transport"
)

// descriptorHandler serves the gRPC Limiter service's CheckDescriptors RPC
// (transport.DescriptorHandler) with a policy.Limiter: it converts the wire
// request to policy descriptors and the policy.Result back, and hands errors to
// transport in its terms (node.WireError).
type descriptorHandler struct{ lim *policy.Limiter }

func (h descriptorHandler) CheckDescriptors(ctx context.Context, c transport.DescriptorCheck) (transport.DescriptorResult, error) {
	descs := make([]policy.Descriptor, len(c.Descriptors))
	for i, d := range c.Descriptors {
		descs[i].Hits = d.Hits
		descs[i].Entries = make([]policy.Entry, len(d.Entries))
		for j, e := range d.Entries {
			descs[i].Entries[j] = policy.Entry{Key: e.Key, Value: e.Value}
		}
	}
	res, err := h.lim.Check(ctx, c.Domain, descs, c.Hits)
	if err != nil {
		return transport.DescriptorResult{}, node.WireError(err)
	}
	out := transport.DescriptorResult{Allowed: res.Allowed, PolicyVersion: res.Version, Statuses: make([]transport.DescriptorStatus, len(res.Decisions))}
	for i := range res.Decisions {
		d := &res.Decisions[i]
		st := transport.DescriptorStatus{Outcome: string(d.Outcome()), WouldDeny: d.WouldDeny}
		st.Result = transport.Result{Decision: d.Decision.Decision, Owner: d.Owner, Banned: d.Banned}
		if d.Key != "" { // the cluster was asked: its route
			st.Route = transport.Route(d.Route)
		}
		if d.Rule != nil {
			st.Rule = d.Rule.ID()
		}
		out.Statuses[i] = st
	}
	return out, nil
}
