package keyops

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

// Only the owner inspects and resets; a reset returns the invalidation to
// send, and the invalidation drops a backup's replica.
func TestApply(t *testing.T) {
	t.Parallel()
	s := Stores{Owned: store.New(10, xxhash.Sum64String, nil), Bans: &store.Bans{}}
	clock := func() int64 { return 1_000_000_000_000 }
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second, Burst: 9}
	h := xxhash.Sum64String("k")
	if _, err := s.Owned.Take(h, l, 3, clock(), clock(), func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	inspect := transport.KeyOpRequest{Op: transport.KeyOpInspect, Key: "k", Limit: l}
	if res, _, _ := s.Apply(inspect, h, false, clock); res.Code != transport.CodeNotOwner {
		t.Errorf("inspect on a non-owner: got code %v, want CodeNotOwner", res.Code)
	}
	if res, _, err := s.Apply(inspect, h, true, clock); err != nil || !res.Found || res.Decision.Remaining != 7 {
		t.Errorf("inspect: got %+v, %v, want found with 7 remaining", res, err)
	}
	reset := transport.KeyOpRequest{Op: transport.KeyOpReset, Key: "k", Limit: l}
	res, inv, err := s.Apply(reset, h, true, clock)
	if err != nil || !res.Found || inv == nil || inv.Op != transport.KeyOpInvalidate || inv.Limit.Kind != algo.GCRA {
		t.Fatalf("reset: got %+v, %+v, %v, want found and a GCRA invalidation", res, inv, err)
	}
	// As the backup: the replica of what was reset goes.
	if _, err := s.Owned.Take(h, l, 1, clock(), clock(), func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	if _, inv, _ := s.Apply(*inv, h, false, clock); inv != nil || s.Owned.Has(h, algo.GCRA) {
		t.Errorf("invalidation on the backup: replica kept %v (want dropped), invalidation %+v (want none)", s.Owned.Has(h, algo.GCRA), inv)
	}
}

// Broadcast names the peers that failed or answered another code.
func TestBroadcast(t *testing.T) {
	t.Parallel()
	peers := []Peer{{"a", "addr-a"}, {"b", "addr-b"}, {"c", "addr-c"}}
	send := func(_ context.Context, addr string, _ transport.KeyOpRequest) (transport.KeyOpResult, error) {
		switch addr {
		case "addr-b":
			return transport.KeyOpResult{}, errors.New("down")
		case "addr-c":
			return transport.KeyOpResult{Code: transport.CodeUnavailable}, nil
		}
		return transport.KeyOpResult{}, nil
	}
	missed := Broadcast(context.Background(), peers, transport.KeyOpRequest{Op: transport.KeyOpInvalidate, Key: "k"}, send)
	slices.Sort(missed)
	if !slices.Equal(missed, []string{"b", "c"}) {
		t.Errorf("missed: got %v, want [b c]", missed)
	}
}
