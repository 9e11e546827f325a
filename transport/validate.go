package transport

import (
	"errors"
	"fmt"

	"github.com/ringlimit/ringlimit/algo"
)

// ErrInvalidCheck is returned, wrapped with the offending field and value, for a
// Check or KeyState that cannot be sent or decided: empty key, key longer than
// the maximum, hits out of range, invalid limit (then algo.ErrInvalidLimit is
// wrapped too), unknown algorithm, or a batch above the maximum size. The
// servers answer it as codes.InvalidArgument; Client turns that status back into
// an error wrapping ErrInvalidCheck.
var ErrInvalidCheck = errors.New("transport: invalid check")

// ErrUnavailable is returned, wrapped with the cause, when a check could not be
// decided for a reason other than bad input: the peer is down, unreachable or
// shutting down, the deadline passed, the Pool or peer was closed. node applies
// its owner-unreachable policy to it. Handlers wrap it (for example
// fmt.Errorf("%w: node stopped", transport.ErrUnavailable)) to make the servers
// answer codes.Unavailable.
var ErrUnavailable = errors.New("transport: unavailable")

// ErrPermissionDenied is wrapped by a handler's error for a check the caller
// may not make (node.WireError wraps it around a node.PermissionError); the
// servers answer it as codes.PermissionDenied with the error's client
// message (ClientMessage).
var ErrPermissionDenied = errors.New("transport: permission denied")

// ErrResourceExhausted is wrapped by a handler's error for a check that would
// create a new key in a full key table (node.WireError wraps it around a
// node.KeyTableFullError); the servers answer it as codes.ResourceExhausted
// with the error's client message and, when the error has a RetryDelay()
// time.Duration method that returns more than 0, a google.rpc.RetryInfo.
var ErrResourceExhausted = errors.New("transport: resource exhausted")

// DefaultMaxKeyLen is the default maximum key length, in bytes
// (algo.DefaultMaxKeyLen).
const DefaultMaxKeyLen = algo.DefaultMaxKeyLen

// DefaultMaxBatch is the default maximum number of items in one CheckBatch,
// Forward or Transfer RPC.
const DefaultMaxBatch = 1000

// ValidateCheck reports whether c can be decided: a key of 1..maxKeyLen bytes
// (maxKeyLen <= 0 means DefaultMaxKeyLen), hits accepted by algo.ValidateHits
// (0..algo.MaxHits), a CreatedAt in 0..algo.MaxTime Unix ns (0 = owner's
// clock), and a Limit accepted by algo.Limit.Validate. The error wraps
// ErrInvalidCheck, and also algo.ErrInvalidLimit for limit and hits errors, and
// names the field and value. It allocates only when it returns an error.
func ValidateCheck(c Check, maxKeyLen int) error { return c.Validate(maxKeyLen) }

// Validate is ValidateCheck(*c, maxKeyLen) without copying c.
func (c *Check) Validate(maxKeyLen int) error {
	if err := validateKey(c.Key, maxKeyLen); err != nil {
		return err
	}
	if err := algo.ValidateHits(c.Hits); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidCheck, err)
	}
	if err := algo.ValidateCreatedAt(c.CreatedAt, ErrInvalidCheck); err != nil {
		return err
	}
	if err := c.Limit.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidCheck, err)
	}
	return c.Penalty.Validate()
}

// validateKeyState checks what the receiver of a Transfer needs: a valid key
// (or, without one, a key hash) and a valid limit. The state bytes are algo's
// to judge.
func validateKeyState(s KeyState, maxKeyLen int) error {
	if s.Key != "" || s.KeyHash == 0 {
		if err := validateKey(s.Key, maxKeyLen); err != nil {
			return err
		}
	}
	if err := s.Limit.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidCheck, err)
	}
	if s.LogDelta && (s.Limit.Kind != algo.SlidingWindowLog || s.LogAfterCount < 0 || s.LogAfter < 0) {
		return fmt.Errorf("%w: log_delta needs a sliding-window-log limit and log_after_unix_ns, log_after_count >= 0 (have %v, %d, %d)", ErrInvalidCheck, s.Limit.Kind, s.LogAfter, s.LogAfterCount)
	}
	return nil
}

// validateKey is algo.ValidateKey with this package's ErrInvalidCheck.
func validateKey(key string, maxKeyLen int) error {
	return algo.ValidateKey(key, maxKeyLen, ErrInvalidCheck)
}
