package transport

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/algo"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// randInt64 returns 0, a small value, a large or a negative one.
func randInt64(r *rand.Rand) int64 {
	switch r.IntN(5) {
	case 0:
		return 0
	case 1:
		return r.Int64N(100)
	case 2:
		return -r.Int64N(math.MaxInt64)
	case 3:
		return math.MaxInt64
	}
	return r.Int64()
}

func randChecks(r *rand.Rand, n int) []Check {
	kinds := []algo.Kind{0, algo.SlidingWindowLog, algo.SlidingWindowCounter, algo.FixedWindow, algo.GCRA, algo.TokenBucket, algo.BucketedSlidingWindow}
	checks := make([]Check, n)
	for i := range checks {
		key := make([]byte, r.IntN(40))
		for j := range key {
			key[j] = byte(r.IntN(256))
		}
		checks[i] = Check{
			Key:       string(key),
			Limit:     algo.Limit{Kind: kinds[r.IntN(len(kinds))], Limit: randInt64(r), Period: time.Duration(randInt64(r)), Burst: randInt64(r)},
			Hits:      randInt64(r),
			CreatedAt: randInt64(r),
		}
		if i%2 == 0 {
			checks[i].Penalty = Penalty{Denials: randInt64(r), Within: time.Duration(randInt64(r)), Ban: time.Duration(randInt64(r))}
		}
		if i%3 == 0 {
			checks[i] = validCheck(fmt.Sprint("valid-", i), int64(i))
		}
		checks[i].AsBackup = r.IntN(2) == 0 // peer-only field 11
		if r.IntN(3) == 0 {
			checks[i].MaxWait, checks[i].CancelAt = time.Duration(randInt64(r)), randInt64(r) // fields 12, 13
		}
		if r.IntN(3) == 0 {
			checks[i].LeaseHits = randInt64(r)                                  // field 14
			checks[i].LeaseID, checks[i].LeaseLeft = randInt64(r), randInt64(r) // fields 15, 16
		}
	}
	return checks
}

func randResults(r *rand.Rand, n int) []Result {
	owners := []string{"", "node-a", "node-b"}
	out := make([]Result, n)
	for i := range out {
		out[i] = Result{
			Decision: algo.Decision{Allowed: r.IntN(2) == 0, Limit: randInt64(r), Remaining: randInt64(r),
				RetryAfter: time.Duration(randInt64(r)), ResetAfter: time.Duration(randInt64(r))},
			Route:  Route(r.IntN(int(RouteLease) + 1)),
			Code:   Code(r.IntN(6)), // every Code, CodeResourceExhausted's retry_after_ns too
			Owner:  owners[r.IntN(len(owners))],
			Banned: r.IntN(2) == 0,
		}
		if r.IntN(3) == 0 {
			out[i].Delay, out[i].At = time.Duration(randInt64(r)), randInt64(r) // Decision fields 9, 10
		}
		if r.IntN(3) == 0 {
			out[i].LeaseHits, out[i].LeaseFor = randInt64(r), time.Duration(randInt64(r)) // Decision fields 11, 12
			out[i].LeaseID, out[i].LeaseRenewed = randInt64(r), r.IntN(2) == 0            // Decision fields 13, 14
		}
		if out[i].Code != CodeOK {
			out[i].Message = fmt.Sprint("message ", i)
		}
	}
	return out
}

