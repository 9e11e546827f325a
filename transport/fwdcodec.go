package transport

import (
	"fmt"
	"strings"
	"time"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ringlimit/ringlimit/algo"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// This file is ForwardStream's messages: fwdRequest and fwdResponse
// encoded from and decoded into []Check and []Result with protowire (see
// wireCodec in codec.go).
//
// fwdcodec.go is over 600 lines because a message's encoder, its size and its
// decoder (with the per-check refusals) are kept together, request beside
// response, so that each can be read against the proto fields it writes.

// fwdRequest is a ForwardRequest of the stream. The sender fills id, timeout
// and checks. The receiver sets maxKeyLen before decoding; decode then fills
// id, timeout, n (the number of checks in the message), the valid checks in
// order, and the rejected ones with their index and reason. decode reuses the
// backing array of checks, and stores the keys of one message in keyBuf (see
// keyString), which it reuses too when it is large enough: the keys of a
// decoded request are valid until the next decode into the same fwdRequest
// (the server decodes a stream batch's next message only after its handler
// returned; a key with a Penalty is a copy of its own).
type fwdRequest struct {
	id        uint64
	timeout   int64 // ns
	checks    []Check
	maxKeyLen int
	n         int
	invalid   []invalidItem
	keyBuf    []byte // receiver only: the bytes of the keys, kept across reuse
}

func (m *fwdRequest) size() int {
	n := sizeU64(m.id) + sizeI64(m.timeout)
	for i := range m.checks {
		n += 1 + protowire.SizeBytes(checkSize(&m.checks[i]))
	}
	return n
}

func (m *fwdRequest) append(b []byte) []byte {
	for i := range m.checks {
		c := &m.checks[i]
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(checkSize(c)))
		b = appendCheck(b, c)
	}
	b = appendU64(b, 2, m.id)
	return appendI64(b, 3, m.timeout)
}

func checkSize(c *Check) int {
	return sizeBytes(len(c.Key)) + sizeI64(int64(kindToWire(c.Limit.Kind))) + sizeI64(c.Limit.Limit) +
		sizeI64(int64(c.Limit.Period)) + sizeI64(c.Limit.Burst) + sizeI64(c.Hits) + sizeI64(c.CreatedAt) +
		sizeI64(c.Penalty.Denials) + sizeI64(int64(c.Penalty.Within)) + sizeI64(int64(c.Penalty.Ban)) +
		sizeBool(c.AsBackup) + sizeI64(int64(c.MaxWait)) + sizeI64(c.CancelAt) + sizeI64(c.LeaseHits) +
		sizeI64(c.LeaseID) + sizeI64Tag2(c.LeaseLeft)
}

// sizeI64Tag2 is sizeI64 for a field numbered 16 or more (a two-byte tag).
func sizeI64Tag2(v int64) int {
	if v == 0 {
		return 0
	}
	return 2 + protowire.SizeVarint(uint64(v))
}

// sizeBool is the encoded size of a bool field (omitted when false).
func sizeBool(v bool) int {
	if v {
		return 2
	}
	return 0
}

func appendCheck(b []byte, c *Check) []byte {
	if len(c.Key) > 0 {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, c.Key)
	}
	b = appendI64(b, 2, int64(kindToWire(c.Limit.Kind)))
	b = appendI64(b, 3, c.Limit.Limit)
	b = appendI64(b, 4, int64(c.Limit.Period))
	b = appendI64(b, 5, c.Limit.Burst)
	b = appendI64(b, 6, c.Hits)
	b = appendI64(b, 7, c.CreatedAt)
	b = appendI64(b, 8, c.Penalty.Denials)
	b = appendI64(b, 9, int64(c.Penalty.Within))
	b = appendI64(b, 10, int64(c.Penalty.Ban))
	if c.AsBackup {
		b = appendI64(b, 11, 1)
	}
	b = appendI64(b, 12, int64(c.MaxWait))
	b = appendI64(b, 13, c.CancelAt)
	b = appendI64(b, 14, c.LeaseHits)
	b = appendI64(b, 15, c.LeaseID)
	return appendI64(b, 16, c.LeaseLeft)
}

