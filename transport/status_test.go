package transport

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/algo"
)

// fullErr is a handler's full-table error: a client message and a retry delay.
type fullErr struct{ d time.Duration }

func (e fullErr) Error() string             { return "node: too many keys: key table full" }
func (e fullErr) Message() string           { return "key table full: this node holds 3 keys" }
func (e fullErr) RetryDelay() time.Duration { return e.d }
func retryInfo(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// TestStatusClasses: a handler's permission and full-table errors reach a
// client as PermissionDenied and ResourceExhausted (with RetryInfo) with
// their client message, whole or per item of a batch, and a client reads
// them back as ErrPermissionDenied and ErrResourceExhausted.
func TestStatusClasses(t *testing.T) {
	t.Parallel()
	full := fmt.Errorf("%w: %w", ErrResourceExhausted, fullErr{5 * time.Second})
	denied := fmt.Errorf("%w: permission denied: credential \"a\" may not", ErrPermissionDenied)
	for _, tc := range []struct {
		err   error
		code  codes.Code
		msg   string
		retry time.Duration
		item  Code
		back  error
	}{
		{full, codes.ResourceExhausted, "key table full: this node holds 3 keys", 5 * time.Second, CodeResourceExhausted, ErrResourceExhausted},
		{denied, codes.PermissionDenied, denied.Error(), 0, CodePermissionDenied, ErrPermissionDenied},
	} {
		st, _ := status.FromError(clientStatus(tc.err))
		if st.Code() != tc.code || st.Message() != tc.msg || retryInfo(st) != tc.retry {
			t.Errorf("clientStatus(%v): got %v %q retry %v, want %v %q retry %v", tc.err, st.Code(), st.Message(), retryInfo(st), tc.code, tc.msg, tc.retry)
		}
		r := itemResultFromError(tc.err)
		if r.Code != tc.item || r.Message != tc.msg || r.Decision != (algo.Decision{RetryAfter: tc.retry}) {
			t.Errorf("itemResultFromError(%v): got %+v, want %v %q retry %v", tc.err, r, tc.item, tc.msg, tc.retry)
		}
		st2, _ := status.FromError(statusFromResult(r))
		if st2.Code() != tc.code || retryInfo(st2) != tc.retry {
			t.Errorf("statusFromResult(%+v): got %v retry %v, want %v retry %v", r, st2.Code(), retryInfo(st2), tc.code, tc.retry)
		}
		if back := errorFromStatus("check at n1", st.Err()); !errors.Is(back, tc.back) {
			t.Errorf("errorFromStatus(%v): got %v, want %v", st.Err(), back, tc.back)
		}
	}
}
