package transport

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/algo"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// transferFromProto is the unary Transfer's reading of a request before
// wireCodec took it over: the protobuf runtime's message converted by
// keyStateFromWire and penaltyStateFromWire and validated, in this order and
// with these errors. It is the reference the codec is held to.
func transferFromProto(req *pb.TransferRequest, maxKeyLen, maxBatch int) (TransferBatch, error) {
	in := req.GetStates()
	if len(in) > maxBatch {
		return TransferBatch{}, batchTooLarge("states", len(in), maxBatch)
	}
	states := make([]KeyState, len(in))
	for i, m := range in {
		st, err := keyStateFromWire(m)
		if err == nil {
			err = validateKeyState(st, maxKeyLen)
		}
		if err != nil {
			return TransferBatch{}, status.Errorf(codes.InvalidArgument, "states[%d]: %v", i, err)
		}
		states[i] = st
	}
	var pens []PenaltyState
	if pin := req.GetPenalties(); len(pin) > 0 {
		if len(pin) > maxBatch {
			return TransferBatch{}, batchTooLarge("penalties", len(pin), maxBatch)
		}
		pens = make([]PenaltyState, len(pin))
		for i, m := range pin {
			pens[i] = penaltyStateFromWire(m)
			if err := validatePenaltyState(pens[i], maxKeyLen); err != nil {
				return TransferBatch{}, status.Errorf(codes.InvalidArgument, "penalties[%d]: %v", i, err)
			}
		}
	}
	if len(req.GetAfter()) > MaxAfter {
		return TransferBatch{}, batchTooLarge("after", len(req.GetAfter()), MaxAfter)
	}
	return TransferBatch{From: req.GetFrom(), RingDigest: req.GetRingDigest(), States: states, Done: req.GetDone(), Penalties: pens, Replica: req.GetReplica(), After: req.GetAfter(), Leaving: req.GetLeaving()}, nil
}

// transferToProto is the sender's message before wireCodec took it over.
func transferToProto(b TransferBatch) *pb.TransferRequest {
	req := &pb.TransferRequest{From: b.From, RingDigest: b.RingDigest, Done: b.Done, Replica: b.Replica, After: b.After, Leaving: b.Leaving}
	for _, s := range b.States {
		var m pb.KeyState
		keyStateToWire(s, &m)
		req.States = append(req.States, &m)
	}
	for _, p := range b.Penalties {
		req.Penalties = append(req.Penalties, penaltyStateToWire(p))
	}
	return req
}

// sameBatch compares two batches, an empty slice equal to nil.
func sameBatch(a, b TransferBatch) error {
	if a.From != b.From || a.RingDigest != b.RingDigest || a.Done != b.Done || a.Replica != b.Replica || a.Sender != b.Sender || a.Leaving != b.Leaving {
		return fmt.Errorf("header %+v, want %+v", [6]any{a.From, a.RingDigest, a.Done, a.Replica, a.Sender, a.Leaving}, [6]any{b.From, b.RingDigest, b.Done, b.Replica, b.Sender, b.Leaving})
	}
	if !slices.Equal(a.After, b.After) {
		return fmt.Errorf("after %q, want %q", a.After, b.After)
	}
	if len(a.States) != len(b.States) || len(a.Penalties) != len(b.Penalties) {
		return fmt.Errorf("%d states and %d penalties, want %d and %d", len(a.States), len(a.Penalties), len(b.States), len(b.Penalties))
	}
	for i := range a.States {
		x, y := a.States[i], b.States[i]
		if !bytes.Equal(x.State, y.State) {
			return fmt.Errorf("states[%d].State % x, want % x", i, x.State, y.State)
		}
		x.State, y.State = nil, nil
		if !reflect.DeepEqual(x, y) {
			return fmt.Errorf("states[%d] %+v, want %+v", i, x, y)
		}
	}
	for i := range a.Penalties {
		x, y := a.Penalties[i], b.Penalties[i]
		if x.Key != y.Key || x.BanUntil != y.BanUntil || x.Expire != y.Expire || !slices.Equal(x.Denials, y.Denials) {
			return fmt.Errorf("penalties[%d] %+v, want %+v", i, x, y)
		}
	}
	return nil
}

