package rls

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/clustertest"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
)

// policyYAML follows envoyproxy/ratelimit's README examples (domain, nested
// descriptors, shadow_mode) plus ringlimit's period extension.
const policyYAML = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 100
      name: per_ip
  - key: api_key
    value: shadowed
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: path
    value: /upload
    rate_limit:
      unit: day
      requests_per_unit: 5
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit:
          period: 90s
          requests_per_unit: 2
`

// startRLS starts a 3-node cluster (clustertest.Start: one that waits for a
// slow owner instead of failing over) and an RLS server in front of each node
// (plaintext gRPC on loopback), and returns a client per server and the
// cluster's count of degraded decisions, for failure messages.
func startRLS(t *testing.T) ([]ratelimitv3.RateLimitServiceClient, *clustertest.Degraded) {
	t.Helper()
	c, deg := clustertest.Start(t, 3)
	p, err := policy.Parse("edge.yaml", []byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	var clients []ratelimitv3.RateLimitServiceClient
	for _, n := range c.Nodes() {
		lim, err := policy.NewLimiter(n, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := New(lim)
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		ratelimitv3.RegisterRateLimitServiceServer(g, srv)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go g.Serve(ln)
		t.Cleanup(g.Stop)
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		clients = append(clients, ratelimitv3.NewRateLimitServiceClient(cc))
	}
	return clients, deg
}

func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestShouldRateLimit(t *testing.T) {
	t.Parallel()
	cs, _ := startRLS(t)
	ctx := context.Background()

	// Unknown domain and unmatched descriptor: OK, no current_limit.
	r, err := cs[0].ShouldRateLimit(ctx, &ratelimitv3.RateLimitRequest{Domain: "nope", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "1.2.3.4")}})
	if err != nil || r.OverallCode != ratelimitv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unknown domain: got %v, %v, want OK with no limit", r, err)
	}
	r, err = cs[0].ShouldRateLimit(ctx, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "x")}})
	if err != nil || r.OverallCode != ratelimitv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unmatched: got %v, %v, want OK with no limit", r, err)
	}

	// A limited descriptor: status fields; hits_addend at request level.
	r, err = cs[1].ShouldRateLimit(ctx, &ratelimitv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{desc("path", "/upload")}})
	if err != nil {
		t.Fatal(err)
	}
	st := r.Statuses[0]
	if r.OverallCode != ratelimitv3.RateLimitResponse_OK || st.Code != ratelimitv3.RateLimitResponse_OK ||
		st.CurrentLimit.GetRequestsPerUnit() != 5 || st.CurrentLimit.GetUnit() != ratelimitv3.RateLimitResponse_RateLimit_DAY ||
		st.LimitRemaining != 2 || st.DurationUntilReset.AsDuration() <= 0 || st.DurationUntilReset.AsDuration() > 24*time.Hour {
		t.Fatalf("3 hits of 5/day: got %v", r)
	}
	// Descriptor-level hits_addend overrides the request's: 3 more do not fit.
	d := desc("path", "/upload")
	d.HitsAddend = wrapperspb.UInt64(3)
	r, err = cs[2].ShouldRateLimit(ctx, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	if err != nil || r.OverallCode != ratelimitv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != ratelimitv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("3 more hits: got %v, %v, want OVER_LIMIT with 2 remaining", r, err)
	}

	// Shadow mode: OK even past the limit.
	for i := range 3 {
		r, err = cs[i].ShouldRateLimit(ctx, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("api_key", "shadowed")}})
		if err != nil || r.OverallCode != ratelimitv3.RateLimitResponse_OK {
			t.Fatalf("shadow check %d: got %v, %v, want OK", i, r, err)
		}
	}

	// Nested descriptor with a period: 2 per 90 s, UNKNOWN unit.
	for i, want := range []ratelimitv3.RateLimitResponse_Code{ratelimitv3.RateLimitResponse_OK, ratelimitv3.RateLimitResponse_OK, ratelimitv3.RateLimitResponse_OVER_LIMIT} {
		r, err = cs[i].ShouldRateLimit(ctx, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "t1", "plan", "free")}})
		if err != nil || r.OverallCode != want || r.Statuses[0].CurrentLimit.GetUnit() != ratelimitv3.RateLimitResponse_RateLimit_UNKNOWN {
			t.Fatalf("nested %d: got %v, %v, want %v", i, r, err, want)
		}
	}

	// Two descriptors: overall OVER_LIMIT when one is over.
	r, err = cs[0].ShouldRateLimit(ctx, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "9.9.9.9"), desc("tenant", "t1", "plan", "free")}})
	if err != nil || r.OverallCode != ratelimitv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != ratelimitv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetName() != "per_ip" {
		t.Fatalf("two descriptors: got %v, %v", r, err)
	}
}

func TestShouldRateLimitRejectsBadRequests(t *testing.T) {
	t.Parallel()
	cs, _ := startRLS(t)
	ctx := context.Background()
	over := desc("path", "/upload")
	over.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	for name, req := range map[string]*ratelimitv3.RateLimitRequest{
		"empty domain":   {Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "b")}},
		"no descriptors": {Domain: "edge"},
		"empty key":      {Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("", "b")}},
		"no entries":     {Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{}}},
		"override":       {Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{over}},
	} {
		_, err := cs[0].ShouldRateLimit(ctx, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", name, err)
		}
	}
}

// TestShouldRateLimitExactUnderConcurrency: 64 callers over the 3 nodes, one
// descriptor of 100 per hour: exactly 100 OK.
func TestShouldRateLimitExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	cs, deg := startRLS(t)
	ctx := context.Background()
	var ok, over atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			for range 10 {
				r, err := cs[i%3].ShouldRateLimit(ctx, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}})
				if err != nil {
					t.Error(err)
					return
				}
				if r.OverallCode == ratelimitv3.RateLimitResponse_OK {
					ok.Add(1)
				} else {
					over.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 100 || over.Load() != 540 {
		t.Errorf("got %d OK and %d OVER_LIMIT, want exactly 100 OK of 640 (cluster: %v)", ok.Load(), over.Load(), deg)
	}
}

// TestStatusOfClasses: the RLS door answers each node.Class with its own gRPC
// code; a check outside the caller's scope is PermissionDenied with the
// refusal's message, not InvalidArgument; a full key table ResourceExhausted
// with a RetryInfo.
func TestStatusOfClasses(t *testing.T) {
	t.Parallel()
	pe := &node.PermissionError{Who: `credential "envoy"`, Forbids: `may not check domain "x": outside its domains ["api"]`}
	for _, tc := range []struct {
		err  error
		want codes.Code
		msg  string
	}{
		{&node.InputError{Field: "key", Value: "0 bytes", Allowed: "must be 1..1024 bytes"}, codes.InvalidArgument, "field key"},
		{fmt.Errorf("policy: descriptor 0: %w", pe), codes.PermissionDenied, `permission denied: credential "envoy" may not check domain "x"`},
		{&node.KeyTableFullError{Who: "this node", Text: "holds 3 keys, its MaxKeys", RetryAfter: 7 * time.Second}, codes.ResourceExhausted, "key table full: this node holds 3 keys, its MaxKeys; the earliest key frees in 7s"},
		{node.ErrStopped, codes.Unavailable, "try later"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, ""},
	} {
		st, _ := status.FromError(statusOf(tc.err))
		if st.Code() != tc.want || !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("statusOf(%v): got %v %q, want %v with %q", tc.err, st.Code(), st.Message(), tc.want, tc.msg)
		}
		var retry time.Duration
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				retry = ri.GetRetryDelay().AsDuration()
			}
		}
		if want := node.RetryAfter(tc.err); retry != want {
			t.Errorf("statusOf(%v): RetryInfo %v, want %v", tc.err, retry, want)
		}
	}
}
