package peerinput

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/transport"
)

func TestCheckBanState(t *testing.T) {
	const wall = int64(1e12)
	ok := transport.PenaltyState{Key: "k", Denials: []int64{wall - 1, wall + int64(time.Second)}}
	if err := CheckBanState(ok, wall, time.Second); err != nil {
		t.Fatalf("denials within the skew: %v", err)
	}
	bad := transport.PenaltyState{Key: "k", Denials: []int64{wall + int64(2*time.Second)}}
	err := CheckBanState(bad, wall, time.Second)
	if !errors.Is(err, ErrRefusedState) || !errors.Is(err, transport.ErrInvalidCheck) {
		t.Fatalf("a denial past the skew: %v, want ErrRefusedState wrapping ErrInvalidCheck", err)
	}
}

func TestCheckKeyStateCallerClock(t *testing.T) {
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second}
	var st algo.State
	b, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	ks := transport.KeyState{Key: "k", Limit: l, State: b, CallerClock: true, LastNow: 5}
	bounds := StateBounds{MaxPeriod: time.Hour, MaxLimit: 1e6, MaxPeerClockSkew: time.Second}
	if err := CheckKeyState(ks, &st, 1e12, bounds); !errors.Is(err, ErrRefusedState) {
		t.Fatalf("a state on a caller's clock, caller timestamps off: %v, want ErrRefusedState", err)
	}
	bounds.AcceptCallerTimestamps = true
	if err := CheckKeyState(ks, &st, 1e12, bounds); err != nil {
		t.Fatalf("a state on a caller's clock, caller timestamps on: %v", err)
	}
	ks.CallerClock, ks.LastNow = false, 1e12+int64(2*time.Second)
	if err := CheckKeyState(ks, &st, 1e12, bounds); !errors.Is(err, ErrRefusedState) {
		t.Fatalf("a state past the skew: %v, want ErrRefusedState", err)
	}
}

func TestCheckBatchMarksRefused(t *testing.T) {
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second}
	var st algo.State
	enc, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	const wall = int64(1e12)
	b := transport.TransferBatch{
		States:    []transport.KeyState{{Key: "ok", Limit: l, State: enc}, {Key: "caller", Limit: l, State: enc, CallerClock: true}},
		Penalties: []transport.PenaltyState{{Key: "ban", Denials: []int64{wall + int64(time.Hour)}}},
	}
	var refused []string
	cb := CheckBatch(b, wall, StateBounds{MaxPeriod: time.Hour, MaxLimit: 1e6, MaxPeerClockSkew: time.Second}, func(key string, err error) {
		refused = append(refused, key)
	})
	if cb.RefusedAt(0) || !cb.RefusedAt(1) || !cb.PenRefusedAt(0) || cb.Wall != wall || len(cb.States) != 2 {
		t.Fatalf("verdict %+v", cb)
	}
	if len(refused) != 2 || refused[0] != "caller" || refused[1] != "ban" {
		t.Fatalf("refused %v, want [caller ban]", refused)
	}
}
