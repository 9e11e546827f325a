package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/transport"
)

// This file is the library's vocabulary: what a check is, what answers it,
// and how its errors sort. Front doors (HTTP, gRPC, RESP, RLS, middleware,
// the CLI) speak these words; package transport has wire types of its own,
// which node converts at its boundary (see wire.go).

// Check is one rate-limit check.
type Check struct {
	// Key identifies the limited subject; 1..Config.MaxKeyLen bytes (default
	// algo.DefaultMaxKeyLen, 1024).
	Key string
	// Limit is the policy, validated by algo.Limit.Validate.
	Limit algo.Limit
	// Hits to take, 0..algo.MaxHits; 0 peeks.
	Hits int64
	// CreatedAt is the caller's timestamp (Unix ns) used instead of the
	// owner's clock, or 0 for the owner's clock; honoured only with
	// Config.AcceptCallerTimestamps (else ErrCallerTimestamp).
	CreatedAt int64
	// Penalty is the key's ban rule, applied on the owner; zero = none.
	Penalty Penalty
	// MaxWait, when > 0, makes the check wait instead of fail (GCRA and
	// TokenBucket only): the owner books the hits to act within MaxWait (ns,
	// 0..MaxWait, 24 h) of its now, and Node.Check sleeps until they may act
	// and returns the Decision allowed, with Delay the time slept. The wait
	// is bounded by ctx's deadline too; a booking that cannot act in time is
	// denied at once with nothing consumed. See Node.Reserve and Node.WaitN.
	MaxWait time.Duration
	// cancelAt, when not 0, makes the check give back a booking of Hits
	// whose owner-clock act time it is (Reservation.Cancel).
	cancelAt int64
}

// Validate reports whether c can be decided: a key of 1..maxKeyLen bytes
// (maxKeyLen <= 0 means algo.DefaultMaxKeyLen), hits in 0..algo.MaxHits, a
// CreatedAt in 0..algo.MaxTime, a Limit accepted by algo.Limit.Validate, a
// MaxWait in 0..MaxWait (0 under a window algorithm) and a valid Penalty. The error is an *InputError naming the field, its value and
// what is allowed (also algo.ErrInvalidLimit for limit and hits errors). It is
// the one validation every front door gets, through Node.Check. It allocates
// only when it returns an error.
func (c *Check) Validate(maxKeyLen int) error {
	if err := algo.ValidateKey(c.Key, maxKeyLen, nil); err != nil {
		return err
	}
	if err := algo.ValidateHits(c.Hits); err != nil {
		return err
	}
	if err := algo.ValidateCreatedAt(c.CreatedAt, nil); err != nil {
		return err
	}
	if err := c.Limit.Validate(); err != nil {
		return err
	}
	if c.MaxWait != 0 {
		if err := c.validateWait(); err != nil {
			return err
		}
	}
	if c.Penalty.IsZero() { // the usual check: no call
		return nil
	}
	return c.Penalty.Validate()
}

// Route says which path decided a check: RouteOwner (this node owns the key),
// RouteForwarded (its owner decided), RouteBackup (the owner was unreachable
// and the key's backup decided on its replica, see Config.Replication) or
// RouteFallback (neither was reachable and Config.OwnerUnreachable decided)
// or RouteCachedDenial (this node answered from a denial the owner gave it
// earlier, see Config.DeniedCacheSize) or RouteLease (this node admitted the
// check from capacity the owner lent it, see Config.Lease).
type Route uint8

// The routes a Decision reports.
const (
	// RouteUnknown is the zero value; it never appears in a Decision.
	RouteUnknown Route = iota
	// RouteOwner: the node that received the check owns the key and decided it.
	RouteOwner
	// RouteForwarded: the check was forwarded to the owner, which decided it.
	RouteForwarded
	// RouteFallback: the owner was unreachable; Config.OwnerUnreachable decided.
	RouteFallback
	// RouteBackup: the owner was unreachable and the key's backup decided it
	// on its replica.
	RouteBackup
	// RouteCachedDenial: the check was denied by this node, without a
	// forward, from a denial the key's owner gave it earlier for the same key
	// and limit, which still holds (Config.DeniedCacheSize). The Decision is
	// the owner's with RetryAfter and ResetAfter counted down, Owner the
	// member that gave the denial.
	RouteCachedDenial
	// RouteLease: the check was admitted by this node, without a forward,
	// from a capacity lease: hits of the key's capacity that its owner had
	// already taken from the key's state and lent to this node (Config.Lease).
	// Remaining is what is left of the lease, ResetAfter the time until the
	// lease ends; Owner is the member that lent it.
	RouteLease
)

