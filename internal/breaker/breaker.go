// Package breaker is the one circuit breaker of ringlimit: the node's
// per-peer breaker (a member a forward failed to reach is skipped for a
// cool-down, then tried again by one check) and node/failover's Redis breaker
// are both a Breaker; Set keys Breakers by name for the node.
//
// A Breaker is Closed (calls go through), Open (calls are refused until
// CoolDown has passed since it opened) or HalfOpen (one call at a time probes;
// SuccessThreshold consecutive successful probes close it, a failure opens it
// again for another CoolDown). FailureThreshold consecutive failures open a
// closed Breaker. The caller judges each outcome itself (failover counts a
// call slower than its SlowCall as a failure while still using its answer),
// and a probe whose caller gave up can be released without an outcome.
//
// Why not sony/gobreaker, the well-kept library: it decides whether a request
// may go under a mutex on every call, and the node asks its breaker on every
// forwarded check (Set.Skip costs one atomic load while every breaker is
// closed); its half-open MaxRequests is both the number of probes allowed at
// once and the successes that close, where failover probes one at a time and
// closes after SuccessThreshold; and the node must open a breaker from
// outside a granted request (a replication send failed) and must not stay
// half-open forever when a granted probe ends with no verdict (the owner
// answered "not owner", the caller's context ended): a probe held for longer
// than CoolDown is given to the next caller here.
package breaker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// State is a Breaker's state.
type State uint8

// The breaker states, in the order of Stats' arrays.
const (
	// Closed: calls go through.
	Closed State = iota
	// Open: calls are refused until CoolDown has passed.
	Open
	// HalfOpen: one call at a time probes, the others are refused.
	HalfOpen
)

// String returns "closed", "open" or "half_open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Config tunes a Breaker. Values below 1 (thresholds) or 0 (CoolDown) are
// taken as 1 and 0; validating the caller's own configuration is the
// caller's job.
type Config struct {
	// FailureThreshold consecutive failures open a closed Breaker (>= 1).
	FailureThreshold int
	// SuccessThreshold consecutive successful probes close a half-open
	// Breaker (>= 1).
	SuccessThreshold int
	// CoolDown is how long an open Breaker refuses before it lets a probe
	// through, and how long a probe may go without an outcome before the next
	// caller gets to probe.
	CoolDown time.Duration
	// OnStateChange, if set, is called after every transition, with the
	// Breaker's lock released, possibly concurrently; it must not block.
	OnStateChange func(from, to State, at time.Time)
}

// Stats is a snapshot of a Breaker's transitions.
type Stats struct {
	// State is the current state.
	State State
	// Switches counts transitions by [from][to].
	Switches [3][3]uint64
	// TimeIn is the total time spent in each state, including the current one.
	TimeIn [3]time.Duration
}

// Breaker is one circuit breaker. Safe for concurrent use; Allow on a closed
// Breaker, and on an open one cooling down, takes no lock.
type Breaker struct {
	cfg Config

	state    atomic.Uint32 // State
	fails    atomic.Int64  // consecutive failures while Closed
	probeNs  atomic.Int64  // when the probe in flight was granted, Unix ns; 0: none
	openedNs atomic.Int64  // when the Breaker last opened, Unix ns

	mu       sync.Mutex
	since    time.Time // entered the current state
	okProbes int
	switches [3][3]uint64
	timeIn   [3]time.Duration
}

// New returns a closed Breaker.
func New(cfg Config) *Breaker {
	cfg.FailureThreshold = max(cfg.FailureThreshold, 1)
	cfg.SuccessThreshold = max(cfg.SuccessThreshold, 1)
	cfg.CoolDown = max(cfg.CoolDown, 0)
	return &Breaker{cfg: cfg, since: time.Now()}
}

// State returns the current state.
func (b *Breaker) State() State { return State(b.state.Load()) }

// Allow reports whether a call may go now (ok) and whether it is the
// half-open probe (probe), moving an open Breaker whose CoolDown has passed
// to HalfOpen. A probe's caller reports its outcome with Done(ok, true), or
// Release when it has none.
func (b *Breaker) Allow() (ok, probe bool) {
	if State(b.state.Load()) == Closed {
		return true, false
	}
	return b.tryProbe(), true
}

// Refusing reports whether Allow would refuse a call now, without taking the
// probe.
func (b *Breaker) Refusing() bool {
	now := time.Now().UnixNano()
	switch State(b.state.Load()) {
	case Open:
		return now-b.openedNs.Load() < int64(b.cfg.CoolDown)
	case HalfOpen:
		p := b.probeNs.Load()
		return p != 0 && now-p < int64(b.cfg.CoolDown)
	}
	return false
}

func (b *Breaker) tryProbe() bool {
	now := time.Now().UnixNano()
	if p := b.probeNs.Load(); p != 0 && now-p < int64(b.cfg.CoolDown) {
		return false
	}
	if State(b.state.Load()) == Open && now-b.openedNs.Load() < int64(b.cfg.CoolDown) {
		return false // cooling down: no lock taken on the open Breaker's hot path
	}
	b.mu.Lock()
	st := State(b.state.Load())
	p := b.probeNs.Load()
	if st == Closed || st == Open && now-b.openedNs.Load() < int64(b.cfg.CoolDown) || p != 0 && now-p < int64(b.cfg.CoolDown) {
		b.mu.Unlock()
		return false
	}
	b.probeNs.Store(now)
	var at time.Time
	if st == Open {
		at = b.setLocked(HalfOpen)
	}
	b.mu.Unlock()
	if !at.IsZero() {
		b.notify(Open, HalfOpen, at)
	}
	return true
}

