package transport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/algo"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

func dialClient(t *testing.T, addr string) *Client {
	t.Helper()
	c, err := Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func rawConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// badChecks are invalid checks with the field their error must name
// (the *algo.InputError's Field; messages read "field <Field> value ...").
func badChecks() []struct {
	name  string
	check Check
	field string
} {
	ok := validCheck("k", 1)
	with := func(f func(*Check)) Check { c := ok; f(&c); return c }
	return []struct {
		name  string
		check Check
		field string
	}{
		{"empty key", with(func(c *Check) { c.Key = "" }), "key"},
		{"key too long", with(func(c *Check) { c.Key = strings.Repeat("x", 33) }), "key"},
		{"negative hits", with(func(c *Check) { c.Hits = -1 }), "hits"},
		{"hits above MaxHits", with(func(c *Check) { c.Hits = algo.MaxHits + 1 }), "hits"},
		{"zero limit", with(func(c *Check) { c.Limit.Limit = 0 }), "limit"},
		{"negative period", with(func(c *Check) { c.Limit.Period = -time.Second }), "period"},
		{"negative burst", with(func(c *Check) { c.Limit.Burst = -1 }), "burst"},
		{"unspecified algorithm", with(func(c *Check) { c.Limit.Kind = 0 }), "algorithm"},
		{"negative created_at", with(func(c *Check) { c.CreatedAt = -1 }), "created_at"},
	}
}

func TestLimiterCheckRejectsEveryBadField(t *testing.T) {
	t.Parallel()
	lim := &fakeLimiter{}
	addr, _ := startServer(t, ServerConfig{MaxKeyLen: 32}, nil, lim)
	c := dialClient(t, addr)
	raw := pb.NewLimiterClient(rawConn(t, addr))
	ctx := context.Background()
	for _, tc := range badChecks() {
		_, err := c.Check(ctx, tc.check)
		if !errors.Is(err, ErrInvalidCheck) || !containsFold(err.Error(), tc.field) {
			t.Errorf("%s: got %v, want ErrInvalidCheck naming %q", tc.name, err, tc.field)
		}
		m := new(pb.Check)
		var keys []byte
		checkToWire(tc.check, m, &keys)
		_, err = raw.Check(ctx, &pb.CheckRequest{Check: m})
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !containsFold(st.Message(), tc.field) {
			t.Errorf("%s over the raw stub: got %v, want InvalidArgument naming %q", tc.name, err, tc.field)
		}
	}
	// An algorithm number this version does not know.
	m := new(pb.Check)
	var keys []byte
	checkToWire(validCheck("k", 1), m, &keys)
	m.Algorithm = 99
	_, err := raw.Check(ctx, &pb.CheckRequest{Check: m})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "field algorithm value 99") {
		t.Errorf("unknown algorithm: got %v, want InvalidArgument naming algorithm 99", err)
	}
	_, err = raw.Check(ctx, &pb.CheckRequest{})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "check") {
		t.Errorf("missing check: got %v, want InvalidArgument", err)
	}
	if got := lim.calls.Load(); got != 0 {
		t.Fatalf("handler called %d times for invalid checks, want 0", got)
	}
	// The server keeps serving.
	r, err := c.Check(ctx, validCheck("fine", 3))
	if err != nil || !r.Decision.Allowed || r.Decision.Remaining != 3 || r.Route != RouteForwarded || r.Owner != "owner:fine" || r.Code != CodeOK {
		t.Fatalf("valid check after bad ones: got %+v, %v", r, err)
	}
}