// TestWireCodecMatchesProtobuf checks that the stream codec writes the bytes
// the protobuf runtime writes for the same ForwardRequest and ForwardResponse,
// and reads protobuf's bytes as decodeChecks and resultFromWire do, also when
// decoding into the same message again and again as the stream does.
func TestWireCodecMatchesProtobuf(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 11))
	det := proto.MarshalOptions{Deterministic: true}
	reusedReq, reusedResp := &fwdRequest{maxKeyLen: 32}, &fwdResponse{}
	// Keys of checks with a Penalty (which the handler may keep) must never
	// change; the others are valid until the next decode into the request.
	var earlierKeys, earlierCopies []string
	for round := range 200 {
		n := r.IntN(12)
		checks := randChecks(r, n)
		id, timeout := r.Uint64()>>uint(r.IntN(64)), randInt64(r)

		req := &fwdRequest{id: id, timeout: timeout, checks: checks}
		got := req.append(nil)
		want, err := det.Marshal(&pb.ForwardRequest{Checks: checksToWire(checks), BatchId: id, TimeoutNs: timeout})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) || len(got) != req.size() {
			t.Fatalf("round %d: request bytes differ from protobuf's (size %d, got %d, want %d bytes)", round, req.size(), len(got), len(want))
		}
		dec := &fwdRequest{maxKeyLen: 32}
		if err := dec.decode(want); err != nil {
			t.Fatalf("round %d: decode: %v", round, err)
		}
		var m pb.ForwardRequest
		if err := proto.Unmarshal(want, &m); err != nil {
			t.Fatal(err)
		}
		wantChecks, wantInvalid := decodeChecks(m.GetChecks(), 32)
		if dec.id != id || dec.timeout != timeout || dec.n != n ||
			fmt.Sprint(dec.checks) != fmt.Sprint(wantChecks) || invalidString(dec.invalid) != invalidString(wantInvalid) {
			t.Fatalf("round %d: decoded %+v, want id %d timeout %d n %d checks %v invalid %v", round, dec, id, timeout, n, wantChecks, wantInvalid)
		}
		if err := reusedReq.decode(want); err != nil {
			t.Fatalf("round %d: decode again: %v", round, err)
		}
		if reusedReq.id != id || reusedReq.timeout != timeout || reusedReq.n != n ||
			fmt.Sprint(reusedReq.checks) != fmt.Sprint(wantChecks) || invalidString(reusedReq.invalid) != invalidString(wantInvalid) {
			t.Fatalf("round %d: decoded into a reused request %+v, want checks %v invalid %v", round, reusedReq, wantChecks, wantInvalid)
		}
		for i := range earlierKeys {
			if earlierKeys[i] != earlierCopies[i] {
				t.Fatalf("round %d: a key decoded earlier changed to %q, want %q", round, earlierKeys[i], earlierCopies[i])
			}
		}
		for _, c := range reusedReq.checks {
			if c.Penalty.IsZero() {
				continue
			}
			earlierKeys = append(earlierKeys, c.Key)
			earlierCopies = append(earlierCopies, string([]byte(c.Key)))
		}

		results := randResults(r, n)
		resp := &fwdResponse{id: id, results: results}
		if r.IntN(4) == 0 {
			resp = &fwdResponse{id: id, code: pb.Code_CODE_INVALID_ARGUMENT, message: "bad batch"}
		}
		got = resp.append(nil)
		wm := &pb.ForwardResponse{Results: resultsToWire(resp.results), BatchId: id, Code: resp.code, Message: resp.message}
		want, err = det.Marshal(wm)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) || len(got) != resp.size() {
			t.Fatalf("round %d: response bytes differ from protobuf's", round)
		}
		rd := &fwdResponse{}
		if err := rd.decode(want); err != nil {
			t.Fatalf("round %d: decode response: %v", round, err)
		}
		wantResults := make([]Result, len(wm.GetResults()))
		for i, m := range wm.GetResults() {
			resultFromWire(m, &wantResults[i])
		}
		if rd.id != id || rd.code != resp.code || rd.message != resp.message || fmt.Sprint(rd.results) != fmt.Sprint(wantResults) {
			t.Fatalf("round %d: decoded %+v, want %+v", round, rd, wantResults)
		}
		if err := reusedResp.decode(want); err != nil {
			t.Fatalf("round %d: decode response again: %v", round, err)
		}
		if reusedResp.id != id || reusedResp.code != resp.code || reusedResp.message != resp.message || fmt.Sprint(reusedResp.results) != fmt.Sprint(wantResults) {
			t.Fatalf("round %d: decoded into a reused response %+v, want %+v", round, reusedResp, wantResults)
		}
	}
}

func TestWireCodecRejectsMalformedMessages(t *testing.T) {
	t.Parallel()
	full := (&fwdRequest{id: 3, checks: []Check{validCheck("truncated", 1)}}).append(nil)
	for _, b := range [][]byte{full[:len(full)-3], {0x0a, 0x05, 0x01}, {0xff}} {
		if err := (&fwdRequest{}).decode(b); err == nil {
			t.Errorf("request % x: got nil error, want one", b)
		}
		if err := (&fwdResponse{}).decode(b); err == nil {
			t.Errorf("response % x: got nil error, want one", b)
		}
	}
	// Unknown fields are skipped, as protobuf does.
	extra := append(append([]byte{}, full...), 0x48, 0x01) // field 9, varint 1
	dec := &fwdRequest{}
	if err := dec.decode(extra); err != nil || dec.id != 3 || len(dec.checks) != 1 {
		t.Fatalf("with an unknown field: got %+v, %v", dec, err)
	}
}