// sameError compares the codec path's outcome with the reference's.
func sameError(got, want error) error {
	if (got == nil) != (want == nil) || got != nil && status.Convert(got).String() != status.Convert(want).String() {
		return fmt.Errorf("error %v, want %v", got, want)
	}
	return nil
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, r.IntN(n+1))
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return b
}

// randTransferBatch returns a batch of up to n states and penalties, some of
// them invalid (as a peer's might be), with a valid UTF-8 From.
func randTransferBatch(r *rand.Rand, n int) TransferBatch {
	kinds := []algo.Kind{0, algo.SlidingWindowLog, algo.SlidingWindowCounter, algo.FixedWindow, algo.GCRA, algo.TokenBucket, algo.BucketedSlidingWindow, 42}
	froms := []string{"", "node-a", "nœud-β"}
	b := TransferBatch{From: froms[r.IntN(len(froms))], RingDigest: r.Uint64() >> uint(r.IntN(64)), Done: r.IntN(2) == 0, Replica: r.IntN(2) == 0}
	if b.RingDigest%3 == 0 { // from the digest: no draw of r, whose sequence the tests' outcomes depend on
		b.After = froms[int(b.RingDigest/3%3):]
	}
	b.Leaving = b.RingDigest%5 < 2 // likewise
	b.States = make([]KeyState, r.IntN(n+1))
	for i := range b.States {
		s := KeyState{
			Key:           string(randBytes(r, 20)),
			Limit:         algo.Limit{Kind: kinds[r.IntN(len(kinds))], Limit: randInt64(r), Period: time.Duration(randInt64(r)), Burst: randInt64(r)},
			State:         randBytes(r, 30),
			LastNow:       randInt64(r),
			CallerClock:   r.IntN(2) == 0,
			LogDelta:      r.IntN(3) == 0,
			LogAfter:      randInt64(r),
			LogAfterCount: randInt64(r),
		}
		if r.IntN(2) == 0 {
			s.KeyHash = r.Uint64()
		}
		if r.IntN(3) > 0 { // mostly valid, so that whole batches pass
			s.Limit = validCheck("", 0).Limit
			s.LogDelta = false
			if r.IntN(2) == 0 {
				s.Key = fmt.Sprint("key-", i)
			}
		}
		b.States[i] = s
	}
	if r.IntN(2) == 0 {
		b.Penalties = make([]PenaltyState, r.IntN(n/2+1))
		for i := range b.Penalties {
			p := PenaltyState{Key: string(randBytes(r, 12)), BanUntil: randInt64(r), Expire: randInt64(r)}
			for range r.IntN(5) {
				p.Denials = append(p.Denials, randInt64(r))
			}
			if r.IntN(3) > 0 && p.Key == "" {
				p.Key = fmt.Sprint("pkey-", i)
			}
			b.Penalties[i] = p
		}
	}
	return b
}

// pieces cuts msg into three buffers or fewer, as gRPC hands a message that
// came in several frames to the codec.
func pieces(msg []byte) mem.BufferSlice {
	var out mem.BufferSlice
	for n := max(1, len(msg)/3); len(msg) > 0; msg = msg[min(n, len(msg)):] {
		out = append(out, mem.SliceBuffer(msg[:min(n, len(msg))]))
	}
	return out
}

// decodeTransfer decodes msg as the server does (wireCodec.Unmarshal), with
// the given limits, into m (which may hold an earlier request) and returns
// the batch and the error the handler would see.
func decodeTransfer(m *xferRequest, msg []byte, maxKeyLen, maxBatch int) (TransferBatch, error, error) {
	m.maxKeyLen, m.maxBatch = maxKeyLen, maxBatch
	if err := newWireCodec().Unmarshal(pieces(msg), m); err != nil {
		return TransferBatch{}, nil, err
	}
	return m.batch, m.check(), nil
}

