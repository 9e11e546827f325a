package algo

import (
	"errors"
	"testing"
	"time"
)

// TestPlausible runs each Kind on a fixed timeline: states made by real checks
// are plausible; states moved into the future beyond the skew, or holding more
// than the limit, are not.
func TestPlausible(t *testing.T) {
	t.Parallel()
	const skew = int64(2 * time.Second)
	day := int64(24 * time.Hour)
	for _, k := range Kinds() {
		l := Limit{Kind: k, Limit: 5, Period: time.Minute, Burst: 4}
		t.Run(k.String(), func(t *testing.T) {
			var s State
			if err := s.Plausible(t0, skew, l); err != nil {
				t.Errorf("zero state: got %v, want nil", err)
			}
			for i := range int64(10) {
				if _, err := s.Take(t0+i*ms, 1, l); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Plausible(t0+10*ms, skew, l); err != nil {
				t.Errorf("state of real checks: got %v, want nil", err)
			}
			// The same checks made a year ahead: implausible now.
			var ahead State
			for i := range int64(10) {
				if _, err := ahead.Take(t0+365*day+i*ms, 1, l); err != nil {
					t.Fatal(err)
				}
			}
			if err := ahead.Plausible(t0, skew, l); !errors.Is(err, ErrImplausibleState) {
				t.Errorf("state a year ahead: got %v, want ErrImplausibleState", err)
			}
			// Within the skew it is accepted.
			if err := ahead.Plausible(t0+365*day-skew/2, skew, l); err != nil {
				t.Errorf("state within the skew: got %v, want nil", err)
			}
			// Another Kind's limit.
			other := Limit{Kind: GCRA, Limit: 5, Period: time.Minute, Burst: 4}
			if k == GCRA {
				other.Kind = FixedWindow
			}
			if err := s.Plausible(t0, skew, other); !errors.Is(err, ErrImplausibleState) {
				t.Errorf("state for another Kind: got %v, want ErrImplausibleState", err)
			}
			// Taken under a larger limit: more than this limit holds.
			big := l
			big.Limit, big.Burst, big.Period = 1000, 999, time.Hour
			var full State
			for i := range int64(50) {
				if _, err := full.Take(t0+i, 20, big); err != nil {
					t.Fatal(err)
				}
			}
			if err := full.Plausible(t0+50, skew, l); !errors.Is(err, ErrImplausibleState) {
				t.Errorf("state holding more than the limit: got %v, want ErrImplausibleState", err)
			}
		})
	}
	var s State
	if err := s.Plausible(t0, -1, Limit{Kind: GCRA, Limit: 1, Period: time.Second}); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("negative skew: got %v, want ErrInvalidLimit", err)
	}
	if err := s.Plausible(t0, 0, Limit{Kind: GCRA}); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("invalid limit: got %v, want ErrInvalidLimit", err)
	}
}

// FuzzPlausible decodes arbitrary bytes as a state and asks whether it is
// plausible under an arbitrary limit: never a panic, and a plausible state
// never holds a key longer than the limit allows: a peek at now reports a
// ResetAfter of at most the limit's longest reset plus the skew.
func FuzzPlausible(f *testing.F) {
	for _, k := range Kinds() {
		l := Limit{Kind: k, Limit: 5, Period: time.Second, Burst: 2}
		var s State
		for i := range int64(4) {
			_, _ = s.Take(t0+i*100*ms, 2, l)
		}
		b, _ := s.MarshalBinary()
		f.Add(b, uint8(k), int64(5), int64(time.Second), int64(2), t0, int64(time.Second))
	}
	f.Fuzz(func(t *testing.T, b []byte, kind uint8, limit, period, burst, now, skew int64) {
		var s State
		if s.UnmarshalBinary(b) != nil {
			return
		}
		l := Limit{Kind: Kind(kind), Limit: limit, Period: time.Duration(period), Burst: burst}
		if s.Plausible(now, skew, l) != nil {
			return
		}
		d, err := s.Take(now, 0, l)
		if err != nil {
			t.Fatalf("plausible state, valid limit, but Take: %v", err)
		}
		if max := maxReset(l) + time.Duration(skew); d.ResetAfter > max {
			t.Fatalf("plausible %v state resets after %v, above %v (limit %+v)", l.Kind, d.ResetAfter, max, l)
		}
	})
}

// maxReset is the longest a key checked under l can take to return to full
// capacity when no check came after now.
func maxReset(l Limit) time.Duration {
	switch l.Kind {
	case GCRA:
		return time.Duration(int64(l.Period) / l.Limit * (l.Burst + 1))
	case TokenBucket:
		return time.Duration((l.Burst*int64(l.Period) + l.Limit - 1) / l.Limit)
	case SlidingWindowCounter:
		return 2 * l.Period
	}
	return l.Period // FixedWindow, SlidingWindowLog
}

// TestPlausibleBucketedRefusesCraftedStates: a handed-off bucketed window whose
// counts exceed the limit, or whose newest bucket lies in the future, would
// deny the key past its period; it is refused.
func TestPlausibleBucketedRefusesCraftedStates(t *testing.T) {
	t.Parallel()
	l := Limit{Kind: BucketedSlidingWindow, Limit: 10, Period: time.Minute}
	now := int64(1_700_000_000) * int64(time.Second)
	var s State
	if _, err := s.Take(now, 10, l); err != nil {
		t.Fatal(err)
	}
	if err := s.Plausible(now, 0, l); err != nil {
		t.Fatalf("real state: got %v, want nil", err)
	}
	over := s
	bw := *s.bw
	bw.counts[0] += 5
	bw.counts[1] += 5
	over.bw = &bw
	if err := over.Plausible(now, 0, l); !errors.Is(err, ErrImplausibleState) {
		t.Errorf("counts above the limit: got %v, want ErrImplausibleState", err)
	}
	future := s
	bw2 := *s.bw
	bw2.head += 1_000_000
	future.bw = &bw2
	if err := future.Plausible(now, int64(time.Second), l); !errors.Is(err, ErrImplausibleState) {
		t.Errorf("newest bucket in the future: got %v, want ErrImplausibleState", err)
	}
}
