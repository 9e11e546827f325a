package algo

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Reservations: book hits now, act on them later (x/time/rate's ReserveN,
// Reservation.Delay and CancelAt, Guava's acquire).
//
// A reservation of hits with a maximum wait maxWait is a Take under a
// derived Limit, Limit.Reserving(maxWait), whose Burst is larger by
// k = floor(maxWait·Limit/Period) hits: the hits the limit refills within
// maxWait. For GCRA that lets new_tat = max(tat, now) + T·hits run up to
// now + τ + k·T, and the hits act at new_tat − τ, so the delay is
// max(0, new_tat − τ − now); for TokenBucket it lets the bucket go down to
// −k tokens, and the hits act when the bucket is back at 0. A reservation
// whose delay would exceed k emission intervals (which is at most maxWait)
// changes nothing and is not OK. maxWait is counted in whole emission
// intervals: a wait of 2.5 intervals books at most 2 intervals ahead.
//
// Because a booking is a Take, everything that holds for the state of a
// Take holds for it: the state stays one TAT (GCRA) or debt and refill time
// (TokenBucket), a later plain check under the Limit waits out the booked
// debt as it waits out the debt of a larger Limit (see the package doc), and
// the state is plausible under the derived Limit (State.Plausible), which is
// the Limit a store records for it.
//
// The window algorithms (FixedWindow, SlidingWindowCounter,
// SlidingWindowLog, BucketedSlidingWindow) do not support reservations and
// return an error wrapping ErrReserveUnsupported: their states count a hit
// in the window of the time it is recorded, so a hit booked to act later
// would have to be recorded in a future window, which none of them can hold
// (a fixed or sliding counter keeps only the current and previous windows;
// the log and the buckets refuse entries after now). Booking it in the
// current window instead would let the hit act in a window that never
// counted it, and break the window's bound. GCRA with Burst = Limit−1 and
// T = Period/Limit gives the same long-run rate with even spacing.

// ErrReserveUnsupported is returned, wrapped with the algorithm's name, by
// Limit.Reserving, State.Reserve and State.Cancel for an algorithm that
// cannot book hits ahead: every window algorithm ("algo: reservations are
// not supported for sliding_window_log").
var ErrReserveUnsupported = errors.New("algo: reservations are not supported")

// SupportsReserve reports whether k can book hits ahead (GCRA, TokenBucket).
func (k Kind) SupportsReserve() bool { return k == GCRA || k == TokenBucket }

// Reservation is what State.Reserve booked.
type Reservation struct {
	// OK reports whether the hits were booked. A reservation that is not OK
	// changed nothing.
	OK bool
	// Hits is the number of hits booked (the hits of the call).
	Hits int64
	// Delay is how long after the now of the call the hits act (ns), in
	// [0, maxWait]; 0 when not OK.
	Delay time.Duration
	// At is the now of the call plus Delay (Unix ns), on the clock of the
	// state: Cancel needs it. 0 when not OK.
	At int64
}

// reserveSlots returns k = floor(maxWait·Limit/Period) (GCRA:
// floor(maxWait/T)), the hits l refills within maxWait, for a validated l
// and maxWait in [0, MaxDuration].
func (l Limit) reserveSlots(maxWait time.Duration) int64 {
	if l.Kind == GCRA {
		return int64(maxWait) / (int64(l.Period) / l.Limit)
	}
	hi, lo := bits.Mul64(uint64(maxWait), uint64(l.Limit))
	if hi >= uint64(l.Period) { // quotient above 2^64
		return MaxHits
	}
	q, _ := bits.Div64(hi, lo, uint64(l.Period))
	return int64(min(q, uint64(MaxHits)))
}

// Reserving returns the Limit under which a Take of l's algorithm books
// hits that act within maxWait (ns) of its now: l with Burst larger by the
// hits l refills within maxWait (see the comment on reservations above).
// maxWait 0 returns l itself, whatever its Kind. Errors: those of
// l.Validate; an *InputError (field "max_wait") wrapping ErrInvalidLimit for
// maxWait outside 0..MaxDuration or a derived Limit that Validate refuses
// (its τ or Burst·Period above MaxDuration), or wrapping
// ErrReserveUnsupported for a maxWait > 0 under a window algorithm.
func (l Limit) Reserving(maxWait time.Duration) (Limit, error) {
	if err := l.Validate(); err != nil {
		return Limit{}, err
	}
	if maxWait < 0 || maxWait > MaxDuration {
		return Limit{}, limitError("max_wait", fmt.Sprintf("%d ns", int64(maxWait)), fmt.Sprintf("must be in 0..%d", int64(MaxDuration)))
	}
	if maxWait == 0 {
		return l, nil
	}
	if !l.Kind.SupportsReserve() {
		return Limit{}, &InputError{Field: "max_wait", Value: fmt.Sprintf("%d ns", int64(maxWait)),
			Allowed: fmt.Sprintf("must be 0: reservations are not supported for %v (a window algorithm counts a hit in the window it is recorded in and cannot book one for a later window); use gcra or token_bucket", l.Kind),
			Err:     ErrReserveUnsupported}
	}
	k := l.reserveSlots(maxWait)
	r := l
	r.Burst += k
	if k > MaxHits || r.Validate() != nil {
		return Limit{}, limitError("max_wait", fmt.Sprintf("%d ns", int64(maxWait)), fmt.Sprintf("books %d hits ahead, more than a %v limit of %d per %v can hold", k, l.Kind, l.Limit, l.Period))
	}
	return r, nil
}

// Reserved turns d, the Decision of a Take of hits under
// l.Reserving(maxWait), into the Decision that Take reports under l and the
// delay after the Take's now at which the hits act (ns, 0 when denied).
// Decision.Limit is l's capacity and Remaining is what is left under l
// (0 while hits are booked ahead); RetryAfter of a denied booking is how
// long until the same booking would be OK; ResetAfter is unchanged. GCRA's
// delay is exact; TokenBucket's is exact when Period is a multiple of Limit,
// else rounded up (it may exceed the exact wait by less than 2 ns, never
// fall short of it).
func (l Limit) Reserved(d Decision, maxWait time.Duration) (Decision, time.Duration) {
	k := l.reserveSlots(maxWait)
	var delay time.Duration
	capacity := l.Burst
	if l.Kind == GCRA {
		capacity = l.Burst + 1
	}
	if d.Allowed && d.Remaining < k {
		// Booked past the capacity of l: the hits act when the state is back
		// at l's capacity.
		if l.Kind == GCRA {
			tau := int64(l.Period) / l.Limit * (l.Burst + 1)
			delay = max(0, d.ResetAfter-time.Duration(tau))
		} else {
			hi, lo := bits.Mul64(uint64(l.Burst), uint64(l.Period))
			full, _ := bits.Div64(hi, lo, uint64(l.Limit)) // floor(Burst·Period/Limit) < 2^62
			delay = max(1, d.ResetAfter-time.Duration(full))
		}
	}
	d.Limit = capacity
	d.Remaining = min(max(d.Remaining-k, 0), capacity)
	return d, delay
}

// Reserve books hits (0 peeks) at now (Unix ns) under l so that they act
// within maxWait (ns) of now, x/time/rate's ReserveN: the Reservation is OK
// and the state records the hits when the wait is at most maxWait (counted
// in whole emission intervals, see Reserving), otherwise nothing changes.
// The Decision is the one a Take under l reports for the booking (Allowed ==
// OK; RetryNever when hits exceed l's capacity, which no wait helps).
// maxWait 0 is Take. Errors: those of Take and Reserving; nothing changes on
// error.
func (s *State) Reserve(now, hits int64, l Limit, maxWait time.Duration) (Decision, Reservation, error) {
	r, err := l.Reserving(maxWait)
	if err != nil {
		return Decision{}, Reservation{}, err
	}
	if err := ValidateHits(hits); err != nil {
		return Decision{}, Reservation{}, err
	}
	capacity := l.Burst
	if l.Kind == GCRA {
		capacity++
	}
	if hits > capacity && l.Kind.SupportsReserve() {
		d, err := s.Take(now, hits, l) // RetryNever, changes nothing
		return d, Reservation{Hits: hits}, err
	}
	d, err := s.Take(now, hits, r)
	if err != nil {
		return Decision{}, Reservation{}, err
	}
	var delay time.Duration
	if maxWait > 0 {
		d, delay = l.Reserved(d, maxWait)
	}
	res := Reservation{OK: d.Allowed && hits > 0, Hits: hits}
	if res.OK {
		res.Delay, res.At = delay, now+int64(delay)
	}
	return d, res, nil
}

// Cancel gives back to s, at now (Unix ns), what r booked under l and has
// not been used, as x/time/rate's CancelAt does: nothing when r is not OK,
// had no delay (its hits acted when booked) or has acted (now >= r.At);
// otherwise r's hits minus the hits booked after r (which keep their slots),
// measured at r.At. GCRA moves the TAT back by T·hits minus the time booked
// after r's slot; TokenBucket refunds hits·Period token·ns minus what was
// booked after r.At (rounded toward refunding less, by under 2 ns of
// refill, when Period is not a multiple of Limit). Cancelling the same Reservation twice gives back twice: the
// caller cancels once. It returns the time the state moved back (ns of
// GCRA's TAT, ns of TokenBucket refill). Errors: those of l.Validate,
// ErrReserveUnsupported for the window algorithms. A state of another Kind
// is left alone.
func (s *State) Cancel(now int64, r Reservation, l Limit) (time.Duration, error) {
	if err := l.Validate(); err != nil {
		return 0, err
	}
	if !l.Kind.SupportsReserve() {
		return 0, fmt.Errorf("%w for %v", ErrReserveUnsupported, l.Kind)
	}
	if !r.OK || r.Delay <= 0 || now >= r.At || s.kind != l.Kind || r.Hits <= 0 || r.Hits > MaxHits {
		return 0, nil
	}
	if l.Kind == GCRA {
		t := int64(l.Period) / l.Limit
		tau := t * (l.Burst + 1)
		slot := t * r.Hits
		if slot > tau {
			return 0, nil // more than the capacity: never booked under l
		}
		// r's slot ended at e = r.At + τ on the TAT's scale (minus MinTime).
		e := uint64(r.At-MinTime) + uint64(tau)
		tat := uint64(s.a)
		var later uint64
		if tat > e {
			later = tat - e
		}
		if later >= uint64(slot) {
			return 0, nil
		}
		give := uint64(slot) - later
		if give > tat {
			give = tat
		}
		s.a = int64(tat - give)
		return time.Duration(give), nil
	}
	// TokenBucket: debt (token·ns) at last; booked after r.At is what the
	// debt at r.At holds above a full bucket's worth.
	p := int64(l.Period)
	full := l.Burst * p
	debt, last := s.a, uint64(s.b)
	at := uint64(r.At - MinTime)
	if at < last || r.Hits > l.Burst {
		return 0, nil // r acts before the latest refill: its slot is unknowable
	}
	hi, lo := bits.Mul64(uint64(l.Limit), at-last)
	refill := int64(MaxDuration) // saturate: the bucket is full by r.At
	if hi == 0 && lo < uint64(MaxDuration) {
		refill = int64(lo)
	}
	later := debt - refill - full
	if p%l.Limit != 0 {
		// Debts are not all multiples of Limit, so r.At may lie up to 2 ns
		// after the exact instant (see Reserved): the exact debt at it is
		// then larger by under 2·Limit; count what lies in those ns as
		// booked after r. (With an integer emission interval Period/Limit
		// every debt and r.At are exact.)
		later += 2*l.Limit - 1
	}
	slot := r.Hits * p
	if later < 0 {
		later = 0
	}
	if later >= slot {
		return 0, nil
	}
	give := min(slot-later, debt)
	s.a = debt - give
	return time.Duration(ceilDiv(give, l.Limit)), nil
}