// TestTransferCodecMatchesProtobuf checks that the codec writes the bytes the
// protobuf runtime writes for the TransferRequest that keyStateToWire and
// penaltyStateToWire build, and reads protobuf's bytes into the batch (or the
// error) of the unary Transfer before it, also when decoding into the same
// request again and again as the server's pool does.
func TestTransferCodecMatchesProtobuf(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 5))
	det := proto.MarshalOptions{Deterministic: true}
	reused := &xferRequest{}
	outcomes := map[string]int{}
	for round := range 500 {
		b := randTransferBatch(r, 12)
		req := &xferRequest{batch: b}
		got := req.append(nil)
		want, err := det.Marshal(transferToProto(b))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) || len(got) != req.size() {
			t.Fatalf("round %d: request bytes differ from protobuf's (size %d, got %d, want %d bytes)\ngot  % x\nwant % x", round, req.size(), len(got), len(want), got, want)
		}
		var m pb.TransferRequest
		if err := proto.Unmarshal(want, &m); err != nil {
			t.Fatal(err)
		}
		maxKeyLen, maxBatch := 16, 10
		wantB, wantErr := transferFromProto(&m, maxKeyLen, maxBatch)
		for _, dec := range []*xferRequest{{}, reused} {
			gotB, gotErr, err := decodeTransfer(dec, want, maxKeyLen, maxBatch)
			if err != nil {
				t.Fatalf("round %d: decode: %v", round, err)
			}
			if err := sameError(gotErr, wantErr); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if wantErr == nil {
				if err := sameBatch(gotB, wantB); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
		}
		outcomes[status.Code(wantErr).String()]++
	}
	// Both outcomes must have been compared often.
	if outcomes["OK"] < 100 || outcomes["InvalidArgument"] < 100 {
		t.Fatalf("outcomes %v: too few of one kind", outcomes)
	}
}

// junk returns a field no TransferRequest, KeyState or PenaltyState of this
// version has, or a known field with a wire type other than its own, which
// the protobuf runtime skips as unknown (field 1 as a varint, 7 as bytes, 9
// as a varint...), or a group; now and then a known varint field of the
// message it lands in, which then holds the junk's value (the last wins).
func junk(r *rand.Rand) []byte {
	var b []byte
	switch r.IntN(7) {
	case 0:
		b = protowire.AppendTag(b, protowire.Number(1+r.IntN(14)), protowire.VarintType)
		b = protowire.AppendVarint(b, r.Uint64())
	case 1:
		b = protowire.AppendTag(b, protowire.Number(1+r.IntN(14)), protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, r.Uint32())
	case 2:
		b = protowire.AppendTag(b, protowire.Number(1+r.IntN(14)), protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, r.Uint64())
	case 3:
		// Not 1, 3, 5, 6 or 7: in one of the messages they hold a message,
		// packed denials, state bytes or a string.
		b = protowire.AppendTag(b, protowire.Number(8+r.IntN(7)), protowire.BytesType)
		b = protowire.AppendBytes(b, randBytes(r, 8))
	case 4:
		b = protowire.AppendTag(b, 100, protowire.StartGroupType)
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
		b = protowire.AppendTag(b, 100, protowire.EndGroupType)
	case 5:
		b = protowire.AppendTag(b, protowire.MaxValidNumber, protowire.VarintType)
		b = protowire.AppendVarint(b, 7)
	case 6:
		b = protowire.AppendTag(b, 1000, protowire.BytesType)
		b = protowire.AppendBytes(b, nil)
	}
	return b
}

