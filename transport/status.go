package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/algo"
)

// statusFromError maps a handler or validation error to a gRPC status error:
// invalid input -> InvalidArgument, ErrUnavailable -> Unavailable, context
// errors -> DeadlineExceeded / Canceled, anything else -> Internal. The message
// is the error's text, which names the field for invalid input.
func statusFromError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOfError(err), err.Error())
}

func codeOfError(err error) codes.Code {
	switch {
	case errors.Is(err, ErrInvalidCheck), errors.Is(err, algo.ErrInvalidLimit):
		return codes.InvalidArgument
	case errors.Is(err, ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Internal
}

// itemResultFromError is the per-item form of statusFromError inside batches.
func itemResultFromError(err error) Result {
	if errors.Is(err, ErrInvalidCheck) || errors.Is(err, algo.ErrInvalidLimit) {
		return Result{Code: CodeInvalidArgument, Message: err.Error()}
	}
	return Result{Code: CodeUnavailable, Message: err.Error()}
}

// statusFromResult maps a non-OK Result of a single check to a status error.
func statusFromResult(r Result) error {
	switch r.Code {
	case CodeInvalidArgument:
		return status.Error(codes.InvalidArgument, r.Message)
	case CodeNotOwner:
		return status.Error(codes.Unavailable, "not owner: "+r.Message)
	}
	return status.Error(codes.Unavailable, r.Message)
}

// errorFromStatus maps an RPC error seen by a client to the errors of this
// package: InvalidArgument -> ErrInvalidCheck (and algo.ErrInvalidLimit when
// the server's message says so) carrying the server's message; every other
// failure -> ErrUnavailable wrapping the status error. what names the call
// ("forward to 10.0.0.2:7947").
func errorFromStatus(what string, err error) error {
	st, _ := status.FromError(err)
	if st.Code() == codes.InvalidArgument {
		msg := strings.TrimPrefix(st.Message(), ErrInvalidCheck.Error()+": ")
		return &remoteInvalidError{
			msg:          fmt.Sprintf("%v: %s: %s", ErrInvalidCheck, what, msg),
			invalidLimit: strings.Contains(msg, algo.ErrInvalidLimit.Error()),
		}
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
}

// remoteInvalidError is a server's InvalidArgument answer on the client side:
// it is ErrInvalidCheck, and algo.ErrInvalidLimit when the server's message
// came from algo.
type remoteInvalidError struct {
	msg          string
	invalidLimit bool
}

func (e *remoteInvalidError) Error() string { return e.msg }

func (e *remoteInvalidError) Is(target error) bool {
	return target == ErrInvalidCheck || (e.invalidLimit && target == algo.ErrInvalidLimit)
}
