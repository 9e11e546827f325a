package peerinput

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/transport"
)

// ErrRefusedState wraps transport.ErrInvalidCheck (the sender sees
// InvalidArgument) and is wrapped by the error of every peer key state or
// ban state refused; node re-exports it as node.ErrRefusedState.
var ErrRefusedState = fmt.Errorf("%w: refused key state", transport.ErrInvalidCheck)

// StateBounds are the bounds a peer's key state is judged by (the node's
// Config fields of the same names).
type StateBounds struct {
	// MaxPeriod and MaxLimit are the maxima of the state's Limit (see Within).
	MaxPeriod time.Duration
	MaxLimit  int64
	// MaxPeerClockSkew is how far ahead of this node's clock a state's
	// times may be.
	MaxPeerClockSkew time.Duration
	// AcceptCallerTimestamps allows states on a caller's clock.
	AcceptCallerTimestamps bool
}

// CheckKeyState decodes ks's state into st and validates it as untrusted
// input at wall (Unix ns, this node's clock): its Limit valid and within the
// maxima, its state decodable, not after wall plus the skew (a state on a
// caller's clock is judged at its own latest time, if caller timestamps are
// accepted at all) and plausible under its Limit. The error is the Limit's
// own *algo.InputError when invalid, else wraps ErrRefusedState.
func CheckKeyState(ks transport.KeyState, st *algo.State, wall int64, b StateBounds) error {
	if err := ks.Limit.Validate(); err != nil {
		return err
	}
	if err := Within(ks.Limit, b.MaxPeriod, b.MaxLimit); err != nil {
		return fmt.Errorf("%w: key %q: %w", ErrRefusedState, ks.Key, err)
	}
	if err := st.UnmarshalBinary(ks.State); err != nil {
		return fmt.Errorf("%w: key %q: %w", ErrRefusedState, ks.Key, err)
	}
	skew := int64(b.MaxPeerClockSkew)
	now := wall
	switch {
	case ks.CallerClock && !b.AcceptCallerTimestamps:
		return fmt.Errorf("%w: key %q: state on a caller's clock, and AcceptCallerTimestamps is off", ErrRefusedState, ks.Key)
	case ks.CallerClock:
		// Checks on caller timestamps (replays) may run ahead of the wall clock,
		// as this node itself would accept them: the state is checked against its
		// own latest time.
		now = max(wall, ks.LastNow)
	case ks.LastNow > wall+skew:
		return fmt.Errorf("%w: key %q: last check at %d ns is after now %d + skew %d", ErrRefusedState, ks.Key, ks.LastNow, wall, skew)
	}
	if err := st.Plausible(now, skew, ks.Limit); err != nil {
		return fmt.Errorf("%w: key %q: %w", ErrRefusedState, ks.Key, err)
	}
	return nil
}

// CheckBanState returns nil if no denial of ps is after wall (Unix ns, this
// node's clock) plus skew, else an error wrapping ErrRefusedState.
func CheckBanState(ps transport.PenaltyState, wall int64, skew time.Duration) error {
	for _, t := range ps.Denials {
		if t > wall+int64(skew) {
			return fmt.Errorf("%w: ban state: a denial at %d ns is after now %d + skew %v", ErrRefusedState, t, wall, skew)
		}
	}
	return nil
}

// Batch is a transfer batch's verdict (see CheckBatch).
type Batch struct {
	// States holds the decoded states, one per state of the batch.
	States []algo.State
	// Bad and BadPen mark the states and ban states refused (nil: none was).
	Bad, BadPen []bool
	// Wall is the time (Unix ns, this node's clock) they were judged at.
	Wall int64
}

// RefusedAt reports whether state i of the batch was refused.
func (cb *Batch) RefusedAt(i int) bool { return cb.Bad != nil && cb.Bad[i] }

// PenRefusedAt reports whether ban state i of the batch was refused.
func (cb *Batch) PenRefusedAt(i int) bool { return cb.BadPen != nil && cb.BadPen[i] }

// CheckBatch judges every state (CheckKeyState) and ban state
// (CheckBanState) of b at wall by sb, and calls refuse with the key and the
// error of each one refused. It does not judge the batch's sender.
func CheckBatch(b transport.TransferBatch, wall int64, sb StateBounds, refuse func(key string, err error)) Batch {
	cb := Batch{Wall: wall, States: make([]algo.State, len(b.States))}
	for i, ks := range b.States {
		if err := CheckKeyState(ks, &cb.States[i], wall, sb); err != nil {
			if cb.Bad == nil {
				cb.Bad = make([]bool, len(b.States))
			}
			cb.Bad[i] = true
			refuse(ks.Key, err)
		}
	}
	for i, ps := range b.Penalties {
		if err := CheckBanState(ps, wall, sb.MaxPeerClockSkew); err != nil {
			if cb.BadPen == nil {
				cb.BadPen = make([]bool, len(b.Penalties))
			}
			cb.BadPen[i] = true
			refuse(ps.Key, err)
		}
	}
	return cb
}
