package transport

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// FuzzStreamRequest decodes arbitrary bytes as a ForwardStream message with
// the stream codec, as the receiving peer does: no panic; a message it
// accepts holds n items, each either a valid check or a rejection with its
// reason (answered CodeInvalidArgument); decoding it into a message that
// held an earlier batch (as the stream reuses them) gives the same.
func FuzzStreamRequest(f *testing.F) {
	leased := validCheck("c", 1)
	leased.LeaseHits = 40
	req := fwdRequest{id: 7, timeout: int64(time.Second), checks: []Check{validCheck("a", 1), {Key: "b", Limit: validCheck("b", 0).Limit, CreatedAt: 1}, leased}}
	seed := req.append(nil)
	f.Add(seed)
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00})
	f.Add([]byte{0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := fwdRequest{maxKeyLen: DefaultMaxKeyLen}
		err := m.decode(data)
		reused := fwdRequest{maxKeyLen: DefaultMaxKeyLen}
		if err := reused.decode(seed); err != nil {
			t.Fatal(err)
		}
		if err2 := reused.decode(data); (err2 == nil) != (err == nil) {
			t.Fatalf("decode into a reused message: error %v, want %v", err2, err)
		}
		if err != nil {
			return
		}
		if reused.id != m.id || reused.timeout != m.timeout || reused.n != m.n ||
			fmt.Sprint(reused.checks) != fmt.Sprint(m.checks) || invalidString(reused.invalid) != invalidString(m.invalid) {
			t.Fatalf("decoded into a reused message %+v, want %+v", reused, m)
		}
		if len(m.checks)+len(m.invalid) != m.n {
			t.Fatalf("decoded %d valid + %d invalid, want n = %d", len(m.checks), len(m.invalid), m.n)
		}
		for _, c := range m.checks {
			if err := ValidateCheck(c, DefaultMaxKeyLen); err != nil {
				t.Fatalf("accepted check fails ValidateCheck: %v", err)
			}
		}
		for _, iv := range m.invalid {
			if iv.err == nil {
				t.Fatal("a rejected item carries no error")
			}
		}
	})
}

// FuzzStreamResponse decodes arbitrary bytes as a ForwardStream answer, as
// the forwarding peer does: no panic, and decoding into a message that held
// an earlier answer (as the stream's receive loop does) gives the same.
func FuzzStreamResponse(f *testing.F) {
	resp := fwdResponse{id: 3, results: []Result{{Code: CodeOK, Route: RouteOwner, Owner: "n", Banned: true}, {Code: CodeNotOwner, Message: "x"},
		{Code: CodeOK, Route: RouteOwner, Decision: algo.Decision{Allowed: true}, LeaseHits: 12, LeaseFor: time.Second}}}
	seed := resp.append(nil)
	f.Add(seed)
	f.Add([]byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m, reused fwdResponse
		err := m.decode(data)
		if err := reused.decode(seed); err != nil {
			t.Fatal(err)
		}
		if err2 := reused.decode(data); (err2 == nil) != (err == nil) {
			t.Fatalf("decode into a reused message: error %v, want %v", err2, err)
		}
		if err == nil && (reused.id != m.id || reused.code != m.code || reused.message != m.message || fmt.Sprint(reused.results) != fmt.Sprint(m.results)) {
			t.Fatalf("decoded into a reused message %+v, want %+v", reused, m)
		}
	})
}