func TestLimiterCheckMapsHandlerErrors(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, ServerConfig{}, nil, &fakeLimiter{})
	c := dialClient(t, addr)
	raw := pb.NewLimiterClient(rawConn(t, addr))
	for _, tc := range []struct {
		key  string
		code codes.Code
		is   []error
	}{
		{"stopped", codes.Unavailable, []error{ErrUnavailable}},
		{"handler-invalid", codes.InvalidArgument, []error{ErrInvalidCheck, algo.ErrInvalidLimit}},
		{"handler-bug", codes.Internal, []error{ErrUnavailable}},
	} {
		m := new(pb.Check)
		var keys []byte
		checkToWire(validCheck(tc.key, 1), m, &keys)
		_, err := raw.Check(context.Background(), &pb.CheckRequest{Check: m})
		if got := status.Code(err); got != tc.code {
			t.Errorf("%s: got code %v, want %v", tc.key, got, tc.code)
		}
		// An input error reaches the client as its field message, without
		// internal package prefixes, and with its fields as ErrorInfo metadata.
		if msg := status.Convert(err).Message(); tc.code == codes.InvalidArgument && msg != "field burst value 99: too large for this node" {
			t.Errorf("%s: got message %q, want the InputError's Message", tc.key, msg)
		}
		_, err = c.Check(context.Background(), validCheck(tc.key, 1))
		for _, want := range tc.is {
			if !errors.Is(err, want) {
				t.Errorf("%s: got %v, want it to wrap %v", tc.key, err, want)
			}
		}
		var ie *algo.InputError
		if tc.code == codes.InvalidArgument && (!errors.As(err, &ie) || *ie != (algo.InputError{Field: "burst", Value: "99", Allowed: "too large for this node", Err: algo.ErrInvalidLimit})) {
			t.Errorf("%s: got %#v, want the server's InputError rebuilt", tc.key, err)
		}
	}
}

func TestLimiterCheckBatchPerItemStatus(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, ServerConfig{MaxKeyLen: 32}, nil, &fakeLimiter{})
	c := dialClient(t, addr)
	var checks []Check
	var fields []string
	for _, tc := range badChecks() {
		checks = append(checks, validCheck("good-"+tc.name, 7), tc.check)
		fields = append(fields, "", tc.field)
	}
	checks = append(checks, validCheck("stopped", 1))
	fields = append(fields, "stopped")
	res, err := c.CheckBatch(context.Background(), checks)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		switch {
		case fields[i] == "stopped":
			if r.Code != CodeUnavailable || !strings.Contains(r.Message, "node stopped") {
				t.Errorf("item %d: got %+v, want CodeUnavailable", i, r)
			}
		case fields[i] != "":
			if r.Code != CodeInvalidArgument || !containsFold(r.Message, fields[i]) {
				t.Errorf("item %d: got %+v, want CodeInvalidArgument naming %q", i, r, fields[i])
			}
		default:
			if r.Code != CodeOK || r.Owner != "owner:"+checks[i].Key || r.Decision.Remaining != 7 {
				t.Errorf("item %d: got %+v, want its own OK result", i, r)
			}
		}
	}
	empty, err := c.CheckBatch(context.Background(), nil)
	if err != nil || len(empty) != 0 {
		t.Fatalf("empty batch: got %v, %v", empty, err)
	}
}

func TestOversizedBatchesAreRejected(t *testing.T) {
	t.Parallel()
	f := &fakePeer{}
	lim := &fakeLimiter{}
	addr, _ := startServer(t, ServerConfig{MaxBatch: 10}, f, lim)
	c := dialClient(t, addr)
	checks := make([]Check, 11)
	for i := range checks {
		checks[i] = validCheck("k", 1)
	}
	if _, err := c.CheckBatch(context.Background(), checks); !errors.Is(err, ErrInvalidCheck) || !strings.Contains(err.Error(), "batch of 11") {
		t.Fatalf("CheckBatch: got %v, want ErrInvalidCheck naming the batch size", err)
	}
	peer := pb.NewPeerClient(rawConn(t, addr))
	_, err := peer.Forward(context.Background(), &pb.ForwardRequest{Checks: checksToWire(checks)})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "checks") {
		t.Fatalf("Forward: got %v, want InvalidArgument naming checks", err)
	}
	_, err = peer.Transfer(context.Background(), &pb.TransferRequest{States: make([]*pb.KeyState, 11)})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "states") {
		t.Fatalf("Transfer: got %v, want InvalidArgument naming states", err)
	}
	if f.calls.Load()+f.transfers.Load()+lim.calls.Load() != 0 {
		t.Fatal("a handler saw an oversized batch")
	}
	// Batches within the maximum still pass.
	p := newPool(t, ClientConfig{})
	if _, err := p.Forward(context.Background(), addr, validCheck("k", 1)); err != nil {
		t.Fatalf("batch of 1: %v", err)
	}
}