func invalidString(items []invalidItem) string {
	var b bytes.Buffer
	for _, it := range items {
		fmt.Fprintf(&b, "%d: %v; ", it.index, it.err)
	}
	return b.String()
}

// TestDecodeRequestAllocations checks that the keys of a decoded request share
// one allocation, except a key that is not the first field of its check and
// the key of a check with a Penalty (the owner keeps it with the ban state).
func TestDecodeRequestAllocations(t *testing.T) {
	plain := []Check{validCheck("alpha", 1), validCheck("beta", 2), validCheck("gamma", 3), validCheck("delta", 4)}
	banned := validCheck("banned", 1)
	banned.Penalty = Penalty{Denials: 3, Within: time.Second, Ban: time.Minute}
	// A check whose key comes after its other fields, as protobuf may order them.
	late := appendCheck(nil, &plain[0])
	late = append(late[len("alpha")+2:], late[:len("alpha")+2]...)
	lateReq := protowire.AppendTag(nil, 1, protowire.BytesType)
	lateReq = protowire.AppendBytes(lateReq, late)
	for _, tc := range []struct {
		name   string
		msg    []byte
		want   []Check
		allocs float64
	}{
		// Decoded again into the same request, whose key bytes are reused:
		// no allocation but a Penalty key's copy and a late key's string.
		{"plain", (&fwdRequest{id: 1, checks: plain}).append(nil), plain, 0},
		{"penalty", (&fwdRequest{id: 1, checks: append([]Check{banned}, plain...)}).append(nil), append([]Check{banned}, plain...), 1},
		{"key last", append((&fwdRequest{id: 1, checks: plain}).append(nil), lateReq...), append(append([]Check{}, plain...), plain[0]), 1},
	} {
		m := &fwdRequest{maxKeyLen: 32}
		if err := m.decode(tc.msg); err != nil {
			t.Fatalf("%s: decode: %v", tc.name, err)
		}
		if fmt.Sprint(m.checks) != fmt.Sprint(tc.want) || len(m.invalid) != 0 {
			t.Fatalf("%s: decoded %v (invalid %v), want %v", tc.name, m.checks, invalidString(m.invalid), tc.want)
		}
		got := testing.AllocsPerRun(100, func() {
			if err := m.decode(tc.msg); err != nil {
				t.Fatal(err)
			}
		})
		if got != tc.allocs {
			t.Errorf("%s: %v allocations per decode, want %v", tc.name, got, tc.allocs)
		}
	}
}

// marshalAndFree encodes m with c, checks its bytes against m.append, and
// frees them as gRPC does once the message is written.
func marshalAndFree(t *testing.T, c wireCodec, m *fwdRequest) {
	t.Helper()
	data, err := c.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data.Materialize(), m.append(nil)) {
		t.Fatalf("message %d: bytes differ from its encoding", m.id)
	}
	data.Free()
}

// A stream message is encoded into a recycled msgBuf: gRPC frees it once it
// is written, which returns it for the next message, bytes and BufferSlice,
// so that encoding costs no allocation; a message still held is never
// written over.
func TestEncodeRecyclesMessageBuffers(t *testing.T) {
	c := newWireCodec()
	req := &fwdRequest{id: 7, timeout: 100, checks: []Check{validCheck("alpha", 1), validCheck("beta", 2)}}
	want := req.append(nil)
	held, err := c.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// While held is not freed, other messages go elsewhere.
	other := &fwdRequest{id: 8, checks: []Check{validCheck("gamma", 3)}}
	for range 10 {
		marshalAndFree(t, c, other)
	}
	if !bytes.Equal(held.Materialize(), want) {
		t.Fatalf("a message not yet freed was written over")
	}
	held.Free()
	// A large message takes gRPC's pool, and is still right.
	big := &fwdRequest{id: 9}
	for i := range 2000 {
		big.checks = append(big.checks, validCheck(fmt.Sprintf("key-%05d-of-a-large-message", i), 1))
	}
	if big.size() <= maxKeptMsgBytes {
		t.Fatalf("large message of %d bytes is not above maxKeptMsgBytes", big.size())
	}
	marshalAndFree(t, c, big)
	if raceEnabled {
		t.Skip("allocation count not checked under -race (the race detector drops sync.Pool Puts); .ci/run runs this test again without -race")
	}
	got := testing.AllocsPerRun(100, func() {
		m, err := c.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		m.Free()
	})
	if got != 0 {
		t.Errorf("%v allocations per encoded message, want 0", got)
	}
}