// String returns "owner", "forwarded", "fallback", "backup", "cached_denial",
// "lease" or "unknown" (the zero Route), the names used in metrics, logs and the
// doors' answers: transport's names, which the wire conversion keeps equal.
func (r Route) String() string { return transport.Route(r).String() }

// Decision is the outcome of a check: the algorithm's Decision, the path that
// decided it, and the name of the member that decided it (this node's name for
// RouteOwner and RouteFallback).
type Decision struct {
	algo.Decision
	Route Route
	Owner string
	// Banned is set when the key's penalty ban decided the check (see
	// AllowPenalized).
	Banned bool
	// Delay is, for an allowed check with a MaxWait, how long the hits
	// waited for their slot (ns; Node.Check has slept it, a Reservation
	// reports it); 0 otherwise.
	Delay time.Duration
	// at is, for an allowed booking, the owner-clock instant (Unix ns) its
	// hits act at: what Reservation.Cancel sends back (see At).
	at int64
}

// MaxPenaltyDenials is the largest Penalty.Denials (algo.MaxPenaltyDenials,
// 1024).
const MaxPenaltyDenials = algo.MaxPenaltyDenials

// Penalty is a ban rule carried with a check to its key's owner: after Denials
// denied checks of the key within Within, the owner bans the key for Ban, and
// every check of it is denied until the ban ends, whatever the algorithm says.
// The zero Penalty is none. See AllowPenalized.
type Penalty struct {
	// Denials is the number of denied checks that triggers a ban,
	// 1..MaxPenaltyDenials.
	Denials int64
	// Within is the window the denials are counted in (ns), 1..algo.MaxDuration.
	Within time.Duration
	// Ban is how long the key stays banned (ns), 1..algo.MaxDuration.
	Ban time.Duration
}

// IsZero reports whether p is no penalty.
func (p Penalty) IsZero() bool { return p == Penalty{} }

// Validate returns nil for the zero Penalty or a valid one, else an
// *InputError naming the field ("penalty.denials", "penalty.within",
// "penalty.ban").
func (p Penalty) Validate() error { return algo.ValidatePenalty(p.Denials, p.Within, p.Ban, nil) }

// InputError is the one error type for bad input (algo.InputError): Field,
// Value and Allowed name what was refused, Message is the text every front
// door shows. errors.Is(err, ErrInvalid) matches it.
type InputError = algo.InputError

// Named errors of a check besides ErrStopped and ErrTooManyKeys.
var (
	// ErrInvalid is matched by every error a check returns for bad input (an
	// *InputError, or an owner's refusal of a forwarded check).
	ErrInvalid = algo.ErrInvalidInput
	// ErrUnavailable is matched by errors of a check that the cluster could not
	// decide for a reason other than bad input; packages built on node (the
	// failover limiter, a door's own backend) wrap it to be classified so.
	ErrUnavailable = errors.New("node: unavailable")
	// ErrPermissionDenied is matched by every error of a check that the
	// caller's credential may not make (a *PermissionError: the daemon's
	// client scopes). Retrying the same check with the same credential fails
	// the same way.
	ErrPermissionDenied = errors.New("node: permission denied")
)

// PermissionError is the error of a check (or key operation) outside the
// caller's permissions: Who names the caller, Forbids what its permissions
// forbid. errors.Is(err, ErrPermissionDenied) matches it, and Err (a caller's
// own named error, nil for none) through Unwrap. Classify sorts it as
// ClassPermission.
type PermissionError struct {
	// Who names the caller as the doors show it: a quoted credential name, or
	// "this caller" for an anonymous one.
	Who string
	// Forbids says what was refused, as a sentence fragment after Who ("may
	// only check keys starting [\"billing:\"]").
	Forbids string
	// Err is the named error this refusal is a case of, or nil.
	Err error
}

// Message is the error's text as a client sees it: "permission denied: <Who>
// <Forbids>".
func (e *PermissionError) Message() string { return "permission denied: " + e.Who + " " + e.Forbids }