// withJunk encodes b as the codec does, with junk fields between the fields
// of the request and of its states and penalties, and known fields repeated
// (the last one wins), and denials unpacked now and then.
func withJunk(r *rand.Rand, b TransferBatch) []byte {
	var out []byte
	sprinkle := func(msg []byte) []byte {
		for range r.IntN(3) {
			msg = append(msg, junk(r)...)
		}
		return msg
	}
	out = sprinkle(out)
	for i := range b.States {
		s := b.States[i]
		var inner []byte
		if r.IntN(4) == 0 { // an earlier value of some fields, overwritten below
			decoy := s
			decoy.Key, decoy.State, decoy.Limit.Burst = "decoy", []byte("decoy"), 99
			inner = appendKeyState(inner, &decoy)
		}
		inner = sprinkle(appendKeyState(sprinkle(inner), &s))
		if s.Key == "" && r.IntN(2) == 0 {
			inner = append(inner, 0x0a, 0x00) // an explicit empty key
		}
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, inner)
		out = sprinkle(out)
	}
	out = appendString(out, 2, b.From)
	out = appendU64(sprinkle(out), 3, b.RingDigest)
	out = appendBool(out, 4, b.Done)
	for i := range b.Penalties {
		p := b.Penalties[i]
		var inner []byte
		if r.IntN(2) == 0 {
			inner = appendString(inner, 1, p.Key)
			inner = appendI64(inner, 2, p.BanUntil)
			for _, d := range p.Denials { // unpacked
				inner = protowire.AppendTag(inner, 3, protowire.VarintType)
				inner = protowire.AppendVarint(inner, uint64(d))
			}
			inner = appendI64(inner, 4, p.Expire)
		} else {
			inner = appendPenaltyState(inner, &p)
		}
		out = protowire.AppendTag(out, 5, protowire.BytesType)
		out = protowire.AppendBytes(out, sprinkle(inner))
	}
	out = sprinkle(appendBool(out, 6, b.Replica))
	for _, name := range b.After {
		out = protowire.AppendTag(out, 7, protowire.BytesType)
		out = sprinkle(protowire.AppendString(out, name))
	}
	return sprinkle(appendBool(out, 8, b.Leaving))
}

