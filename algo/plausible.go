package algo

import (
	"errors"
	"fmt"
)

// ErrImplausibleState is returned, wrapped with what is wrong, by
// State.Plausible for a state that no sequence of checks under its limit could
// have produced by the given time.
var ErrImplausibleState = errors.New("algo: implausible state")

// Plausible returns nil if s could be the state of a key checked only under l
// at times no later than now+skew (Unix ns; skew >= 0 absorbs the clock
// difference between the node that made s and the one calling Plausible).
// The node calls it on every key state a peer hands off, which it treats as
// untrusted input: a state that would deny a key longer than its limit allows
// (the attack of an injected GCRA TAT a year ahead) is refused instead of
// installed.
//
// The rules, per Kind (a zero State is always plausible):
//   - s holds l.Kind;
//   - GCRA: TAT <= now + τ + skew, τ = T·(Burst+1), T = Period/Limit: a key
//     cannot owe more than its burst capacity;
//   - TokenBucket: debt <= Burst·Period (an empty bucket) and the last refill
//     time <= now + skew;
//   - FixedWindow: count <= Limit, window start <= now + skew;
//   - SlidingWindowCounter: previous and current counts <= Limit, window start
//     <= now + skew;
//   - SlidingWindowLog: at most Limit entries, each <= now + skew;
//   - BucketedSlidingWindow: every bucket count >= 0, their sum <= Limit, the
//     newest bucket starting no later than now + skew.
//
// Errors wrap ErrImplausibleState naming the field and both values, or
// ErrInvalidLimit for an invalid l, or a negative skew or a now outside
// [MinTime, MaxTime].
func (s *State) Plausible(now, skew int64, l Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if err := validateNow(now); err != nil {
		return err
	}
	if skew < 0 || skew > int64(MaxDuration) {
		return limitError("skew", fmt.Sprintf("%d ns", skew), fmt.Sprintf("must be in 0..%d ns", int64(MaxDuration)))
	}
	if s.kind == 0 {
		return nil
	}
	if s.kind != l.Kind {
		return fmt.Errorf("%w: state of %v for a limit of %v", ErrImplausibleState, s.kind, l.Kind)
	}
	// latest is the latest time a state may record; now+skew cannot overflow
	// (now <= MaxTime, skew <= MaxDuration, and MaxTime+MaxDuration fits).
	latest := now + skew
	after := func(field string, t int64) error {
		if t > latest {
			return fmt.Errorf("%w: %v %s %d ns is after now %d + skew %d", ErrImplausibleState, s.kind, field, t, now, skew)
		}
		return nil
	}
	above := func(field string, v, max int64) error {
		if v > max || v < 0 {
			return fmt.Errorf("%w: %v %s %d is outside 0..%d", ErrImplausibleState, s.kind, field, v, max)
		}
		return nil
	}
	switch s.kind {
	case GCRA:
		t := int64(l.Period) / l.Limit
		tau := t * (l.Burst + 1) // fits: Limit.Validate checks it
		return after("TAT minus τ", MinTime+s.a-tau)
	case TokenBucket:
		if err := above("debt", s.a, l.Burst*int64(l.Period)); err != nil {
			return err
		}
		return after("last refill", MinTime+s.b)
	case FixedWindow:
		if err := above("count", s.b, l.Limit); err != nil {
			return err
		}
		return after("window start", s.a)
	case SlidingWindowCounter:
		if err := above("previous count", s.b, l.Limit); err != nil {
			return err
		}
		if err := above("current count", s.c, l.Limit); err != nil {
			return err
		}
		return after("window start", s.a)
	case SlidingWindowLog:
		if s.log == nil {
			return nil
		}
		lg := s.log
		if err := above("entries", int64(lg.n), l.Limit); err != nil {
			return err
		}
		for i := int32(0); i < lg.n; i++ {
			if err := after("entry", lg.buf[(int(lg.head)+int(i))%len(lg.buf)]); err != nil {
				return err
			}
		}
		return nil
	case BucketedSlidingWindow:
		bw := s.bw
		if bw == nil {
			return nil
		}
		var sum int64
		for _, c := range bw.counts {
			if err := above("bucket count", c, l.Limit); err != nil {
				return err
			}
			if c > l.Limit-sum { // sum+c > Limit, without overflowing
				return fmt.Errorf("%w: %v hits in the window exceed the limit %d", ErrImplausibleState, s.kind, l.Limit)
			}
			sum += c
		}
		if bw.width < 0 || (bw.width > 0 && (bw.head < 0 || bw.head > latest/bw.width)) {
			return fmt.Errorf("%w: %v newest bucket %d of width %d ns starts after now %d + skew %d", ErrImplausibleState, s.kind, bw.head, bw.width, now, skew)
		}
		return nil
	}
	return fmt.Errorf("%w: kind %v has no plausibility rule", ErrImplausibleState, s.kind)
}
