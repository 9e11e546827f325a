package transport

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/algo"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

func TestKindRoundTrip(t *testing.T) {
	t.Parallel()
	for _, k := range algo.Kinds() {
		w := kindToWire(k)
		if w == pb.Algorithm_ALGORITHM_UNSPECIFIED {
			t.Fatalf("%v maps to UNSPECIFIED", k)
		}
		got, err := kindFromWire(w)
		if err != nil || got != k {
			t.Fatalf("kind %v -> %v -> %v, %v", k, w, got, err)
		}
		// The enum names follow Kind.String.
		if want := "ALGORITHM_" + strings.ToUpper(k.String()); w.String() != want {
			t.Fatalf("got enum %s for %v, want %s", w, k, want)
		}
	}
	if kindToWire(0) != pb.Algorithm_ALGORITHM_UNSPECIFIED || kindToWire(42) != pb.Algorithm_ALGORITHM_UNSPECIFIED {
		t.Fatal("invalid kinds must map to UNSPECIFIED")
	}
}

func TestCheckAndResultRoundTrip(t *testing.T) {
	t.Parallel()
	c := Check{Key: "user\x00\xff", Limit: algo.Limit{Kind: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 5}, Hits: 3, CreatedAt: 1_700_000_000_000_000_000}
	data, err := proto.Marshal(&pb.ForwardRequest{Checks: checksToWire([]Check{c, c})})
	if err != nil {
		t.Fatalf("binary key: %v", err)
	}
	var req pb.ForwardRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		t.Fatal(err)
	}
	for _, m := range req.Checks {
		got, err := checkFromWire(m)
		if err != nil || got != c {
			t.Fatalf("got %+v, %v, want %+v", got, err, c)
		}
	}
	in := []Result{
		{Decision: algo.Decision{Allowed: false, Limit: 16, Remaining: 0, RetryAfter: algo.RetryNever, ResetAfter: time.Minute}, Route: RouteFallback, Owner: "n1"},
		{Code: CodeNotOwner, Message: "not mine"},
		{Code: CodeInvalidArgument, Message: "key is empty"},
		{Code: CodeUnavailable, Message: "stopping"},
		{Code: CodePermissionDenied, Message: "permission denied: credential \"a\" may only check keys starting with one of its key_prefixes"},
		{Code: CodeResourceExhausted, Message: "holds 3 keys, its MaxKeys", Decision: algo.Decision{RetryAfter: 5 * time.Second}},
	}
	for i, m := range resultsToWire(in) {
		var got Result
		resultFromWire(m, &got)
		if got != in[i] {
			t.Fatalf("result %d: got %+v, want %+v", i, got, in[i])
		}
	}
	var got Result
	resultFromWire(&pb.Result{Code: 77, Message: "future"}, &got)
	if got.Code != CodeUnavailable || !strings.Contains(got.Message, "77") {
		t.Fatalf("unknown code: got %+v, want CodeUnavailable naming it", got)
	}
	resultFromWire(&pb.Result{}, &got)
	if got.Code != CodeUnavailable {
		t.Fatalf("OK without decision: got %+v, want CodeUnavailable", got)
	}
}

func TestValidateCheck(t *testing.T) {
	t.Parallel()
	if err := ValidateCheck(validCheck("k", 0), 0); err != nil {
		t.Fatalf("valid check: %v", err)
	}
	if err := ValidateCheck(validCheck(strings.Repeat("k", DefaultMaxKeyLen), algo.MaxHits), 0); err != nil {
		t.Fatalf("key of DefaultMaxKeyLen, MaxHits: %v", err)
	}
	if err := ValidateCheck(validCheck(strings.Repeat("k", DefaultMaxKeyLen+1), 1), 0); err == nil {
		t.Fatal("key above DefaultMaxKeyLen accepted")
	}
	for _, tc := range badChecks() {
		err := ValidateCheck(tc.check, 32)
		if !errors.Is(err, ErrInvalidCheck) {
			t.Errorf("%s: got %v, want ErrInvalidCheck", tc.name, err)
			continue
		}
		var ie *algo.InputError
		if !errors.As(err, &ie) || !strings.HasPrefix(ie.Field, tc.field) {
			t.Errorf("%s: got %#v, want an *algo.InputError naming %q", tc.name, err, tc.field)
			continue
		}
		limitField := tc.field != "key" && !strings.HasPrefix(tc.field, "penalty") && tc.field != "created_at"
		if limitField != errors.Is(err, algo.ErrInvalidLimit) {
			t.Errorf("%s: errors.Is(err, algo.ErrInvalidLimit) = %v, want %v", tc.name, !limitField, limitField)
		}
	}
}