func (m *fwdRequest) decode(b []byte) error {
	n, keyBytes, err := scanRequest(b)
	if err != nil {
		return err
	}
	m.id, m.timeout, m.n, m.invalid = 0, 0, n, nil
	if cap(m.checks) < n {
		m.checks = make([]Check, 0, n)
	}
	m.checks = m.checks[:0]
	keys := m.keyBuf[:0]
	if cap(keys) < keyBytes {
		keys = make([]byte, 0, keyBytes)
		m.keyBuf = keys
	}
	i := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errMalformed
		}
		b = b[l:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			b = b[l:]
			c, err := decodeCheck(v, &keys)
			if err == nil {
				err = ValidateCheck(c, m.maxKeyLen)
			}
			if err != nil {
				m.invalid = append(m.invalid, invalidItem{index: i, err: err})
			} else {
				m.checks = append(m.checks, c)
			}
			i++
		case num == 1:
			// scanRequest counted it as an item: a check that is not a message
			// (found by FuzzStreamRequest) fails the request rather than leave
			// the batch one answer short.
			return errMalformed
		case num == 2 && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return errMalformed
			}
			b, m.id = b[l:], v
		case num == 3 && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return errMalformed
			}
			b, m.timeout = b[l:], int64(v)
		default:
			l := protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return errMalformed
			}
			b = b[l:]
		}
	}
	return nil
}

// decodeCheck decodes one Check message, its key into keys (see keyString);
// like checkFromWire, only the algorithm can fail here (a malformed message
// fails the whole request).
func decodeCheck(b []byte, keys *[]byte) (Check, error) {
	var c Check
	var alg pb.Algorithm
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return Check{}, errMalformed
		}
		b = b[l:]
		if num == 1 && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return Check{}, errMalformed
			}
			b, c.Key = b[l:], keyString(keys, v)
			continue
		}
		if typ != protowire.VarintType || num < 2 || num > 16 {
			l := protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return Check{}, errMalformed
			}
			b = b[l:]
			continue
		}
		u, l := protowire.ConsumeVarint(b)
		if l < 0 {
			return Check{}, errMalformed
		}
		b = b[l:]
		v := int64(u)
		switch num {
		case 2:
			alg = pb.Algorithm(int32(v))
		case 3:
			c.Limit.Limit = v
		case 4:
			c.Limit.Period = time.Duration(v)
		case 5:
			c.Limit.Burst = v
		case 6:
			c.Hits = v
		case 7:
			c.CreatedAt = v
		case 8:
			c.Penalty.Denials = v
		case 9:
			c.Penalty.Within = time.Duration(v)
		case 10:
			c.Penalty.Ban = time.Duration(v)
		case 11:
			c.AsBackup = u != 0
		case 12:
			c.MaxWait = time.Duration(v)
		case 13:
			c.CancelAt = v
		case 14:
			c.LeaseHits = v
		case 15:
			c.LeaseID = v
		case 16:
			c.LeaseLeft = v
		}
	}
	k, err := kindFromWire(alg)
	if err != nil {
		return Check{}, err
	}
	c.Limit.Kind = k
	if !c.Penalty.IsZero() {
		// The owner keeps the key of a ban state: it must not hold the
		// message's other keys alive with it.
		c.Key = strings.Clone(c.Key)
	}
	return c, nil
}

// keyString returns v as a string stored in the room left in *keys, which it
// extends, or as a string of its own when *keys has no room left. Bytes of
// *keys are written once per decoded message, before any string refers to
// them, so the strings stay unchanged while the message is being handled: the
// keys of one message cost no allocation when the buffer is reused (see
// fwdRequest) and one otherwise. A key kept beyond the batch must be cloned.
func keyString(keys *[]byte, v []byte) string {
	k := *keys
	if len(v) == 0 || cap(k)-len(k) < len(v) {
		return string(v)
	}
	start := len(k)
	k = append(k, v...)
	*keys = k
	return unsafe.String(&k[start], len(v))
}

// scanRequest checks that a ForwardRequest b is well formed at the top level
// and returns its number of checks and the total length of their keys (of a
// key that comes first in its check, as encoders write it).
func scanRequest(b []byte) (n, keyBytes int, err error) {
	for len(b) > 0 {
		f, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, 0, errMalformed
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(f, typ, b)
		if l < 0 {
			return 0, 0, errMalformed
		}
		if f == 1 {
			n++
			if typ == protowire.BytesType {
				keyBytes += firstKeyLen(b[:l])
			}
		}
		b = b[l:]
	}
	return n, keyBytes, nil
}

