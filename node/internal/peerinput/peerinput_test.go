package peerinput

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// Within refuses each field above the maxima with ErrLimitAboveMax, and a
// burst whose drain takes longer than maxP; everything else passes.
func TestWithin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l     algo.Limit
		field string // "" passes
	}{
		{algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second, Burst: 10}, ""},
		{algo.Limit{Kind: algo.GCRA, Limit: 10, Period: 2 * time.Hour}, "period"},
		{algo.Limit{Kind: algo.FixedWindow, Limit: 2000, Period: time.Second}, "limit"},
		{algo.Limit{Kind: algo.TokenBucket, Limit: 1, Period: time.Second, Burst: 1001}, "burst"},
		{algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Minute, Burst: 100}, "burst"}, // drains in 101 min
		{algo.Limit{Kind: algo.TokenBucket, Limit: 1, Period: time.Minute, Burst: 30}, ""},
	} {
		err := Within(tc.l, time.Hour, 1000)
		var ie *algo.InputError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: got %v, want nil", tc.l, err)
		case tc.field != "" && (!errors.As(err, &ie) || ie.Field != tc.field || !errors.Is(err, ErrLimitAboveMax)):
			t.Errorf("%+v: got %v, want field %s refused with ErrLimitAboveMax", tc.l, err, tc.field)
		}
	}
}

// LogEvery lets the first line through and holds back, counting, the ones
// within the same second.
func TestLogEvery(t *testing.T) {
	t.Parallel()
	var l LogEvery
	if ok, held := l.Allow(); !ok || held != 0 {
		t.Fatalf("first: got %v, %d, want true, 0", ok, held)
	}
	for i := 0; i < 3; i++ {
		if ok, _ := l.Allow(); ok {
			t.Fatalf("line %d within the second let through, want held back", i+2)
		}
	}
	if got := l.held.Load(); got != 3 {
		t.Errorf("held: got %d, want 3", got)
	}
}