// Done records a call's outcome: ok is a success, probe says whether the call
// was the probe Allow granted. FailureThreshold consecutive failures open a
// closed Breaker, and a success resets their count; SuccessThreshold
// consecutive successful probes close a half-open Breaker, and a failed probe
// opens it again. The outcome of a call that was no probe changes nothing
// once the Breaker is not closed (it was let through before the opening).
func (b *Breaker) Done(ok, probe bool) {
	if !probe {
		if State(b.state.Load()) != Closed {
			return
		}
		if ok {
			if b.fails.Load() != 0 {
				b.fails.Store(0)
			}
			return
		}
		if b.fails.Add(1) < int64(b.cfg.FailureThreshold) {
			return
		}
		b.mu.Lock()
		var at time.Time
		if State(b.state.Load()) == Closed {
			at = b.setLocked(Open)
		}
		b.mu.Unlock()
		if !at.IsZero() {
			b.notify(Closed, Open, at)
		}
		return
	}
	b.mu.Lock()
	var to State
	var at time.Time
	if State(b.state.Load()) == HalfOpen {
		if ok {
			b.okProbes++
			if b.okProbes >= b.cfg.SuccessThreshold {
				to, at = Closed, b.setLocked(Closed)
			}
		} else {
			to, at = Open, b.setLocked(Open)
		}
	}
	b.probeNs.Store(0)
	b.mu.Unlock()
	if !at.IsZero() {
		b.notify(HalfOpen, to, at)
	}
}

// Release ends the probe Allow granted without an outcome (its caller gave
// up): the next caller may probe at once.
func (b *Breaker) Release() { b.probeNs.Store(0) }

// Reset closes the Breaker from any state (the peer answered, left, or
// restarted).
func (b *Breaker) Reset() {
	b.mu.Lock()
	from := State(b.state.Load())
	var at time.Time
	if from != Closed {
		at = b.setLocked(Closed)
	}
	b.fails.Store(0)
	b.probeNs.Store(0)
	b.mu.Unlock()
	if !at.IsZero() {
		b.notify(from, Closed, at)
	}
}

// setLocked enters state to; b.mu is held. It returns the time of the switch.
func (b *Breaker) setLocked(to State) time.Time {
	now := time.Now()
	from := State(b.state.Load())
	b.timeIn[from] += now.Sub(b.since)
	b.since = now
	b.switches[from][to]++
	switch to {
	case Open:
		b.openedNs.Store(now.UnixNano())
	case HalfOpen:
		b.okProbes = 0
	case Closed:
		b.fails.Store(0)
	}
	b.state.Store(uint32(to))
	return now
}

func (b *Breaker) notify(from, to State, at time.Time) {
	if b.cfg.OnStateChange != nil {
		b.cfg.OnStateChange(from, to, at)
	}
}

// Stats returns a snapshot of the transitions.
func (b *Breaker) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := Stats{State: State(b.state.Load()), Switches: b.switches, TimeIn: b.timeIn}
	s.TimeIn[s.State] += time.Since(b.since)
	return s
}

// Set is a Breaker per name (the node's per-peer breaker), each opened by the
// first failure: a name holds a Breaker only while it is not closed, so Skip
// costs one atomic load while none is. The zero Set is not usable; make one
// with NewSet.
type Set struct {
	coolDown time.Duration
	open     atomic.Int32 // names held in m
	m        sync.Map     // name -> *Breaker
}

// NewSet returns an empty Set whose Breakers refuse for coolDown after a
// failure, then let one call through as the probe.
func NewSet(coolDown time.Duration) *Set { return &Set{coolDown: coolDown} }

// Skip reports whether calls to name should not be made now. Past the
// CoolDown, exactly one caller is let through as the probe; a probe that
// reports nothing (neither Fail nor Reset) is given to another caller after
// another CoolDown.
func (s *Set) Skip(name string) bool {
	if s.open.Load() == 0 {
		return false // inlined: the only cost while every peer answers
	}
	return s.skip(name)
}

func (s *Set) skip(name string) bool {
	v, ok := s.m.Load(name)
	if !ok {
		return false
	}
	ok, _ = v.(*Breaker).Allow()
	return !ok
}

// Refusing reports whether name's Breaker refuses calls now (its CoolDown,
// or its probe's, has not passed), without taking the probe.
func (s *Set) Refusing(name string) bool {
	if s.open.Load() == 0 {
		return false
	}
	v, ok := s.m.Load(name)
	return ok && v.(*Breaker).Refusing()
}

// Fail records a failed call to name: its Breaker opens (a closed or
// half-open one), or stays open.
func (s *Set) Fail(name string) {
	v, loaded := s.m.LoadOrStore(name, New(Config{FailureThreshold: 1, SuccessThreshold: 1, CoolDown: s.coolDown}))
	if !loaded {
		s.open.Add(1)
	}
	br := v.(*Breaker)
	br.Done(false, br.State() == HalfOpen) // the node does not tell the probe's failure from others
}

// Reset closes name's Breaker (the peer answered, left, or restarted).
func (s *Set) Reset(name string) {
	if s.open.Load() == 0 {
		return
	}
	if _, ok := s.m.LoadAndDelete(name); ok {
		s.open.Add(-1)
	}
}
