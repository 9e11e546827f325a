package transport

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// TestPeerServiceDescServesTransfer checks that the registered Peer service
// sends Transfer to transferHandler and every other method to the generated
// handlers.
func TestPeerServiceDescServesTransfer(t *testing.T) {
	t.Parallel()
	d := peerServiceDesc()
	if len(d.Methods) != len(pb.Peer_ServiceDesc.Methods) || d.ServiceName != pb.Peer_ServiceDesc.ServiceName || len(d.Streams) != len(pb.Peer_ServiceDesc.Streams) {
		t.Fatalf("got %+v, want the generated description", d)
	}
	found := false
	for i, md := range d.Methods {
		got, gen := reflect.ValueOf(md.Handler).Pointer(), reflect.ValueOf(pb.Peer_ServiceDesc.Methods[i].Handler).Pointer()
		if md.MethodName == "Transfer" {
			found = true
			if got != reflect.ValueOf(transferHandler).Pointer() {
				t.Error("Transfer is not served by transferHandler")
			}
		} else if got != gen {
			t.Errorf("%s: handler changed", md.MethodName)
		}
	}
	if !found {
		t.Fatal("no Transfer method")
	}
}

// rawCodec sends a rawMsg's bytes as they are: malformed requests, as a
// broken or hostile peer would send them.
type rawCodec struct{}

type rawMsg []byte

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*rawMsg))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*rawMsg) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// needFullPeer answers every replication batch with the hashes of its states
// whose key starts with "whole", and records what it was given.
type needFullPeer struct {
	fakePeer
	mu      sync.Mutex
	senders []string
}

func (p *needFullPeer) Replicate(ctx context.Context, b TransferBatch) ([]uint64, error) {
	p.mu.Lock()
	p.senders = append(p.senders, b.Sender)
	p.mu.Unlock()
	var out []uint64
	for _, s := range b.States {
		if strings.HasPrefix(s.Key, "whole") {
			out = append(out, s.KeyHash)
		}
	}
	return out, nil
}

// TestTransferOverTheWire runs Transfer through a server: need_full collected
// across chunks, the error codes of malformed and invalid requests as before
// the codec (Internal for what protobuf cannot read, InvalidArgument naming
// the item otherwise), and the protobuf client's view of the same RPC.
func TestTransferOverTheWire(t *testing.T) {
	t.Parallel()
	h := &needFullPeer{}
	addr, _ := startServer(t, ServerConfig{MaxBatch: 3, MaxKeyLen: 8}, h, nil)
	p := newPool(t, ClientConfig{MaxBatch: 3})
	lim := validCheck("", 0).Limit
	var states []KeyState
	var want []uint64
	for i := range 7 {
		s := KeyState{Key: fmt.Sprint("part", i), KeyHash: uint64(100 + i), Limit: lim, State: []byte{byte(i)}}
		if i%3 != 1 {
			s.Key = fmt.Sprint("whole", i)
			want = append(want, s.KeyHash)
		}
		states = append(states, s)
	}
	got, err := p.Replicate(context.Background(), addr, TransferBatch{From: "node-a", States: states})
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Replicate: got %v, %v, want %v", got, err, want)
	}
	// The protobuf client reads the same answer.
	conn := rawConn(t, addr)
	var m pb.KeyState
	keyStateToWire(states[0], &m)
	resp, err := pb.NewPeerClient(conn).Transfer(context.Background(), &pb.TransferRequest{States: []*pb.KeyState{&m}, Replica: true})
	if err != nil || !slices.Equal(resp.GetNeedFull(), want[:1]) {
		t.Fatalf("protobuf client: got %v, %v, want %v", resp.GetNeedFull(), err, want[:1])
	}
	keyStateToWire(states[1], &m) // answered with an empty message
	resp, err = pb.NewPeerClient(conn).Transfer(context.Background(), &pb.TransferRequest{States: []*pb.KeyState{&m}, Replica: true})
	if err != nil || len(resp.GetNeedFull()) != 0 {
		t.Fatalf("protobuf client, nothing needed whole: got %v, %v, want none", resp.GetNeedFull(), err)
	}

	valid := appendKeyState(nil, &KeyState{Key: "k", Limit: lim})
	msgOf := func(num protowire.Number, inner []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), inner)
	}
	repeat := func(msg []byte, n int) []byte { return bytes.Repeat(msg, n) }
	for _, tc := range []struct {
		name string
		msg  []byte
		code codes.Code
		text string
	}{
		{"malformed", msgOf(1, valid[:len(valid)-1]), codes.Internal, "unmarshal"},
		{"from not UTF-8", msgOf(2, []byte{0xff}), codes.Internal, "unmarshal"},
		{"too many states", repeat(msgOf(1, valid), 4), codes.InvalidArgument, "states: batch of 4"},
		{"too many states, one malformed", append(repeat(msgOf(1, valid), 4), msgOf(1, []byte{0x08})...), codes.Internal, "unmarshal"},
		{"invalid state", append(msgOf(1, valid), msgOf(1, appendKeyState(nil, &KeyState{Key: "too-long-key", Limit: lim}))...), codes.InvalidArgument, "states[1]"},
		{"too many penalties", repeat(msgOf(5, msgOf(1, []byte("p"))), 4), codes.InvalidArgument, "penalties: batch of 4"},
		{"invalid penalty", msgOf(5, nil), codes.InvalidArgument, "penalties[0]: transport: invalid check: field key value 0 bytes"},
		{"invalid state before invalid penalty", append(msgOf(5, nil), msgOf(1, nil)...), codes.InvalidArgument, "states[0]: transport: invalid check: field algorithm value ALGORITHM_UNSPECIFIED"},
	} {
		in, out := rawMsg(tc.msg), rawMsg(nil)
		err := conn.Invoke(context.Background(), pb.Peer_Transfer_FullMethodName, &in, &out, grpc.ForceCodecV2(rawCodec{}))
		if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.text) {
			t.Errorf("%s: got %v, want %v naming %q", tc.name, err, tc.code, tc.text)
		}
	}
	if n := h.transfers.Load(); n != 0 {
		t.Fatalf("Transfer handler called %d times for replication batches and refused requests, want 0", n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.senders) != 5 || slices.ContainsFunc(h.senders, func(s string) bool { return s != "" }) {
		t.Fatalf("Replicate saw senders %q, want 5 batches over plaintext (\"\")", h.senders)
	}
}
