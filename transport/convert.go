package transport

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// This file is the only place that maps between the wire messages of
// ringlimitv1 and the Go types of this package and algo.

// kindToWire maps an algo.Kind to its wire enum; an invalid Kind maps to
// ALGORITHM_UNSPECIFIED, which the receiver rejects.
func kindToWire(k algo.Kind) pb.Algorithm {
	switch k {
	case algo.SlidingWindowLog:
		return pb.Algorithm_ALGORITHM_SLIDING_WINDOW_LOG
	case algo.SlidingWindowCounter:
		return pb.Algorithm_ALGORITHM_SLIDING_WINDOW_COUNTER
	case algo.FixedWindow:
		return pb.Algorithm_ALGORITHM_FIXED_WINDOW
	case algo.GCRA:
		return pb.Algorithm_ALGORITHM_GCRA
	case algo.TokenBucket:
		return pb.Algorithm_ALGORITHM_TOKEN_BUCKET
	case algo.BucketedSlidingWindow:
		return pb.Algorithm_ALGORITHM_BUCKETED_SLIDING_WINDOW
	}
	return pb.Algorithm_ALGORITHM_UNSPECIFIED
}

// kindFromWire maps a wire enum to an algo.Kind; UNSPECIFIED and values this
// version does not know are errors wrapping ErrInvalidCheck that name the field.
func kindFromWire(a pb.Algorithm) (algo.Kind, error) {
	switch a {
	case pb.Algorithm_ALGORITHM_SLIDING_WINDOW_LOG:
		return algo.SlidingWindowLog, nil
	case pb.Algorithm_ALGORITHM_SLIDING_WINDOW_COUNTER:
		return algo.SlidingWindowCounter, nil
	case pb.Algorithm_ALGORITHM_FIXED_WINDOW:
		return algo.FixedWindow, nil
	case pb.Algorithm_ALGORITHM_GCRA:
		return algo.GCRA, nil
	case pb.Algorithm_ALGORITHM_TOKEN_BUCKET:
		return algo.TokenBucket, nil
	case pb.Algorithm_ALGORITHM_BUCKETED_SLIDING_WINDOW:
		return algo.BucketedSlidingWindow, nil
	}
	return 0, &algo.InputError{Field: "algorithm", Value: a.String(), Allowed: "must be one of " + algo.KindNames(", "), Err: ErrInvalidCheck}
}

func routeToWire(r Route) pb.Route {
	switch r {
	case RouteOwner:
		return pb.Route_ROUTE_OWNER
	case RouteForwarded:
		return pb.Route_ROUTE_FORWARDED
	case RouteFallback:
		return pb.Route_ROUTE_FALLBACK
	case RouteBackup:
		return pb.Route_ROUTE_BACKUP
	case RouteCachedDenial:
		return pb.Route_ROUTE_CACHED_DENIAL
	case RouteLease:
		return pb.Route_ROUTE_LEASE
	}
	return pb.Route_ROUTE_UNSPECIFIED
}

func routeFromWire(r pb.Route) Route {
	switch r {
	case pb.Route_ROUTE_OWNER:
		return RouteOwner
	case pb.Route_ROUTE_FORWARDED:
		return RouteForwarded
	case pb.Route_ROUTE_FALLBACK:
		return RouteFallback
	case pb.Route_ROUTE_BACKUP:
		return RouteBackup
	case pb.Route_ROUTE_CACHED_DENIAL:
		return RouteCachedDenial
	case pb.Route_ROUTE_LEASE:
		return RouteLease
	}
	return RouteUnknown
}

func codeToWire(c Code) pb.Code {
	switch c {
	case CodeOK:
		return pb.Code_CODE_OK
	case CodeNotOwner:
		return pb.Code_CODE_NOT_OWNER
	case CodeInvalidArgument:
		return pb.Code_CODE_INVALID_ARGUMENT
	case CodePermissionDenied:
		return pb.Code_CODE_PERMISSION_DENIED
	case CodeResourceExhausted:
		return pb.Code_CODE_RESOURCE_EXHAUSTED
	}
	return pb.Code_CODE_UNAVAILABLE
}

