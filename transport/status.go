package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/algo"
)

// ClientMessage is an error's text as a client of the public front doors sees
// it (gRPC Limiter, HTTP, the CLI): without the package prefixes of
// transport's and algo's named errors ("transport: invalid check: ", "algo:
// invalid limit: ", "transport: unavailable: "), which stay in the logs; what
// remains names the field, its value and what is allowed. The Peer service
// keeps the prefixes (its client maps them back to errors).
func ClientMessage(msg string) string {
	for _, prefix := range []error{ErrInvalidCheck, ErrUnavailable, algo.ErrInvalidLimit} {
		msg = strings.ReplaceAll(msg, prefix.Error()+": ", "")
	}
	return msg
}

// reasonInvalidLimit is the google.rpc.ErrorInfo reason (domain
// "ringlimit") of an InvalidArgument status whose cause is algo.ErrInvalidLimit,
// so that a client can tell it apart once the message lost its prefixes.
const reasonInvalidLimit = "INVALID_LIMIT"

// clientStatus is statusFromError with ClientMessage's text, for the Limiter
// service; an invalid limit also carries ErrorInfo{Reason: INVALID_LIMIT}.
func clientStatus(err error) error {
	if err == nil {
		return nil
	}
	code, msg := codeOfError(err), err.Error()
	if st, ok := status.FromError(err); ok {
		code, msg = st.Code(), st.Message()
	}
	st := status.New(code, ClientMessage(msg))
	if code == codes.InvalidArgument && (errors.Is(err, algo.ErrInvalidLimit) || strings.Contains(msg, algo.ErrInvalidLimit.Error())) {
		if withInfo, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reasonInvalidLimit, Domain: "ringlimit"}); derr == nil {
			st = withInfo
		}
	}
	return st.Err()
}

// hasReason reports whether st carries a google.rpc.ErrorInfo with reason.
func hasReason(st *status.Status, reason string) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == reason {
			return true
		}
	}
	return false
}

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
			invalidLimit: strings.Contains(msg, algo.ErrInvalidLimit.Error()) || hasReason(st, reasonInvalidLimit),
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
