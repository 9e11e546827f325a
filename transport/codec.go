package transport

import (
	"errors"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// wireCodec is the gRPC codec of ForwardStream, Transfer and ReplicateStream
// on both ends. ForwardStream's messages travel as *fwdRequest and
// *fwdResponse, which it encodes straight from []Check and []Result and
// decodes straight into them with protowire: the bytes are those of
// ringlimitv1.ForwardRequest and ForwardResponse, so the wire protocol is
// unchanged, but the per-check message structs, key copies and reflection of
// the protobuf runtime are skipped. Transfer's and ReplicateStream's travel as
// *xferRequest and *xferResponse likewise (see transfercodec.go). Every other
// message goes to the protobuf codec. Its name is "proto": peers see plain
// application/grpc+proto.
type wireCodec struct {
	proto encoding.CodecV2
	bufs  *sync.Pool // of *msgBuf, see encodeWith
}

func newWireCodec() wireCodec {
	return wireCodec{proto: encoding.GetCodecV2(grpcproto.Name), bufs: new(sync.Pool)}
}

// Name implements encoding.CodecV2.
func (wireCodec) Name() string { return grpcproto.Name }

// Marshal implements encoding.CodecV2.
func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *fwdRequest:
		return c.encodeWith(m.size(), m.append), nil
	case *fwdResponse:
		return c.encodeWith(m.size(), m.append), nil
	case *xferRequest:
		if !utf8.ValidString(m.batch.From) {
			return nil, errFromNotUTF8 // as protobuf refuses a proto3 string
		}
		for _, name := range m.batch.After {
			if !utf8.ValidString(name) {
				return nil, errAfterNotUTF8
			}
		}
		return c.encodeWith(m.size(), m.append), nil
	case *xferResponse:
		return c.encodeWith(m.size(), m.append), nil
	}
	return c.proto.Marshal(v)
}

// Unmarshal implements encoding.CodecV2. Decoded messages copy what they keep:
// nothing refers to data afterwards.
func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *fwdRequest:
		return decodeWith(data, m.decode)
	case *fwdResponse:
		return decodeWith(data, m.decode)
	case *xferRequest:
		return m.unmarshal(data)
	case *xferResponse:
		return decodeWith(data, m.decode)
	}
	return c.proto.Unmarshal(data, v)
}

// smallMsgBuffer is the smallest capacity of a message's bytes: above gRPC's
// pooling threshold (1 KiB), below which mem.NewBuffer would not pool them
// (nor call msgBuf.Put), and one of gRPC's default pool's sizes.
const smallMsgBuffer = 4 << 10

// maxKeptMsgBytes is the largest message encodeWith encodes into a msgBuf;
// larger ones (Transfer chunks) take a buffer of gRPC's pool, so that a
// recycled msgBuf never holds more than this.
const maxKeptMsgBytes = 64 << 10

// msgBuf holds the bytes of one encoded message and the one-element
// BufferSlice gRPC gets them in, and is the BufferPool of that Buffer: gRPC
// calls Put once the last reference to the message is freed (it is written,
// and no retry can resend it), and Put returns the msgBuf, bytes and slice,
// to its codec's pool for the next message. A BufferSlice made per message
// would be one allocation: its backing array escapes into gRPC's write queue.
type msgBuf struct {
	data  []byte
	slice [1]mem.Buffer
	home  *sync.Pool
}

// Get implements mem.BufferPool; gRPC only ever Puts a Buffer's bytes back to
// its pool, so this is never called in practice and just allocates.
func (m *msgBuf) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

// Put implements mem.BufferPool: the message is freed; m goes back to its pool.
func (m *msgBuf) Put(*[]byte) {
	m.slice[0] = nil
	m.home.Put(m)
}

// encodeWith encodes a message of size bytes with fill. A message up to
// maxKeptMsgBytes goes into a recycled msgBuf, with a capacity of at least
// smallMsgBuffer: a stream sends one or two such messages per batch, and the
// message then costs no allocation. A larger one takes a buffer of gRPC's
// pool (one allocation, for its BufferSlice). An empty message (Transfer's
// usual answer) takes no buffer: gRPC sends a nil one.
func (c wireCodec) encodeWith(size int, fill func([]byte) []byte) mem.BufferSlice {
	if size == 0 {
		return nil
	}
	if size > maxKeptMsgBytes {
		pool := mem.DefaultBufferPool()
		buf := pool.Get(size)
		*buf = fill((*buf)[:0])
		return mem.BufferSlice{mem.NewBuffer(buf, pool)}
	}
	m, _ := c.bufs.Get().(*msgBuf)
	if m == nil {
		m = &msgBuf{home: c.bufs}
	}
	if cap(m.data) < size {
		m.data = make([]byte, 0, max(size, smallMsgBuffer))
	}
	m.data = fill(m.data[:0])
	m.slice[0] = mem.NewBuffer(&m.data, m)
	return m.slice[:]
}

func decodeWith(data mem.BufferSlice, decode func([]byte) error) error {
	if len(data) == 1 {
		return decode(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return decode(buf.ReadOnlyData())
}

var errMalformed = errors.New("transport: malformed ForwardStream message")

// countField counts the occurrences of field num in message b and checks
// that b is well formed at the top level.
func countField(b []byte, num protowire.Number) (int, error) {
	n := 0
	for len(b) > 0 {
		f, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, errMalformed
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(f, typ, b)
		if l < 0 {
			return 0, errMalformed
		}
		b = b[l:]
		if f == num {
			n++
		}
	}
	return n, nil
}

// All field numbers are below 16: every tag is one byte.

func sizeI64(v int64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(uint64(v))
}

func sizeU64(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func sizeBytes(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(n)
}

func appendI64(b []byte, num protowire.Number, v int64) []byte {
	return appendU64(b, num, uint64(v))
}

func appendU64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