func TestUnregisteredServiceIsUnimplemented(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t, ServerConfig{}, &fakePeer{}, nil)
	_, err := pb.NewLimiterClient(rawConn(t, addr)).Check(context.Background(), &pb.CheckRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("got %v, want Unimplemented", err)
	}
}

// dirtyPeer checks that every out slice it gets is as long as the batch and
// zero, then fills each Result with every field set, and answers a key's
// decision only through Remaining, so that a result left from an earlier
// batch shows. It keeps the key of every check with a Penalty, as node keeps
// ban states, and checks that every key names its hits ("k<caller>-<hits>").
type dirtyPeer struct {
	fakePeer
	mu   sync.Mutex
	errs []string
	kept []string
}

func (d *dirtyPeer) Forward(_ context.Context, checks []Check, out []Result) {
	if len(out) != len(checks) {
		d.fail(fmt.Sprintf("out has %d results for %d checks", len(out), len(checks)))
		return
	}
	for i := range checks {
		if !strings.HasSuffix(checks[i].Key, fmt.Sprintf("-%d", checks[i].Hits)) {
			d.fail(fmt.Sprintf("check %q has %d hits", checks[i].Key, checks[i].Hits))
		}
		if !checks[i].Penalty.IsZero() {
			d.mu.Lock()
			d.kept = append(d.kept, checks[i].Key)
			d.mu.Unlock()
		}
	}
	for i := range out {
		if out[i] != (Result{}) {
			d.fail(fmt.Sprintf("out[%d] not zero on entry: %+v", i, out[i]))
		}
		out[i] = Result{
			Decision: algo.Decision{Allowed: true, Limit: 7, Remaining: checks[i].Hits, RetryAfter: 1, ResetAfter: 2},
			Route:    RouteOwner, Owner: "member-with-a-long-name", Message: "note", Banned: true,
		}
	}
}

func (d *dirtyPeer) fail(msg string) {
	d.mu.Lock()
	d.errs = append(d.errs, msg)
	d.mu.Unlock()
}

// The server reuses a stream batch's results and key bytes across batches: the
// handler gets results zeroed and as long as the batch every time, each caller
// gets its own check's answer, and the keys a handler keeps (those of checks
// with a Penalty) stay as they were sent.
func TestForwardStreamReusesResultsAndKeysSafely(t *testing.T) {
	t.Parallel()
	h := &dirtyPeer{}
	addr, _ := startServer(t, ServerConfig{}, h, nil)
	p := newPool(t, ClientConfig{BatchMaxItems: 8, BatchMaxWait: 100 * time.Microsecond})
	const callers, perCaller = 16, 50
	var want []string
	var wg sync.WaitGroup
	for g := range callers {
		for i := range perCaller {
			if i%3 == 0 {
				want = append(want, fmt.Sprintf("k%d-%d", g, g*perCaller+i+1))
			}
		}
		wg.Go(func() {
			for i := range perCaller {
				hits := int64(g*perCaller + i + 1)
				c := validCheck(fmt.Sprintf("k%d-%d", g, hits), hits)
				if i%3 == 0 {
					c.Penalty = Penalty{Denials: 2, Within: time.Minute, Ban: time.Hour}
				}
				r, err := p.Forward(context.Background(), addr, c)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Decision.Remaining != hits || r.Owner != "member-with-a-long-name" {
					t.Errorf("check with %d hits got %+v", hits, r)
					return
				}
			}
		})
	}
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.errs) > 0 {
		t.Fatalf("%d times the handler saw a bad batch; first: %s", len(h.errs), h.errs[0])
	}
	slices.Sort(h.kept)
	slices.Sort(want)
	if !slices.Equal(h.kept, want) {
		t.Fatalf("kept penalty keys changed after their batch:\n got %q\nwant %q", h.kept, want)
	}
}

func containsFold(s, substr string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(substr))
}