// Error is Message; Err's text, when set, is in the chain for logs.
func (e *PermissionError) Error() string {
	if e.Err != nil {
		return e.Message() + " (" + e.Err.Error() + ")"
	}
	return e.Message()
}

// Unwrap returns Err.
func (e *PermissionError) Unwrap() error { return e.Err }

// Is reports whether target is ErrPermissionDenied.
func (e *PermissionError) Is(target error) bool { return target == ErrPermissionDenied }

// Class sorts an error of a check for a front door, which maps each class to
// its own answer (an HTTP status, a gRPC code, a RESP error) with one small
// table.
type Class uint8

// The classes of Classify.
const (
	// ClassNone: no error.
	ClassNone Class = iota
	// ClassInvalid: bad input (ErrInvalid, algo.ErrInvalidLimit); Message
	// names the field. Retrying the same check fails the same way.
	ClassInvalid
	// ClassUnavailable: the node is stopping or stopped, or the cluster
	// could not decide (ErrUnavailable). Another node or a later retry may
	// succeed.
	ClassUnavailable
	// ClassTimeout: the caller's deadline passed (context.DeadlineExceeded).
	ClassTimeout
	// ClassCanceled: the caller gave up (context.Canceled).
	ClassCanceled
	// ClassPermission: the caller's credential may not make this check
	// (ErrPermissionDenied, a *PermissionError); Message names what its
	// permissions forbid. Retrying with the same credential fails the same way.
	ClassPermission
	// ClassFull: the check would create a new key in a full key table
	// (ErrTooManyKeys, a *KeyTableFullError: the node's MaxKeys, or a daemon
	// credential's max_keys); Message names the bound, RetryAfter says when
	// the earliest key frees room, when known. Checks of keys already held
	// still pass.
	ClassFull
	// ClassInternal: anything else, a bug.
	ClassInternal
)

// String returns "none", "invalid", "unavailable", "timeout", "canceled",
// "permission", "full" or "internal".
func (c Class) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassInvalid:
		return "invalid"
	case ClassUnavailable:
		return "unavailable"
	case ClassTimeout:
		return "timeout"
	case ClassCanceled:
		return "canceled"
	case ClassPermission:
		return "permission"
	case ClassFull:
		return "full"
	}
	return "internal"
}

// Classify sorts err, returned by a check of this package or of a package
// built on it, into its Class by errors.Is (never by its text). A context
// error wins over unavailability: an error that wraps both (a forward cut
// short by the caller's deadline) is a timeout.
func Classify(err error) Class {
	switch {
	case err == nil:
		return ClassNone
	case errors.Is(err, ErrPermissionDenied), errors.Is(err, transport.ErrPermissionDenied):
		return ClassPermission
	case errors.Is(err, ErrInvalid), errors.Is(err, algo.ErrInvalidLimit), errors.Is(err, transport.ErrInvalidCheck):
		return ClassInvalid
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	case errors.Is(err, context.Canceled):
		return ClassCanceled
	case errors.Is(err, ErrTooManyKeys), errors.Is(err, transport.ErrResourceExhausted):
		return ClassFull
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrStopped), errors.Is(err, transport.ErrUnavailable):
		return ClassUnavailable
	}
	return ClassInternal
}

// RetryAfter is how long the caller should wait before the same check may
// pass, for an error of ClassFull: the *KeyTableFullError's RetryAfter in its
// chain (0 when unknown, and for every other error). Front doors answer it
// as HTTP Retry-After and gRPC RetryInfo.
func RetryAfter(err error) time.Duration {
	var fe *KeyTableFullError
	if errors.As(err, &fe) {
		return max(fe.RetryAfter, 0)
	}
	return 0
}

// Message is err's text as a client of a front door sees it: the Message of
// the first error in its chain that has one (an *InputError: field, value,
// allowed; a *PermissionError; no package prefixes), else the error's text.
func Message(err error) string {
	var m interface{ Message() string }
	if errors.As(err, &m) {
		return m.Message()
	}
	return err.Error()
}

// callerTimestampError is the error of a check with a CreatedAt on a node
// that refuses caller timestamps.
func callerTimestampError(ns int64) error {
	return &InputError{Field: "created_at", Value: fmt.Sprintf("%d ns", ns), Allowed: "must be 0: this node refuses caller timestamps (AcceptCallerTimestamps is off)", Err: ErrCallerTimestamp}
}