// FuzzCheckFromWire feeds arbitrary field values through the wire conversion
// and validation: nothing panics, and whatever is accepted passes ValidateCheck
// and survives a round trip unchanged.
func FuzzCheckFromWire(f *testing.F) {
	f.Add([]byte("k"), int32(4), int64(30), int64(time.Minute), int64(15), int64(1), int64(0))
	f.Add([]byte(""), int32(0), int64(0), int64(0), int64(-1), int64(-1), int64(-1))
	f.Add([]byte("\xff\x00"), int32(99), int64(1<<62), int64(1), int64(1<<62), int64(1<<31+1), int64(1<<62))
	f.Fuzz(func(t *testing.T, key []byte, alg int32, limit, period, burst, hits, created int64) {
		m := &pb.Check{Key: key, Algorithm: pb.Algorithm(alg), Limit: limit, PeriodNs: period, Burst: burst, Hits: hits, CreatedAtUnixNs: created}
		data, err := proto.Marshal(&pb.ForwardRequest{Checks: []*pb.Check{m}})
		if err != nil {
			t.Fatal(err)
		}
		var req pb.ForwardRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			t.Fatal(err)
		}
		checks, invalid := decodeChecks(req.Checks, 0)
		if len(checks)+len(invalid) != 1 {
			t.Fatalf("got %d valid + %d invalid, want 1 item", len(checks), len(invalid))
		}
		if len(invalid) == 1 {
			if !errors.Is(invalid[0].err, ErrInvalidCheck) {
				t.Fatalf("rejection %v does not wrap ErrInvalidCheck", invalid[0].err)
			}
			return
		}
		c := checks[0]
		if err := ValidateCheck(c, DefaultMaxKeyLen); err != nil {
			t.Fatalf("accepted check fails ValidateCheck: %v", err)
		}
		back := checksToWire([]Check{c})[0]
		if !proto.Equal(back, m) {
			t.Fatalf("round trip: got %v, want %v", back, m)
		}
	})
}

// FuzzForwardRequest decodes arbitrary bytes as a Forward request the way the
// server does: no panic, and every accepted check is valid.
func FuzzForwardRequest(f *testing.F) {
	seed, _ := proto.Marshal(&pb.ForwardRequest{Checks: checksToWire([]Check{validCheck("a", 1), {Key: "b"}})})
	f.Add(seed)
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.ForwardRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		checks, invalid := decodeChecks(req.Checks, 0)
		if len(checks)+len(invalid) != len(req.Checks) {
			t.Fatalf("got %d+%d items, want %d", len(checks), len(invalid), len(req.Checks))
		}
		for _, c := range checks {
			if err := ValidateCheck(c, DefaultMaxKeyLen); err != nil {
				t.Fatalf("accepted check fails ValidateCheck: %v", err)
			}
		}
		results := make([]Result, len(checks))
		if got := mergeInvalid(results, invalid, len(req.Checks)); len(got) != len(req.Checks) {
			t.Fatalf("merged %d results, want %d", len(got), len(req.Checks))
		}
	})
}

// TestEveryKindHasAWireEnum: every algorithm of algo's name table has its own
// proto enum value and comes back as itself (step 3 of algo's checklist).
func TestEveryKindHasAWireEnum(t *testing.T) {
	seen := map[pb.Algorithm]algo.Kind{}
	for _, k := range algo.Kinds() {
		a := kindToWire(k)
		if a == pb.Algorithm_ALGORITHM_UNSPECIFIED {
			t.Errorf("%v: no wire enum (kindToWire)", k)
			continue
		}
		if other, dup := seen[a]; dup {
			t.Errorf("%v and %v share the wire enum %v", k, other, a)
		}
		seen[a] = k
		if got, err := kindFromWire(a); err != nil || got != k {
			t.Errorf("kindFromWire(%v): got %v, %v, want %v", a, got, err, k)
		}
	}
}