// TestTransferDecodeSkipsUnknownFields reads requests with unknown fields,
// known fields of another wire type, groups and repeated fields as the
// protobuf runtime and the unary Transfer before the codec did.
func TestTransferDecodeSkipsUnknownFields(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 17))
	reused := &xferRequest{}
	for round := range 500 {
		msg := withJunk(r, randTransferBatch(r, 8))
		var m pb.TransferRequest
		if err := proto.Unmarshal(msg, &m); err != nil {
			t.Fatalf("round %d: protobuf refuses the test's message: %v", round, err)
		}
		wantB, wantErr := transferFromProto(&m, 16, 10)
		gotB, gotErr, err := decodeTransfer(reused, msg, 16, 10)
		if err != nil {
			t.Fatalf("round %d: decode: %v\n% x", round, err, msg)
		}
		if err := sameError(gotErr, wantErr); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if wantErr == nil {
			if err := sameBatch(gotB, wantB); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// TestTransferDecodeRejectsMalformed checks messages protobuf refuses are
// refused (gRPC answers codes.Internal for both, as before the codec).
func TestTransferDecodeRejectsMalformed(t *testing.T) {
	t.Parallel()
	good := (&xferRequest{batch: TransferBatch{From: "n", States: []KeyState{{Key: "k", Limit: validCheck("", 0).Limit, State: []byte{1, 2}}},
		Penalties: []PenaltyState{{Key: "p", Denials: []int64{1, 2}}}}}).append(nil)
	state := appendKeyState(nil, &KeyState{Key: "k", Limit: validCheck("", 0).Limit})
	msgOf := func(num protowire.Number, inner []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), inner)
	}
	for name, msg := range map[string][]byte{
		"truncated":              good[:len(good)-1],
		"truncated state":        msgOf(1, state[:len(state)-1]),
		"from not UTF-8":         msgOf(2, []byte{0xff, 0xfe}),
		"after not UTF-8":        msgOf(7, []byte{0xff, 0xfe}),
		"field 0":                {0x00, 0x01},
		"field above max":        protowire.AppendVarint(protowire.AppendTag(nil, protowire.MaxValidNumber+1, protowire.VarintType), 1),
		"field above max inside": msgOf(1, protowire.AppendVarint(protowire.AppendTag(nil, protowire.MaxValidNumber+1, protowire.VarintType), 1)),
		"end group":              protowire.AppendTag(nil, 7, protowire.EndGroupType),
		"open group":             protowire.AppendTag(nil, 7, protowire.StartGroupType),
		"wire type 6":            {0x0e},
		"packed denials cut":     msgOf(5, msgOf(3, []byte{0x80})),
		"varint overflow":        {0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
		"key hash cut":           msgOf(1, []byte{0x49, 1, 2, 3}),
	} {
		if err := proto.Unmarshal(msg, new(pb.TransferRequest)); err == nil {
			t.Fatalf("%s: protobuf accepts % x; the test is wrong", name, msg)
		}
		if err := (&xferRequest{maxKeyLen: 16, maxBatch: 10}).decode(msg); err == nil {
			t.Errorf("%s: decode accepts % x, protobuf does not", name, msg)
		}
	}
	for name, msg := range map[string][]byte{
		"packed need_full of 7 bytes": msgOf(1, make([]byte, 7)),
		"need_full cut":               {0x09, 1, 2},
	} {
		if err := proto.Unmarshal(msg, new(pb.TransferResponse)); err == nil {
			t.Fatalf("%s: protobuf accepts % x; the test is wrong", name, msg)
		}
		if err := new(xferResponse).decode(msg); err == nil {
			t.Errorf("%s: response decode accepts % x, protobuf does not", name, msg)
		}
	}
	// More names in after than MaxAfter: decoded, refused as invalid.
	many := &xferRequest{maxKeyLen: 16, maxBatch: 10}
	if err := many.decode((&xferRequest{batch: TransferBatch{From: "n", Done: true, After: make([]string, MaxAfter+1)}}).append(nil)); err != nil {
		t.Fatalf("decode of %d names in after: %v", MaxAfter+1, err)
	}
	if err := many.check(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("check of %d names in after: %v, want InvalidArgument", MaxAfter+1, err)
	}
	// The sender refuses a from protobuf would refuse to marshal.
	if _, err := newWireCodec().Marshal(&xferRequest{batch: TransferBatch{From: "\xff"}}); err == nil {
		t.Error("Marshal of a from that is not UTF-8: got nil error, want one")
	}
}

// TestTransferResponseCodec checks the answer's bytes against protobuf's and
// reads protobuf's, packed or not, with unknown fields.
func TestTransferResponseCodec(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(19, 23))
	det := proto.MarshalOptions{Deterministic: true}
	for round := range 100 {
		var hs []uint64
		for range r.IntN(5) {
			hs = append(hs, r.Uint64())
		}
		got := (&xferResponse{needFull: hs}).append(nil)
		want, err := det.Marshal(&pb.TransferResponse{NeedFull: hs})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) || len(got) != (&xferResponse{needFull: hs}).size() {
			t.Fatalf("round %d: got % x, want % x", round, got, want)
		}
		// Unpacked, with junk, after two hashes already collected.
		var msg []byte
		for _, h := range hs {
			msg = append(msg, junk(r)...)
			msg = protowire.AppendTag(msg, 1, protowire.Fixed64Type)
			msg = protowire.AppendFixed64(msg, h)
		}
		msg = append(msg, want...)
		var m pb.TransferResponse
		if err := proto.Unmarshal(msg, &m); err != nil {
			t.Fatal(err)
		}
		dec := xferResponse{needFull: []uint64{1, 2}}
		if err := dec.decode(msg); err != nil {
			t.Fatalf("round %d: decode: %v", round, err)
		}
		if w := append([]uint64{1, 2}, m.GetNeedFull()...); !slices.Equal(dec.needFull, w) {
			t.Fatalf("round %d: decoded %v, want %v", round, dec.needFull, w)
		}
	}
}

// TestTransferDecodeAllocations checks what decoding a replication batch
// that came in three buffers costs once the request is reused: nothing for
// states sent by key hash (as node sends them), one allocation for every key
// of the batch together.
func TestTransferDecodeAllocations(t *testing.T) {
	for _, tc := range []struct {
		name     string
		withKeys bool
		allocs   float64
	}{
		{"hashes", false, 0},
		{"keys", true, 1},
	} {
		b := TransferBatch{From: "node-a", Replica: true}
		for i := range 100 {
			s := KeyState{KeyHash: uint64(i + 1), Limit: validCheck("", 0).Limit, State: []byte{1, 4, byte(i), 3}, LastNow: 1e18}
			if tc.withKeys {
				s.Key = fmt.Sprint("key-", i)
			}
			b.States = append(b.States, s)
		}
		msg := pieces((&xferRequest{batch: b}).append(nil))
		m := &xferRequest{maxKeyLen: DefaultMaxKeyLen, maxBatch: DefaultMaxBatch}
		c := newWireCodec()
		if err := c.Unmarshal(msg, m); err != nil || m.check() != nil {
			t.Fatal(err, m.check())
		}
		if err := sameBatch(m.batch, b); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := testing.AllocsPerRun(100, func() {
			if err := c.Unmarshal(msg, m); err != nil {
				t.Fatal(err)
			}
		})
		if got != tc.allocs {
			t.Errorf("%s: %v allocations per decode, want %v", tc.name, got, tc.allocs)
		}
	}
}

