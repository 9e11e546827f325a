package algo

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidInput is matched (errors.Is) by every *InputError: any input of a
// check that the library refuses, whichever layer found it. ErrInvalidLimit
// (and a caller's own named errors) narrow it through InputError.Err.
var ErrInvalidInput = errors.New("ringlimit: invalid input")

// InputError is the one error type for bad input across ringlimit: algo's
// limit, hits and time rules, and the key, created-at and penalty rules that
// node and transport add with the functions below. Every front door shows
// Message (the same text on HTTP, gRPC, RESP, RLS and the CLI); Error adds
// the named error's prefix for logs.
type InputError struct {
	// Field names the input as the doors spell it: "algorithm", "limit",
	// "period", "burst", "hits", "now", "key", "created_at",
	// "penalty.denials", "penalty.within", "penalty.ban", or a door's own
	// argument name (CLThrottle's "max_burst", "count", "quantity").
	Field string
	// Value is the offending value as text, with its unit ("0 ns", "-1",
	// "1025 bytes").
	Value string
	// Allowed says what would be accepted ("must be in 1..1024 bytes").
	Allowed string
	// Err is the named error this input error is a case of, matched by
	// errors.Is through Unwrap: ErrInvalidLimit for algo's own rules, or a
	// caller's (node.ErrCallerTimestamp, transport.ErrInvalidCheck); nil for
	// none beyond ErrInvalidInput.
	Err error
}

// Message is the error's text as a client sees it: "field <Field> value
// <Value>: <Allowed>", without any package prefix.
func (e *InputError) Message() string {
	return "field " + e.Field + " value " + e.Value + ": " + e.Allowed
}

// Error is Message prefixed by Err's text (or ErrInvalidInput's).
func (e *InputError) Error() string {
	prefix := ErrInvalidInput
	if e.Err != nil {
		prefix = e.Err
	}
	return prefix.Error() + ": " + e.Message()
}

// Unwrap returns Err.
func (e *InputError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidInput (Err is matched through Unwrap).
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

// limitError returns an *InputError wrapping ErrInvalidLimit.
func limitError(field, value, allowed string) error {
	return &InputError{Field: field, Value: value, Allowed: allowed, Err: ErrInvalidLimit}
}

// DefaultMaxKeyLen is the default maximum key length, in bytes (1024).
const DefaultMaxKeyLen = 1024

// MaxPenaltyDenials is the largest penalty denial count (1024): the owner
// keeps the times of a key's last denials, 8 bytes each.
const MaxPenaltyDenials = 1024

// ValidateKey reports whether key is 1..maxKeyLen bytes (maxKeyLen <= 0 means
// DefaultMaxKeyLen). The error is an *InputError (field "key") wrapping
// sentinel (nil for none); it allocates only when it returns an error.
func ValidateKey(key string, maxKeyLen int, sentinel error) error {
	if uint(len(key)-1) < uint(maxKeyLen) { // 1..maxKeyLen bytes
		return nil
	}
	return validateKeySlow(key, maxKeyLen, sentinel)
}

// validateKeySlow is ValidateKey for maxKeyLen <= 0 or a key it refuses,
// apart so that ValidateKey is inlined.
func validateKeySlow(key string, maxKeyLen int, sentinel error) error {
	if maxKeyLen <= 0 {
		maxKeyLen = DefaultMaxKeyLen
	}
	if key != "" && len(key) <= maxKeyLen {
		return nil
	}
	return &InputError{Field: "key", Value: fmt.Sprintf("%d bytes", len(key)), Allowed: fmt.Sprintf("must be 1..%d bytes", maxKeyLen), Err: sentinel}
}

// ValidateCreatedAt reports whether a check's caller timestamp (Unix ns) is
// in 0..MaxTime (0 = the owner's clock). The error is an *InputError (field
// "created_at") wrapping sentinel.
func ValidateCreatedAt(ns int64, sentinel error) error {
	if ns < 0 || ns > MaxTime {
		return createdAtError(ns, sentinel)
	}
	return nil
}

// createdAtError is ValidateCreatedAt's error, apart so that it is inlined.
func createdAtError(ns int64, sentinel error) error {
	return &InputError{Field: "created_at", Value: fmt.Sprintf("%d ns", ns), Allowed: fmt.Sprintf("must be in 0..%d ns (0 = owner's clock)", MaxTime), Err: sentinel}
}

// ValidatePenalty reports whether a ban rule is none (all three zero) or has
// denials in 1..MaxPenaltyDenials and within and ban in 1..MaxDuration ns.
// The error is an *InputError (field "penalty.denials", "penalty.within" or
// "penalty.ban") wrapping sentinel.
func ValidatePenalty(denials int64, within, ban time.Duration, sentinel error) error {
	if denials == 0 && within == 0 && ban == 0 {
		return nil
	}
	return penaltyError(denials, within, ban, sentinel)
}

// penaltyError is ValidatePenalty for a penalty that is not none, apart so
// that ValidatePenalty is inlined.
func penaltyError(denials int64, within, ban time.Duration, sentinel error) error {
	switch {
	case denials < 1 || denials > MaxPenaltyDenials:
		return &InputError{Field: "penalty.denials", Value: fmt.Sprint(denials), Allowed: fmt.Sprintf("must be in 1..%d", MaxPenaltyDenials), Err: sentinel}
	case within <= 0 || within > MaxDuration:
		return &InputError{Field: "penalty.within", Value: fmt.Sprintf("%d ns", int64(within)), Allowed: fmt.Sprintf("must be in 1..%d ns", int64(MaxDuration)), Err: sentinel}
	case ban <= 0 || ban > MaxDuration:
		return &InputError{Field: "penalty.ban", Value: fmt.Sprintf("%d ns", int64(ban)), Allowed: fmt.Sprintf("must be in 1..%d ns", int64(MaxDuration)), Err: sentinel}
	}
	return nil
}
