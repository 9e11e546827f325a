package transport

import (
	"errors"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ringlimit/ringlimit/algo"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// The Transfer RPC's messages travel through wireCodec as *xferRequest and
// *xferResponse: the bytes of ringlimitv1.TransferRequest and
// TransferResponse, written from and read into a TransferBatch without one
// *pb.KeyState per state, the protobuf runtime's reflection or a []byte per
// state. The decoder accepts exactly the messages proto.Unmarshal accepts
// (unknown fields and known fields of an unexpected wire type are skipped, a
// from that is not UTF-8 is malformed, as proto3 has it) and gives the
// TransferBatch that keyStateFromWire and penaltyStateFromWire give;
// TestTransferCodecMatchesProtobuf and FuzzTransferDecode hold it to that.

var (
	errMalformedTransfer = errors.New("transport: malformed Transfer message")
	errFromNotUTF8       = errors.New("transport: TransferRequest.from is not valid UTF-8")
	errAfterNotUTF8      = errors.New("transport: a name in TransferRequest.after is not valid UTF-8")
)

// xferRequest is one TransferRequest: one chunk of a TransferBatch.
//
// The sender fills batch (From, RingDigest, States, Done, Penalties, Replica,
// After, Leaving;
// Sender is not sent) and the codec encodes it.
//
// The receiver sets maxKeyLen and maxBatch, then the codec decodes into it:
// batch gets the header fields, and, as the server's Transfer checks them in
// this order, nStates and nPens count the items of the message; when nStates
// is at most maxBatch the states are decoded and validated (keyStateFromWire,
// validateKeyState) up to the first invalid one, recorded in badState; the
// penalties likewise (validatePenaltyState) into badPen. The codec copies
// the message into wire and decodes the states into the backing array of
// batch.States, their State bytes aliasing wire: both are reused by the next
// decode. The states' keys share one allocation of their own per message
// (see keyString), never reused. Penalties, their keys and denials are
// allocated afresh: the owner keeps them. A From equal to the previous
// decode's is not allocated again (lastFrom).
type xferRequest struct {
	batch TransferBatch

	maxKeyLen, maxBatch int
	nStates, nPens      int
	badState, badPen    invalidItem // err nil: none
	wire                []byte      // the message received; reused
	lastFrom            string      // the From of an earlier decode, kept across reuse
}

// unmarshal copies data into m.wire and decodes it. gRPC frees data when the
// codec returns, and the message of a large batch comes in several buffers:
// one copy into a buffer of m's own serves both, where
// mem.BufferSlice.MaterializeToBuffer would take (and zero) a pooled buffer of
// up to 1 MiB for it, and the state bytes would still need a copy.
func (m *xferRequest) unmarshal(data mem.BufferSlice) error {
	n := data.Len()
	if cap(m.wire) < n {
		m.wire = make([]byte, n)
	}
	m.wire = m.wire[:n]
	data.CopyTo(m.wire)
	return m.decode(m.wire)
}

// size returns the encoded size of m.
func (m *xferRequest) size() int {
	b := &m.batch
	n := sizeBytes(len(b.From)) + sizeU64(b.RingDigest) + sizeBool(b.Done) + sizeBool(b.Replica) + sizeBool(b.Leaving)
	for i := range b.States {
		n += 1 + protowire.SizeBytes(keyStateSize(&b.States[i]))
	}
	for i := range b.Penalties {
		n += 1 + protowire.SizeBytes(penaltyStateSize(&b.Penalties[i]))
	}
	for _, name := range b.After {
		n += 1 + protowire.SizeBytes(len(name))
	}
	return n
}

// append appends m's encoding to buf in field order, as the protobuf runtime
// writes a TransferRequest.
func (m *xferRequest) append(buf []byte) []byte {
	b := &m.batch
	for i := range b.States {
		s := &b.States[i]
		buf = protowire.AppendTag(buf, 1, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(keyStateSize(s)))
		buf = appendKeyState(buf, s)
	}
	buf = appendString(buf, 2, b.From)
	buf = appendU64(buf, 3, b.RingDigest)
	buf = appendBool(buf, 4, b.Done)
	for i := range b.Penalties {
		p := &b.Penalties[i]
		buf = protowire.AppendTag(buf, 5, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(penaltyStateSize(p)))
		buf = appendPenaltyState(buf, p)
	}
	buf = appendBool(buf, 6, b.Replica)
	for _, name := range b.After {
		buf = protowire.AppendTag(buf, 7, protowire.BytesType)
		buf = protowire.AppendString(buf, name)
	}
	return appendBool(buf, 8, b.Leaving)
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return appendU64(b, num, 1)
}

// keyStateSize and appendKeyState encode a KeyState as keyStateToWire and
// the protobuf runtime do.
func keyStateSize(s *KeyState) int {
	n := sizeBytes(len(s.Key)) + sizeI64(int64(kindToWire(s.Limit.Kind))) + sizeI64(s.Limit.Limit) +
		sizeI64(int64(s.Limit.Period)) + sizeI64(s.Limit.Burst) + sizeBytes(len(s.State)) + sizeI64(s.LastNow) +
		sizeBool(s.CallerClock) + sizeBool(s.LogDelta) + sizeI64(s.LogAfter) + sizeI64(s.LogAfterCount)
	if s.KeyHash != 0 {
		n += 1 + protowire.SizeFixed64()
	}
	return n
}

func appendKeyState(b []byte, s *KeyState) []byte {
	b = appendString(b, 1, s.Key)
	b = appendI64(b, 2, int64(kindToWire(s.Limit.Kind)))
	b = appendI64(b, 3, s.Limit.Limit)
	b = appendI64(b, 4, int64(s.Limit.Period))
	b = appendI64(b, 5, s.Limit.Burst)
	if len(s.State) > 0 {
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendBytes(b, s.State)
	}
	b = appendI64(b, 7, s.LastNow)
	b = appendBool(b, 8, s.CallerClock)
	if s.KeyHash != 0 {
		b = protowire.AppendTag(b, 9, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, s.KeyHash)
	}
	b = appendBool(b, 10, s.LogDelta)
	b = appendI64(b, 11, s.LogAfter)
	return appendI64(b, 12, s.LogAfterCount)
}

// penaltyStateSize and appendPenaltyState encode a PenaltyState as
// penaltyStateToWire and the protobuf runtime do (denials packed).
func penaltyStateSize(p *PenaltyState) int {
	n := sizeBytes(len(p.Key)) + sizeI64(p.BanUntil) + sizeI64(p.Expire)
	if d := packedSize(p.Denials); d > 0 {
		n += 1 + protowire.SizeBytes(d)
	}
	return n
}

func packedSize(vs []int64) int {
	n := 0
	for _, v := range vs {
		n += protowire.SizeVarint(uint64(v))
	}
	return n
}

func appendPenaltyState(b []byte, p *PenaltyState) []byte {
	b = appendString(b, 1, p.Key)
	b = appendI64(b, 2, p.BanUntil)
	if d := packedSize(p.Denials); d > 0 {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(d))
		for _, v := range p.Denials {
			b = protowire.AppendVarint(b, uint64(v))
		}
	}
	return appendI64(b, 4, p.Expire)
}