// firstKeyLen returns the length of the key of the length-prefixed Check
// message b when the key is its first field, else 0.
func firstKeyLen(b []byte) int {
	v, l := protowire.ConsumeBytes(b)
	if l < 0 || len(v) == 0 || v[0] != 1<<3|byte(protowire.BytesType) {
		return 0
	}
	k, l := protowire.ConsumeBytes(v[1:])
	if l < 0 {
		return 0
	}
	return len(k)
}

// fwdResponse is a ForwardResponse of the stream. The sender fills id and
// either results or code and message. decode fills id, code, message and
// results (empty unless the message holds results; its backing array is
// decoded into again by the next decode); lastOwner carries the last
// owner name decoded across the messages of one stream, so that the same name
// is not allocated again for every result.
type fwdResponse struct {
	id        uint64
	code      pb.Code
	message   string
	results   []Result
	lastOwner string
}

func (m *fwdResponse) size() int {
	n := sizeU64(m.id) + sizeI64(int64(m.code)) + sizeBytes(len(m.message))
	for i := range m.results {
		n += 1 + protowire.SizeBytes(resultSize(&m.results[i]))
	}
	return n
}

func (m *fwdResponse) append(b []byte) []byte {
	for i := range m.results {
		r := &m.results[i]
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(resultSize(r)))
		b = appendResult(b, r)
	}
	b = appendU64(b, 2, m.id)
	b = appendI64(b, 3, int64(m.code))
	return appendString(b, 4, m.message)
}

// resultSize and appendResult encode a Result as resultsToWire does: the
// decision only for CodeOK.
func resultSize(r *Result) int {
	n := sizeI64(int64(codeToWire(r.Code))) + sizeBytes(len(r.Message))
	if r.Code == CodeResourceExhausted {
		n += sizeI64(int64(r.Decision.RetryAfter))
	}
	if r.Code == CodeOK {
		n += 1 + protowire.SizeBytes(decisionSize(r))
	}
	return n
}

func appendResult(b []byte, r *Result) []byte {
	b = appendI64(b, 1, int64(codeToWire(r.Code)))
	b = appendString(b, 2, r.Message)
	if r.Code == CodeResourceExhausted {
		b = appendI64(b, 4, int64(r.Decision.RetryAfter))
	}
	if r.Code == CodeOK {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(decisionSize(r)))
		b = appendDecision(b, r)
	}
	return b
}

func decisionSize(r *Result) int {
	d := &r.Decision
	n := sizeI64(d.Limit) + sizeI64(d.Remaining) + sizeI64(int64(d.RetryAfter)) + sizeI64(int64(d.ResetAfter)) +
		sizeI64(int64(routeToWire(r.Route))) + sizeBytes(len(r.Owner)) + sizeI64(int64(r.Delay)) + sizeI64(r.At) +
		sizeI64(r.LeaseHits) + sizeI64(int64(r.LeaseFor)) + sizeI64(r.LeaseID)
	if d.Allowed {
		n += 2
	}
	if r.LeaseRenewed {
		n += 2
	}
	if r.Banned {
		n += 2
	}
	return n
}