// codeFromWire maps a wire code; a code this version does not know is treated
// as CodeUnavailable (the check was not decided).
func codeFromWire(c pb.Code) Code {
	switch c {
	case pb.Code_CODE_OK:
		return CodeOK
	case pb.Code_CODE_NOT_OWNER:
		return CodeNotOwner
	case pb.Code_CODE_INVALID_ARGUMENT:
		return CodeInvalidArgument
	case pb.Code_CODE_PERMISSION_DENIED:
		return CodePermissionDenied
	case pb.Code_CODE_RESOURCE_EXHAUSTED:
		return CodeResourceExhausted
	}
	return CodeUnavailable
}

// checkToWire fills m from c. The key bytes are appended to *keys, so one buffer
// sized for a whole batch holds every key of it.
func checkToWire(c Check, m *pb.Check, keys *[]byte) {
	start := len(*keys)
	*keys = append(*keys, c.Key...)
	m.Key = (*keys)[start:len(*keys):len(*keys)]
	m.Algorithm = kindToWire(c.Limit.Kind)
	m.Limit = c.Limit.Limit
	m.PeriodNs = int64(c.Limit.Period)
	m.Burst = c.Limit.Burst
	m.Hits = c.Hits
	m.CreatedAtUnixNs = c.CreatedAt
	m.PenaltyDenials = c.Penalty.Denials
	m.PenaltyWithinNs = int64(c.Penalty.Within)
	m.PenaltyBanNs = int64(c.Penalty.Ban)
	m.AsBackup = c.AsBackup
	m.MaxWaitNs = int64(c.MaxWait)
	m.CancelAtUnixNs = c.CancelAt
	m.LeaseHits = c.LeaseHits
	m.LeaseId = c.LeaseID
	m.LeaseLeft = c.LeaseLeft
}

// wireLimit is the limit part that pb.Check and pb.KeyState share.
type wireLimit interface {
	GetAlgorithm() pb.Algorithm
	GetLimit() int64
	GetPeriodNs() int64
	GetBurst() int64
}

// limitFromWire maps the limit fields of m; only the algorithm can fail here.
func limitFromWire(m wireLimit) (algo.Limit, error) {
	k, err := kindFromWire(m.GetAlgorithm())
	if err != nil {
		return algo.Limit{}, err
	}
	return algo.Limit{Kind: k, Limit: m.GetLimit(), Period: time.Duration(m.GetPeriodNs()), Burst: m.GetBurst()}, nil
}

// checkFromWire maps m to a Check. Only the algorithm can fail here; the caller
// runs ValidateCheck on the result.
func checkFromWire(m *pb.Check) (Check, error) {
	l, err := limitFromWire(m)
	if err != nil {
		return Check{}, err
	}
	return Check{
		Key:       string(m.GetKey()),
		Limit:     l,
		Hits:      m.GetHits(),
		CreatedAt: m.GetCreatedAtUnixNs(),
		Penalty:   Penalty{Denials: m.GetPenaltyDenials(), Within: time.Duration(m.GetPenaltyWithinNs()), Ban: time.Duration(m.GetPenaltyBanNs())},
		AsBackup:  m.GetAsBackup(),
		MaxWait:   time.Duration(m.GetMaxWaitNs()),
		CancelAt:  m.GetCancelAtUnixNs(),
		LeaseHits: m.GetLeaseHits(),
		LeaseID:   m.GetLeaseId(),
		LeaseLeft: m.GetLeaseLeft(),
	}, nil
}

// checksToWire builds the wire form of a batch with three allocations in all:
// the message values, the pointers to them, and one buffer for every key.
func checksToWire(checks []Check) []*pb.Check {
	n := 0
	for i := range checks {
		n += len(checks[i].Key)
	}
	keys := make([]byte, 0, n)
	msgs := make([]pb.Check, len(checks))
	ptrs := make([]*pb.Check, len(checks))
	for i := range checks {
		checkToWire(checks[i], &msgs[i], &keys)
		ptrs[i] = &msgs[i]
	}
	return ptrs
}

func decisionToWire(r Result, m *pb.Decision) {
	m.Allowed = r.Decision.Allowed
	m.Limit = r.Decision.Limit
	m.Remaining = r.Decision.Remaining
	m.RetryAfterNs = int64(r.Decision.RetryAfter)
	m.ResetAfterNs = int64(r.Decision.ResetAfter)
	m.Route = routeToWire(r.Route)
	m.Owner = r.Owner
	m.Banned = r.Banned
	m.DelayNs = int64(r.Delay)
	m.AtUnixNs = r.At
	m.LeaseHits = r.LeaseHits
	m.LeaseNs = int64(r.LeaseFor)
	m.LeaseId = r.LeaseID
	m.LeaseRenewed = r.LeaseRenewed
}

