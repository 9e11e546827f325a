package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/algo"
)

// ClientMessage is an error's text as a client of the public front doors sees
// it (gRPC Limiter, HTTP, RESP, the CLI): the Message of the first error in
// its chain that has a Message method (an *algo.InputError's field, value and
// allowed range; node's permission and full-table errors), without package
// prefixes, which stay in the logs; else the error's text.
func ClientMessage(err error) string {
	var m interface{ Message() string }
	if errors.As(err, &m) {
		return m.Message()
	}
	return err.Error()
}

// The google.rpc.ErrorInfo (domain "ringlimit") that an InvalidArgument
// status carries when its cause is an *algo.InputError: reason
// INVALID_LIMIT when it is algo.ErrInvalidLimit too, INVALID_INPUT otherwise,
// with the field, value and allowed range as metadata, so that a client
// rebuilds the same typed error (errorFromStatus) without reading the text.
const (
	reasonInvalidLimit = "INVALID_LIMIT"
	reasonInvalidInput = "INVALID_INPUT"
	errorDomain        = "ringlimit"
)

// statusOf maps err to a gRPC status: the code of codeOfError, the text of
// ClientMessage when client is set (the Limiter service) or the error's whole
// text (the Peer service, whose client keeps the prefixes in its logs), and the
// ErrorInfo above for an input error.
func statusOf(err error, client bool) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	msg := err.Error()
	if client {
		msg = ClientMessage(err)
	}
	st := status.New(codeOfError(err), msg)
	var ie *algo.InputError
	if st.Code() == codes.InvalidArgument && errors.As(err, &ie) {
		reason := reasonInvalidInput
		if errors.Is(err, algo.ErrInvalidLimit) {
			reason = reasonInvalidLimit
		}
		info := &errdetails.ErrorInfo{Reason: reason, Domain: errorDomain, Metadata: map[string]string{"field": ie.Field, "value": ie.Value, "allowed": ie.Allowed}}
		if withInfo, derr := st.WithDetails(info); derr == nil {
			st = withInfo
		}
	}
	if d := RetryDelay(err); st.Code() == codes.ResourceExhausted && d > 0 {
		if withInfo, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); derr == nil {
			st = withInfo
		}
	}
	return st
}

// RetryDelay returns the RetryDelay() of the first error in err's chain that
// has that method (node.KeyTableFullError: when the earliest key frees room),
// or 0.
func RetryDelay(err error) time.Duration {
	var r interface{ RetryDelay() time.Duration }
	if errors.As(err, &r) {
		return max(r.RetryDelay(), 0)
	}
	return 0
}

// clientStatus is statusOf for the Limiter service.
func clientStatus(err error) error {
	if err == nil {
		return nil
	}
	return statusOf(err, true).Err()
}

// inputInfo returns the ErrorInfo of an InvalidArgument status built by
// statusOf, or nil.
func inputInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain && (info.GetReason() == reasonInvalidLimit || info.GetReason() == reasonInvalidInput) {
			return info
		}
	}
	return nil
}

// statusFromError maps a handler or validation error to a gRPC status error:
// invalid input -> InvalidArgument, ErrPermissionDenied -> PermissionDenied,
// ErrResourceExhausted -> ResourceExhausted, ErrUnavailable -> Unavailable, context
// errors -> DeadlineExceeded / Canceled, anything else -> Internal. The message
// is the error's text, which names the field for invalid input.
func statusFromError(err error) error {
	if err == nil {
		return nil
	}
	return statusOf(err, false).Err()
}

func codeOfError(err error) codes.Code {
	switch {
	case errors.Is(err, ErrInvalidCheck), errors.Is(err, algo.ErrInvalidInput), errors.Is(err, algo.ErrInvalidLimit):
		return codes.InvalidArgument
	case errors.Is(err, ErrPermissionDenied):
		return codes.PermissionDenied
	case errors.Is(err, ErrResourceExhausted):
		return codes.ResourceExhausted
	case errors.Is(err, ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Internal
}

// itemResultFromError is the per-item form of clientStatus inside a
// CheckBatch: invalid input -> CodeInvalidArgument, ErrPermissionDenied ->
// CodePermissionDenied, ErrResourceExhausted -> CodeResourceExhausted (with
// RetryDelay as Decision.RetryAfter), anything else -> CodeUnavailable, with
// ClientMessage's text.
func itemResultFromError(err error) Result {
	switch codeOfError(err) {
	case codes.InvalidArgument:
		return Result{Code: CodeInvalidArgument, Message: ClientMessage(err)}
	case codes.PermissionDenied:
		return Result{Code: CodePermissionDenied, Message: ClientMessage(err)}
	case codes.ResourceExhausted:
		return Result{Code: CodeResourceExhausted, Message: ClientMessage(err), Decision: algo.Decision{RetryAfter: RetryDelay(err)}}
	}
	return Result{Code: CodeUnavailable, Message: ClientMessage(err)}
}

// statusFromResult maps a non-OK Result of a single check to a status error.
func statusFromResult(r Result) error {
	switch r.Code {
	case CodeInvalidArgument:
		return status.Error(codes.InvalidArgument, r.Message)
	case CodePermissionDenied:
		return status.Error(codes.PermissionDenied, r.Message)
	case CodeResourceExhausted:
		st := status.New(codes.ResourceExhausted, r.Message)
		if r.Decision.RetryAfter > 0 {
			if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.Decision.RetryAfter)}); err == nil {
				st = withInfo
			}
		}
		return st.Err()
	case CodeNotOwner:
		return status.Error(codes.Unavailable, "not owner: "+r.Message)
	}
	return status.Error(codes.Unavailable, r.Message)
}

// errorFromStatus maps an RPC error seen by a client to the errors of this
// package: InvalidArgument -> an error wrapping ErrInvalidCheck that carries
// the server's message, and, when the status has statusOf's ErrorInfo, the
// *algo.InputError it describes (which is algo.ErrInvalidLimit for reason
// INVALID_LIMIT); PermissionDenied and ResourceExhausted -> an error wrapping
// ErrPermissionDenied or ErrResourceExhausted with the server's message; every other failure -> ErrUnavailable wrapping
// the status error. what names the call ("forward to 10.0.0.2:7947").
func errorFromStatus(what string, err error) error {
	st, _ := status.FromError(err)
	if st.Code() == codes.PermissionDenied {
		return fmt.Errorf("%w: %s: %s", ErrPermissionDenied, what, st.Message())
	}
	if st.Code() == codes.ResourceExhausted {
		return fmt.Errorf("%w: %s: %s", ErrResourceExhausted, what, st.Message())
	}
	if st.Code() != codes.InvalidArgument {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
	}
	if info := inputInfo(st); info != nil {
		md := info.GetMetadata()
		ie := &algo.InputError{Field: md["field"], Value: md["value"], Allowed: md["allowed"]}
		if info.GetReason() == reasonInvalidLimit {
			ie.Err = algo.ErrInvalidLimit
		}
		return fmt.Errorf("%w: %s: %w", ErrInvalidCheck, what, ie)
	}
	return fmt.Errorf("%w: %s: %s", ErrInvalidCheck, what, st.Message())
}