// FuzzTransferDecode decodes arbitrary bytes as a Transfer request and as its
// answer with the codec, as the receiving peer and the sender do: no panic;
// it accepts exactly what proto.Unmarshal accepts; what it accepts gives the
// batch (or the error) the protobuf runtime and keyStateFromWire gave the
// unary Transfer before it, also when decoded into a request that held an
// earlier one (as the server's pool reuses them); every state it passes on
// has a valid key (or key hash) and limit, and a state algo can be asked to
// read.
func FuzzTransferDecode(f *testing.F) {
	var st algo.State
	l := algo.Limit{Kind: algo.GCRA, Burst: 1, Limit: 10, Period: time.Second}
	_, _ = st.Take(1e18, 1, l)
	bin, _ := st.MarshalBinary()
	seed := (&xferRequest{batch: TransferBatch{From: "node-1", Done: true, Replica: true,
		States:    []KeyState{{Key: "k", Limit: l, State: bin, LastNow: 1e18}, {KeyHash: 7, Limit: l, State: bin, LogDelta: true}},
		Penalties: []PenaltyState{{Key: "p", BanUntil: 5, Denials: []int64{1, 2}, Expire: 9}}}}).append(nil)
	f.Add(seed)
	f.Add(withJunk(rand.New(rand.NewPCG(1, 2)), randTransferBatch(rand.New(rand.NewPCG(3, 4)), 3)))
	f.Add([]byte{0x0a, 0x00})
	f.Add((&xferResponse{needFull: []uint64{1, 2}}).append(nil))
	const maxKeyLen, maxBatch = 16, 4
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.TransferRequest
		protoErr := proto.Unmarshal(data, &m)
		got := &xferRequest{}
		gotB, gotErr, err := decodeTransfer(got, data, maxKeyLen, maxBatch)
		if (err == nil) != (protoErr == nil) {
			t.Fatalf("decode: error %v, protobuf: %v", err, protoErr)
		}
		reused := &xferRequest{}
		if _, _, err := decodeTransfer(reused, seed, maxKeyLen, maxBatch); err != nil {
			t.Fatal(err)
		}
		reB, reErr, err2 := decodeTransfer(reused, data, maxKeyLen, maxBatch)
		if (err2 == nil) != (err == nil) {
			t.Fatalf("decode into a reused request: error %v, want %v", err2, err)
		}
		if err == nil {
			wantB, wantErr := transferFromProto(&m, maxKeyLen, maxBatch)
			for _, c := range []struct {
				b   TransferBatch
				err error
			}{{gotB, gotErr}, {reB, reErr}} {
				if err := sameError(c.err, wantErr); err != nil {
					t.Fatal(err)
				}
				if wantErr == nil {
					if err := sameBatch(c.b, wantB); err != nil {
						t.Fatal(err)
					}
				}
			}
			if gotErr == nil {
				for _, ks := range gotB.States {
					if err := validateKeyState(ks, maxKeyLen); err != nil || ks.Limit.Validate() != nil {
						t.Fatalf("passed on a state with an invalid key or limit: %v", err)
					}
					var s algo.State
					_ = s.UnmarshalBinary(ks.State)
				}
			}
		}

		var rm pb.TransferResponse
		protoErr = proto.Unmarshal(data, &rm)
		var resp xferResponse
		if err := resp.decode(data); (err == nil) != (protoErr == nil) {
			t.Fatalf("response decode: error %v, protobuf: %v", err, protoErr)
		} else if err == nil && !slices.Equal(resp.needFull, rm.GetNeedFull()) {
			t.Fatalf("response decoded %v, protobuf %v", resp.needFull, rm.GetNeedFull())
		}
	})
}
