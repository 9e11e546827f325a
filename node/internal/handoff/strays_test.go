package handoff

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

func TestStraysListOnlyStraysAndSignalOnce(t *testing.T) {
	s := NewStrays()
	s.Add([]uint64{1, 2, 3, 4}, func(h uint64) bool { return h%2 == 0 })
	s.Add([]uint64{6}, func(uint64) bool { return true })
	select {
	case <-s.Sig():
	default:
		t.Fatal("no signal after strays were listed")
	}
	select {
	case <-s.Sig():
		t.Fatal("a second signal for one pending pass")
	default:
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3 (2, 4, 6)", n)
	}
	got := s.Take()
	if len(got) != 3 || !got[2] || !got[4] || !got[6] || got[1] {
		t.Fatalf("Take = %v, want {2 4 6}", got)
	}
	if s.Len() != 0 || s.Take() != nil {
		t.Fatal("Take did not empty the list")
	}
	s.Add([]uint64{8}, func(uint64) bool { return false })
	select {
	case <-s.Sig():
		t.Fatal("signalled though nothing was listed")
	default:
	}
}

func TestSendJoinsEveryOwnersError(t *testing.T) {
	b := NewBatches()
	b.Mark("ok", "addr-ok")
	b.Mark("bad", "addr-bad")
	b.AddBan("bad", "addr-bad", store.BanState{Key: "k"})
	var mu sync.Mutex
	sent := map[string]string{}
	_, err := b.Send(context.Background(), func(_ context.Context, name, addr string, _ []transport.KeyState, bans []transport.PenaltyState) error {
		mu.Lock()
		sent[name] = addr
		mu.Unlock()
		if name == "bad" {
			if len(bans) != 1 {
				t.Errorf("bad's bans: %d, want 1", len(bans))
			}
			return errors.New("refused")
		}
		return nil
	})
	if len(sent) != 2 || sent["ok"] != "addr-ok" || sent["bad"] != "addr-bad" {
		t.Fatalf("sent to %v, want both owners at their addresses", sent)
	}
	if err == nil || !strings.Contains(err.Error(), "to bad (0 keys): refused") || strings.Contains(err.Error(), "to ok") {
		t.Fatalf("Send error = %v, want bad's alone", err)
	}
}

func TestWaitEndsEachWay(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	stopped := errors.New("stopped")
	var h Hellos
	gate := func(dl time.Duration) (Gate, chan struct{}) {
		c := make(chan struct{})
		return Gate{C: c, From: "prev", ID: "p1", Deadline: time.Now().Add(dl), HandoffTimeout: dl, ForwardTimeout: dl}, c
	}
	g, c := gate(time.Hour)
	close(c)
	if out, err := h.Wait(context.Background(), g, nil, stopped, log); out != Opened || err != nil {
		t.Fatalf("opened gate: %v, %v", out, err)
	}
	g, _ = gate(time.Hour)
	stop := make(chan struct{})
	close(stop)
	if _, err := h.Wait(context.Background(), g, stop, stopped, log); err != stopped {
		t.Fatalf("stopped: err %v, want %v", err, stopped)
	}
	g, _ = gate(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.Wait(ctx, g, nil, stopped, log); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: err %v", err)
	}
	g, _ = gate(time.Hour)
	moved := make(chan struct{})
	close(moved)
	g.Moved = moved
	if out, err := h.Wait(context.Background(), g, nil, stopped, log); out != Moved || err != nil {
		t.Fatalf("ring replaced: %v, %v, want Moved", out, err)
	}
	g, _ = gate(10 * time.Millisecond)
	if out, err := h.Wait(context.Background(), g, nil, stopped, log); out != ExpiredUnheard || err != nil {
		t.Fatalf("never heard: %v, %v, want ExpiredUnheard", out, err)
	}
	h.Note("prev", "p1")
	g, _ = gate(10 * time.Millisecond)
	if out, err := h.Wait(context.Background(), g, nil, stopped, log); out != ExpiredHeard || err != nil {
		t.Fatalf("heard: %v, %v, want ExpiredHeard", out, err)
	}
	if at, ok, _ := h.Heard("prev", "p1"); !ok || at.IsZero() || !h.Latest().Equal(at) {
		t.Fatalf("Heard = %v %v, Latest %v", at, ok, h.Latest())
	}
	if _, ok, _ := h.Heard("prev", "p0"); ok {
		t.Fatal("another instance of prev counted as heard")
	}
	h.Note("gone", "g1")
	h.Keep([]string{"prev"})
	if h.Len() != 1 {
		t.Fatalf("Len after Keep = %d, want 1", h.Len())
	}
}

func TestReplaceMovesOnlyTheFailedOwnersStates(t *testing.T) {
	b := NewBatches()
	for h := uint64(1); h <= 3; h++ {
		b.AddState("x", "addr-x", &store.Moved{H: h})
	}
	b.AddState("ok", "addr-ok", &store.Moved{H: 4})
	b.AddBan("x", "addr-x", store.BanState{Key: "k"})
	owner := func(h uint64) (string, string, bool) {
		switch h {
		case 3:
			return "", "", false
		case 1, 10:
			return "a", "addr-a", true
		}
		return "b", "addr-b", true
	}
	nb := b.Replace([]string{"x"}, owner, func(key string) uint64 { return 10 })
	if st := nb.States["a"]; len(st) != 1 || st[0].KeyHash != 1 || st[0].State == nil || nb.Addrs["a"] != "addr-a" {
		t.Fatalf("a's batch: %+v at %q", st, nb.Addrs["a"])
	}
	if st := nb.States["b"]; len(st) != 1 || st[0].KeyHash != 2 {
		t.Fatalf("b's batch: %+v", st)
	}
	if len(nb.Bans["a"]) != 1 || nb.Bans["a"][0].Key != "k" {
		t.Fatalf("the ban state went to %+v, want a", nb.Bans)
	}
	if _, ok := nb.States["ok"]; ok || nb.States["x"] != nil {
		t.Fatalf("states of owners that did not fail, or of the failed owner, re-placed: %v", nb.States)
	}
	if nb.Lost != 1 {
		t.Fatalf("Lost = %d, want 1 (the state no member takes)", nb.Lost)
	}
}

func TestStraysRunPassesOncePerSignalAfterTheDebounce(t *testing.T) {
	s := NewStrays()
	stop := make(chan struct{})
	passed := make(chan time.Time, 4)
	done := make(chan struct{})
	go func() { s.Run(stop, 20*time.Millisecond, func() { passed <- time.Now() }); close(done) }()
	start := time.Now()
	s.Add([]uint64{1}, func(uint64) bool { return true })
	select {
	case at := <-passed:
		if d := at.Sub(start); d < 20*time.Millisecond {
			t.Fatalf("passed %v after the signal, before the 20 ms debounce", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no pass 5 s after a signal")
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run still running 5 s after stop")
	}
	if len(passed) != 0 {
		t.Fatalf("%d extra passes for one signal", len(passed))
	}
}