func appendDecision(b []byte, r *Result) []byte {
	d := &r.Decision
	if d.Allowed {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	b = appendI64(b, 2, d.Limit)
	b = appendI64(b, 3, d.Remaining)
	b = appendI64(b, 4, int64(d.RetryAfter))
	b = appendI64(b, 5, int64(d.ResetAfter))
	b = appendI64(b, 6, int64(routeToWire(r.Route)))
	b = appendString(b, 7, r.Owner)
	if r.Banned {
		b = protowire.AppendTag(b, 8, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	b = appendI64(b, 9, int64(r.Delay))
	b = appendI64(b, 10, r.At)
	b = appendI64(b, 11, r.LeaseHits)
	b = appendI64(b, 12, int64(r.LeaseFor))
	b = appendI64(b, 13, r.LeaseID)
	if r.LeaseRenewed {
		b = protowire.AppendTag(b, 14, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

func (m *fwdResponse) decode(b []byte) error {
	n, err := countField(b, 1)
	if err != nil {
		return err
	}
	m.id, m.code, m.message = 0, 0, ""
	if cap(m.results) < n {
		m.results = make([]Result, 0, n)
	}
	m.results = m.results[:0]
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errMalformed
		}
		b = b[l:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			b = b[l:]
			m.results = append(m.results, Result{})
			if err := m.decodeResult(v, &m.results[len(m.results)-1]); err != nil {
				return err
			}
		case (num == 2 || num == 3) && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return errMalformed
			}
			b = b[l:]
			if num == 2 {
				m.id = v
			} else {
				m.code = pb.Code(int32(v))
			}
		case num == 4 && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			b, m.message = b[l:], string(v)
		default:
			l := protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return errMalformed
			}
			b = b[l:]
		}
	}
	return nil
}

// decodeResult decodes one Result message into r with the rules of
// resultFromWire, without the intermediate wire structs.
func (m *fwdResponse) decodeResult(b []byte, r *Result) error {
	var code pb.Code
	var msg string
	var d pb.Decision
	var retryAfter int64
	hasDecision := false
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errMalformed
		}
		b = b[l:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return errMalformed
			}
			b, code = b[l:], pb.Code(int32(v))
		case num == 4 && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return errMalformed
			}
			b, retryAfter = b[l:], int64(v)
		case num == 2 && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			b, msg = b[l:], string(v)
		case num == 3 && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			b = b[l:]
			if err := m.decodeDecision(v, &d); err != nil {
				return err
			}
			hasDecision = true
		default:
			l := protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return errMalformed
			}
			b = b[l:]
		}
	}
	r.Code = codeFromWire(code)
	r.Message = msg
	switch code {
	case pb.Code_CODE_OK, pb.Code_CODE_NOT_OWNER, pb.Code_CODE_INVALID_ARGUMENT, pb.Code_CODE_UNAVAILABLE, pb.Code_CODE_PERMISSION_DENIED, pb.Code_CODE_RESOURCE_EXHAUSTED:
	default:
		r.Message = fmt.Sprintf("unknown result code %d: %s", int32(code), msg)
	}
	if r.Code == CodeResourceExhausted {
		r.Decision = algo.Decision{RetryAfter: time.Duration(max(retryAfter, 0))}
	}
	if r.Code != CodeOK {
		return nil
	}
	if !hasDecision {
		r.Code = CodeUnavailable
		r.Message = "result has no decision"
		return nil
	}
	r.Decision = algo.Decision{
		Allowed:    d.Allowed,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		RetryAfter: time.Duration(d.RetryAfterNs),
		ResetAfter: time.Duration(d.ResetAfterNs),
	}
	r.Route = routeFromWire(d.Route)
	r.Owner = d.Owner
	r.Banned = d.Banned
	r.Delay = time.Duration(d.DelayNs)
	r.At = d.AtUnixNs
	r.LeaseHits = d.LeaseHits
	r.LeaseFor = time.Duration(d.LeaseNs)
	r.LeaseID = d.LeaseId
	r.LeaseRenewed = d.LeaseRenewed
	return nil
}

func (m *fwdResponse) decodeDecision(b []byte, d *pb.Decision) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errMalformed
		}
		b = b[l:]
		if num == 7 && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			b = b[l:]
			if string(v) != m.lastOwner { // compares without allocating
				m.lastOwner = string(v)
			}
			d.Owner = m.lastOwner
			continue
		}
		if typ != protowire.VarintType || num < 1 || num > 14 || num == 7 {
			l := protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return errMalformed
			}
			b = b[l:]
			continue
		}
		u, l := protowire.ConsumeVarint(b)
		if l < 0 {
			return errMalformed
		}
		b = b[l:]
		v := int64(u)
		switch num {
		case 1:
			d.Allowed = protowire.DecodeBool(u)
		case 2:
			d.Limit = v
		case 3:
			d.Remaining = v
		case 4:
			d.RetryAfterNs = v
		case 5:
			d.ResetAfterNs = v
		case 6:
			d.Route = pb.Route(int32(v))
		case 8:
			d.Banned = protowire.DecodeBool(u)
		case 9:
			d.DelayNs = v
		case 10:
			d.AtUnixNs = v
		case 11:
			d.LeaseHits = v
		case 12:
			d.LeaseNs = v
		case 13:
			d.LeaseId = v
		case 14:
			d.LeaseRenewed = protowire.DecodeBool(u)
		}
	}
	return nil
}