// consumeTag is protowire.ConsumeTag that also rejects field numbers above
// protowire.MaxValidNumber, as proto.Unmarshal does.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}

// skipField consumes the value of an unknown field (or of a known field with
// an unexpected wire type, which the protobuf runtime keeps as unknown).
func skipField(num protowire.Number, typ protowire.Type, b []byte) ([]byte, error) {
	n := protowire.ConsumeFieldValue(num, typ, b)
	if n < 0 {
		return nil, errMalformedTransfer
	}
	return b[n:], nil
}

// scanTransfer checks that the TransferRequest b is well formed at the top
// level and returns its numbers of states and penalties and the total length
// of the states' keys (of a key that comes first in its state, as encoders
// write it).
func scanTransfer(b []byte) (states, pens, keyBytes int, err error) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, 0, 0, errMalformedTransfer
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, 0, 0, errMalformedTransfer
		}
		if typ == protowire.BytesType {
			switch num {
			case 1:
				states++
				keyBytes += firstKeyLen(b[:n])
			case 5:
				pens++
			}
		}
		b = b[n:]
	}
	return states, pens, keyBytes, nil
}

// decode decodes the TransferRequest b into m (see xferRequest); the State
// bytes of the states alias b. Only a malformed message is an error; invalid
// items are recorded.
func (m *xferRequest) decode(b []byte) error {
	nStates, nPens, keyBytes, err := scanTransfer(b)
	if err != nil {
		return err
	}
	keepStates, keepPens := nStates <= m.maxBatch, nPens <= m.maxBatch
	states := m.batch.States[:0]
	if keepStates && cap(states) < nStates {
		states = make([]KeyState, 0, nStates)
	}
	var keys []byte
	if keepStates && keyBytes > 0 {
		keys = make([]byte, 0, keyBytes)
	}
	var pens []PenaltyState
	if keepPens && nPens > 0 {
		pens = make([]PenaltyState, 0, nPens)
	}
	m.batch = TransferBatch{States: states}
	m.nStates, m.nPens = nStates, nPens
	m.badState, m.badPen = invalidItem{}, invalidItem{}
	si, pi := 0, 0
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return errMalformedTransfer
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 2 || num == 5 || num == 7) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errMalformedTransfer
			}
			b = b[n:]
			switch num {
			case 1:
				var w wireKeyState
				if err := w.decode(v); err != nil {
					return err
				}
				if keepStates && m.badState.err == nil {
					ks, err := w.keyState(&keys)
					if err == nil {
						err = validateKeyState(ks, m.maxKeyLen)
					}
					if err != nil {
						m.badState = invalidItem{index: si, err: err}
					} else {
						m.batch.States = append(m.batch.States, ks)
					}
				}
				si++
			case 2:
				if !utf8.Valid(v) {
					return errMalformedTransfer
				}
				if string(v) != m.lastFrom { // compares without allocating
					m.lastFrom = string(v)
				}
				m.batch.From = m.lastFrom
			case 7:
				if !utf8.Valid(v) {
					return errMalformedTransfer
				}
				m.batch.After = append(m.batch.After, string(v))
			case 5:
				var p PenaltyState
				keep := keepPens && m.badPen.err == nil
				if err := decodePenaltyState(v, &p, keep); err != nil {
					return err
				}
				if keep {
					if err := validatePenaltyState(p, m.maxKeyLen); err != nil {
						m.badPen = invalidItem{index: pi, err: err}
					} else {
						pens = append(pens, p)
					}
				}
				pi++
			}
		case (num == 3 || num == 4 || num == 6 || num == 8) && typ == protowire.VarintType:
			u, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errMalformedTransfer
			}
			b = b[n:]
			switch num {
			case 3:
				m.batch.RingDigest = u
			case 4:
				m.batch.Done = protowire.DecodeBool(u)
			case 6:
				m.batch.Replica = protowire.DecodeBool(u)
			case 8:
				m.batch.Leaving = protowire.DecodeBool(u)
			}
		default:
			if b, err = skipField(num, typ, b); err != nil {
				return err
			}
		}
	}
	m.batch.Penalties = pens
	return nil
}