// decisionFromWire maps a Decision message (nil reads as the zero Decision) into
// the decision, route and owner of r.
func decisionFromWire(m *pb.Decision, r *Result) {
	r.Decision = algo.Decision{
		Allowed:    m.GetAllowed(),
		Limit:      m.GetLimit(),
		Remaining:  m.GetRemaining(),
		RetryAfter: time.Duration(m.GetRetryAfterNs()),
		ResetAfter: time.Duration(m.GetResetAfterNs()),
	}
	r.Route = routeFromWire(m.GetRoute())
	r.Owner = m.GetOwner()
	r.Banned = m.GetBanned()
	r.Delay = time.Duration(m.GetDelayNs())
	r.At = m.GetAtUnixNs()
	r.LeaseHits = m.GetLeaseHits()
	r.LeaseFor = time.Duration(m.GetLeaseNs())
	r.LeaseID = m.GetLeaseId()
	r.LeaseRenewed = m.GetLeaseRenewed()
}

// resultsToWire builds the wire form of a batch of results with four
// allocations in all. A decision is sent only for CodeOK results.
func resultsToWire(results []Result) []*pb.Result {
	msgs := make([]pb.Result, len(results))
	decs := make([]pb.Decision, len(results))
	ptrs := make([]*pb.Result, len(results))
	for i := range results {
		r := &results[i]
		m := &msgs[i]
		m.Code = codeToWire(r.Code)
		m.Message = r.Message
		if r.Code == CodeResourceExhausted {
			m.RetryAfterNs = int64(r.Decision.RetryAfter)
		}
		if r.Code == CodeOK {
			decisionToWire(*r, &decs[i])
			m.Decision = &decs[i]
		}
		ptrs[i] = m
	}
	return ptrs
}

// resultFromWire maps one wire result. A CodeOK result without a decision is
// answered as CodeUnavailable: the peer did not decide it.
func resultFromWire(m *pb.Result, r *Result) {
	r.Code = codeFromWire(m.GetCode())
	r.Message = m.GetMessage()
	switch m.GetCode() {
	case pb.Code_CODE_OK, pb.Code_CODE_NOT_OWNER, pb.Code_CODE_INVALID_ARGUMENT, pb.Code_CODE_UNAVAILABLE, pb.Code_CODE_PERMISSION_DENIED, pb.Code_CODE_RESOURCE_EXHAUSTED:
	default:
		r.Message = fmt.Sprintf("unknown result code %d: %s", int32(m.GetCode()), r.Message)
	}
	if r.Code == CodeResourceExhausted {
		r.Decision = algo.Decision{RetryAfter: time.Duration(max(m.GetRetryAfterNs(), 0))}
	}
	if r.Code != CodeOK {
		return
	}
	if m.GetDecision() == nil {
		r.Code = CodeUnavailable
		r.Message = "result has no decision"
		return
	}
	decisionFromWire(m.GetDecision(), r)
}

func keyStateToWire(s KeyState, m *pb.KeyState) {
	m.Key = []byte(s.Key)
	m.KeyHash = s.KeyHash
	m.Algorithm = kindToWire(s.Limit.Kind)
	m.Limit = s.Limit.Limit
	m.PeriodNs = int64(s.Limit.Period)
	m.Burst = s.Limit.Burst
	m.State = s.State
	m.LastNowUnixNs = s.LastNow
	m.CallerClock = s.CallerClock
	m.LogDelta = s.LogDelta
	m.LogAfterUnixNs = s.LogAfter
	m.LogAfterCount = s.LogAfterCount
}

func keyStateFromWire(m *pb.KeyState) (KeyState, error) {
	l, err := limitFromWire(m)
	if err != nil {
		return KeyState{}, err
	}
	return KeyState{
		Key:           string(m.GetKey()),
		KeyHash:       m.GetKeyHash(),
		Limit:         l,
		State:         m.GetState(),
		LastNow:       m.GetLastNowUnixNs(),
		CallerClock:   m.GetCallerClock(),
		LogDelta:      m.GetLogDelta(),
		LogAfter:      m.GetLogAfterUnixNs(),
		LogAfterCount: m.GetLogAfterCount(),
	}, nil
}
