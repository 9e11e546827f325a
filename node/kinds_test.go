package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/transport"
)

// TestEveryKindHasAStoreTable: every algorithm of algo's name table is kept
// by the owner's store (step 4 of algo's checklist): a fresh key admits its
// first hit, is counted, and its second check sees the first one.
func TestEveryKindHasAStoreTable(t *testing.T) {
	t.Parallel()
	n := testNode(t, nil)
	ctx := context.Background()
	for i, k := range algo.Kinds() {
		l := algo.Limit{Kind: k, Limit: 1, Period: time.Hour, Burst: 1}
		if k == algo.GCRA {
			l.Burst = 0 // capacity 1, as the others
		}
		key := "kind-" + k.String()
		d, err := n.Allow(ctx, key, l)
		if err != nil || !d.Allowed || d.Route != RouteOwner {
			t.Fatalf("%v: first hit got %+v, %v, want allowed by the owner", k, d, err)
		}
		if d, err = n.Allow(ctx, key, l); err != nil || d.Allowed {
			t.Errorf("%v: second hit got %+v, %v, want denied (the store kept the first)", k, d, err)
		}
		if got := n.Stats().Keys; got != i+1 {
			t.Errorf("%v: got %d keys, want %d", k, got, i+1)
		}
	}
}

// TestClassify: every error of a check sorts into its class by errors.Is,
// whatever wraps it.
func TestClassify(t *testing.T) {
	t.Parallel()
	ie := &InputError{Field: "key", Value: "0 bytes", Allowed: "must be 1..1024 bytes"}
	pe := &PermissionError{Who: `credential "a"`, Forbids: "may only check keys starting with one of its key_prefixes [\"a:\"]"}
	for _, tc := range []struct {
		err  error
		want Class
	}{
		{nil, ClassNone},
		{ie, ClassInvalid},
		{(algo.Limit{}).Validate(), ClassInvalid},
		{callerTimestampError(5), ClassInvalid},
		{refusedByPeer("n2", "too long"), ClassInvalid},
		{ErrStopped, ClassUnavailable},
		{ErrTooManyKeys, ClassFull},
		{&KeyTableFullError{Who: "this node", Text: "holds 3 keys"}, ClassFull},
		{WireError(&KeyTableFullError{Who: "this node", Text: "holds 3 keys"}), ClassFull},
		{WireError(ErrStopped), ClassUnavailable},
		{errors.Join(ErrUnavailable, errors.New("redis down")), ClassUnavailable},
		{context.DeadlineExceeded, ClassTimeout},
		{errors.Join(ErrUnavailable, context.DeadlineExceeded), ClassTimeout},
		{context.Canceled, ClassCanceled},
		{pe, ClassPermission},
		{fmt.Errorf("scope: %w", pe), ClassPermission},
		{WireError(pe), ClassPermission},
		{fmt.Errorf("%w: check at n1: no", transport.ErrPermissionDenied), ClassPermission},
		{errors.New("boom"), ClassInternal},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v): got %v, want %v", tc.err, got, tc.want)
		}
	}
	if got, want := Message(errors.Join(errors.New("ctx"), ie)), "field key value 0 bytes: must be 1..1024 bytes"; got != want {
		t.Errorf("Message: got %q, want %q", got, want)
	}
	if got, want := Message(WireError(pe)), `permission denied: credential "a" may only check keys starting with one of its key_prefixes ["a:"]`; got != want {
		t.Errorf("Message: got %q, want %q", got, want)
	}
	if errors.Is(pe, ErrInvalid) || !errors.Is(WireError(pe), transport.ErrPermissionDenied) {
		t.Errorf("a PermissionError is invalid input or does not reach the wire as permission denied")
	}
}