// check returns the status error the Transfer RPC has always answered a
// decoded request with, in the same order: a batch of states above the
// maximum, the first invalid state, a batch of penalties above the maximum,
// the first invalid penalty, more than MaxAfter names in after (each
// codes.InvalidArgument); nil when the request may go to the handler.
func (m *xferRequest) check() error {
	if m.nStates > m.maxBatch {
		return batchTooLarge("states", m.nStates, m.maxBatch)
	}
	if it := m.badState; it.err != nil {
		return status.Errorf(codes.InvalidArgument, "states[%d]: %v", it.index, it.err)
	}
	if m.nPens > 0 {
		if m.nPens > m.maxBatch {
			return batchTooLarge("penalties", m.nPens, m.maxBatch)
		}
		if it := m.badPen; it.err != nil {
			return status.Errorf(codes.InvalidArgument, "penalties[%d]: %v", it.index, it.err)
		}
	}
	if len(m.batch.After) > MaxAfter {
		return batchTooLarge("after", len(m.batch.After), MaxAfter)
	}
	return nil
}

// wireKeyState is a KeyState message as read off the wire; key and state
// alias the message.
type wireKeyState struct {
	key, state                                             []byte
	alg                                                    pb.Algorithm
	limit, period, burst, lastNow, logAfter, logAfterCount int64
	keyHash                                                uint64
	callerClock, logDelta                                  bool
}

