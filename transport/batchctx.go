package transport

import (
	"context"
	"sync"
	"time"
)

// batchContext is the context of one batch of a ForwardStream: the stream's
// context bounded by the deadline the sender gave. It behaves as
// context.WithDeadline(parent, deadline) would, but makes that context (and
// its timer) only when Done is called, which a handler does only when it is
// about to wait; a batch decided without waiting costs no timer. Until then
// Err compares the deadline with the clock.
type batchContext struct {
	parent   context.Context
	deadline time.Time // zero: none

	mu      sync.Mutex
	derived context.Context // made by Done, or nil
	cancel  context.CancelFunc
	ended   bool // the batch was answered: the context is cancelled
}

// Deadline implements context.Context.
func (c *batchContext) Deadline() (time.Time, bool) {
	pd, ok := c.parent.Deadline()
	if c.deadline.IsZero() || (ok && pd.Before(c.deadline)) {
		return pd, ok
	}
	return c.deadline, true
}

// Done implements context.Context.
func (c *batchContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.derived == nil {
		if c.deadline.IsZero() {
			c.derived, c.cancel = context.WithCancel(c.parent)
		} else {
			c.derived, c.cancel = context.WithDeadline(c.parent, c.deadline)
		}
		if c.ended {
			c.cancel()
		}
	}
	return c.derived.Done()
}

// Err implements context.Context.
func (c *batchContext) Err() error {
	c.mu.Lock()
	d, ended := c.derived, c.ended
	c.mu.Unlock()
	if d != nil {
		return d.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	if ended {
		return context.Canceled
	}
	return nil
}

// Value implements context.Context. Once Done has been called it asks the
// derived context, so that contexts derived from this one find their parent's
// cancellation without a goroutine of their own.
func (c *batchContext) Value(key any) any {
	c.mu.Lock()
	d := c.derived
	c.mu.Unlock()
	if d != nil {
		return d.Value(key)
	}
	return c.parent.Value(key)
}

// end cancels the context once the batch is answered, as the cancel of
// context.WithDeadline would. It reports whether Done was never called: then
// no derived context or goroutine can refer to c, and (PeerHandler.Forward
// keeps no ctx beyond its return) c may be reused.
func (c *batchContext) end() (unused bool) {
	c.mu.Lock()
	c.ended = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return cancel == nil
}
