package transport

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

func TestBatchContextBehavesAsWithDeadline(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "v")

	// No Done: Err follows the clock and the end of the batch, without a timer.
	c := &batchContext{parent: parent, deadline: time.Now().Add(time.Hour)}
	if err := c.Err(); err != nil {
		t.Fatalf("Err before the deadline: got %v, want nil", err)
	}
	if d, ok := c.Deadline(); !ok || !d.Equal(c.deadline) {
		t.Fatalf("Deadline: got %v, %v, want %v, true", d, ok, c.deadline)
	}
	if got := c.Value(ctxKey{}); got != "v" {
		t.Fatalf("Value: got %v, want v", got)
	}
	if !c.end() {
		t.Fatal("end without Done: got false, want true (the context may be reused)")
	}
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after end: got %v, want %v", err, context.Canceled)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done after end is not closed")
	}

	past := &batchContext{parent: parent, deadline: time.Now().Add(-time.Millisecond)}
	if err := past.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err past the deadline: got %v, want %v", err, context.DeadlineExceeded)
	}

	// Done: closed at the deadline; derived contexts see it; Value still works.
	soon := &batchContext{parent: parent, deadline: time.Now().Add(20 * time.Millisecond)}
	defer soon.end()
	child, cancel := context.WithCancel(soon)
	defer cancel()
	recv(t, child.Done(), eventWait, "child of the batch context done at the deadline")
	if err := soon.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err after Done at the deadline: got %v, want %v", err, context.DeadlineExceeded)
	}
	if got := child.Value(ctxKey{}); got != "v" {
		t.Fatalf("Value through a child: got %v, want v", got)
	}
	if soon.end() {
		t.Fatal("end after Done: got true, want false (a derived context refers to it)")
	}

	// The parent's cancellation reaches the batch, with or without Done.
	pctx, pcancel := context.WithCancel(parent)
	a := &batchContext{parent: pctx}
	b := &batchContext{parent: pctx}
	defer a.end()
	defer b.end()
	done := a.Done()
	pcancel()
	recv(t, done, eventWait, "batch context done when its parent is cancelled")
	if err := b.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after the parent's cancel: got %v, want %v", err, context.Canceled)
	}
	if _, ok := b.Deadline(); ok {
		t.Fatal("Deadline without one: got ok, want none")
	}
}