// decode reads the KeyState message b into w, the last value of a field
// winning, as the protobuf runtime does.
func (w *wireKeyState) decode(b []byte) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return errMalformedTransfer
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 6) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errMalformedTransfer
			}
			b = b[n:]
			if num == 1 {
				w.key = v
			} else {
				w.state = v
			}
		case num == 9 && typ == protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return errMalformedTransfer
			}
			b, w.keyHash = b[n:], v
		case num >= 2 && num <= 12 && num != 6 && num != 9 && typ == protowire.VarintType:
			u, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errMalformedTransfer
			}
			b = b[n:]
			v := int64(u)
			switch num {
			case 2:
				w.alg = pb.Algorithm(int32(v))
			case 3:
				w.limit = v
			case 4:
				w.period = v
			case 5:
				w.burst = v
			case 7:
				w.lastNow = v
			case 8:
				w.callerClock = protowire.DecodeBool(u)
			case 10:
				w.logDelta = protowire.DecodeBool(u)
			case 11:
				w.logAfter = v
			case 12:
				w.logAfterCount = v
			}
		default:
			var err error
			if b, err = skipField(num, typ, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// keyState converts w as keyStateFromWire does, the key into keys (see
// keyString); the state bytes alias the message (an empty state is nil, as
// the protobuf runtime leaves it).
func (w *wireKeyState) keyState(keys *[]byte) (KeyState, error) {
	k, err := kindFromWire(w.alg)
	if err != nil {
		return KeyState{}, err
	}
	ks := KeyState{
		Key:           keyString(keys, w.key),
		KeyHash:       w.keyHash,
		Limit:         algo.Limit{Kind: k, Limit: w.limit, Period: time.Duration(w.period), Burst: w.burst},
		LastNow:       w.lastNow,
		CallerClock:   w.callerClock,
		LogDelta:      w.logDelta,
		LogAfter:      w.logAfter,
		LogAfterCount: w.logAfterCount,
	}
	if len(w.state) > 0 {
		ks.State = w.state[:len(w.state):len(w.state)]
	}
	return ks, nil
}

// decodePenaltyState reads the PenaltyState message b into p as
// penaltyStateFromWire does (denials packed or not), or, with keep false,
// only checks that it is well formed.
func decodePenaltyState(b []byte, p *PenaltyState, keep bool) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return errMalformedTransfer
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 3) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errMalformedTransfer
			}
			b = b[n:]
			if num == 1 {
				if keep {
					p.Key = string(v)
				}
				continue
			}
			for len(v) > 0 {
				u, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return errMalformedTransfer
				}
				v = v[n:]
				if keep {
					p.Denials = append(p.Denials, int64(u))
				}
			}
		case (num == 2 || num == 3 || num == 4) && typ == protowire.VarintType:
			u, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errMalformedTransfer
			}
			b = b[n:]
			switch num {
			case 2:
				p.BanUntil = int64(u)
			case 3:
				if keep {
					p.Denials = append(p.Denials, int64(u))
				}
			case 4:
				p.Expire = int64(u)
			}
		default:
			var err error
			if b, err = skipField(num, typ, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// xferResponse is one TransferResponse. The server sets needFull; decode
// appends the message's need_full hashes to needFull (packed or not).
type xferResponse struct {
	needFull []uint64
}

func (m *xferResponse) size() int {
	if len(m.needFull) == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(len(m.needFull)*protowire.SizeFixed64())
}

func (m *xferResponse) append(b []byte) []byte {
	if len(m.needFull) == 0 {
		return b
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(m.needFull)*protowire.SizeFixed64()))
	for _, h := range m.needFull {
		b = protowire.AppendFixed64(b, h)
	}
	return b
}

func (m *xferResponse) decode(b []byte) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return errMalformedTransfer
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || len(v)%protowire.SizeFixed64() != 0 {
				return errMalformedTransfer
			}
			b = b[n:]
			for ; len(v) > 0; v = v[protowire.SizeFixed64():] {
				h, _ := protowire.ConsumeFixed64(v)
				m.needFull = append(m.needFull, h)
			}
		case num == 1 && typ == protowire.Fixed64Type:
			h, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return errMalformedTransfer
			}
			b = b[n:]
			m.needFull = append(m.needFull, h)
		default:
			var err error
			if b, err = skipField(num, typ, b); err != nil {
				return err
			}
		}
	}
	return nil
}
