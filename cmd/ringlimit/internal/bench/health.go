package bench

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/node"
)

// Target health defaults (Options.DownAfter, Options.ProbeInterval).
const (
	// DefaultDownAfter is how many consecutive failed checks mark a target down.
	DefaultDownAfter = 5
	// DefaultProbeInterval is how long a down target is left alone before one
	// check probes it; each failed probe doubles the wait, up to
	// maxProbeIntervalFactor times this.
	DefaultProbeInterval   = 500 * time.Millisecond
	maxProbeIntervalFactor = 16
)

// TargetEvent is a change of a target's health during a run.
type TargetEvent struct {
	// Target is the target's name.
	Target string
	// At is the time since the start of the run.
	At time.Duration
	// Down is true when the target was marked down, false when it answered again.
	Down bool
	// Errors is the number of consecutive failed checks that marked it down (0
	// when it came back).
	Errors int64
	// Err is the last error seen from the target when it was marked down.
	Err string
}

// TargetReport is what one target answered during a run.
type TargetReport struct {
	// Name is the target's name.
	Name string
	// Decided counts the checks of the timed phase it decided; Errors the
	// checks sent to it that were not decided (connection refused, timeouts,
	// error answers). Prefill checks are in neither.
	Decided, Errors int64
	// Throughput is Decided over Report.Elapsed, in checks per second.
	Throughput float64
	// Latency holds the latency in ns of the checks it decided, measured as
	// Report.Latency's (never nil in a Report; empty if it decided none).
	Latency *hdrhistogram.Histogram
	// Routes counts the checks it decided by the path that decided them: on a
	// cluster, RouteOwner for the keys this node owns, RouteForwarded for the
	// others, and so on (see node.Route).
	Routes map[node.Route]int64
	// Down is true when the target was down at the end of the run.
	Down bool
	// Events lists its health changes in order.
	Events []TargetEvent
	// Received is the forward messages per second it received from the
	// other members during the timed phase, as the owner of their keys
	// (batches of forwarded checks and lease renewals); -1 when the target
	// does not tell (target.Target.Received is nil).
	Received float64
}

// health tracks one target. Callers read down and consecutive without a lock
// on the fast path; mu guards the transitions.
type health struct {
	name        string
	chk         target.Checker
	consecutive atomic.Int64
	down        atomic.Bool

	mu        sync.Mutex
	probing   bool
	nextProbe time.Duration // since the start of the run
	backoff   time.Duration
	events    []TargetEvent
	lastErr   string
}

// healthSet routes callers to live targets.
type healthSet struct {
	ts        []*health
	start     time.Time
	downAfter int64
	probe     time.Duration
	onEvent   func(TargetEvent)
}

func newHealthSet(o Options, start time.Time) *healthSet {
	s := &healthSet{start: start, downAfter: int64(o.DownAfter), probe: o.ProbeInterval, onEvent: o.OnTargetEvent}
	for _, t := range o.Targets {
		s.ts = append(s.ts, &health{name: t.Name, chk: t.Checker, backoff: o.ProbeInterval})
	}
	return s
}

// pick returns the target caller-preferred index pref should use: pref itself
// when it is up, else the next live one, else a down target whose probe is due
// (probe = true). It returns -1 when every target is down and no probe is due.
func (s *healthSet) pick(pref int) (idx int, probe bool) {
	n := len(s.ts)
	for j := range n {
		if i := (pref + j) % n; !s.ts[i].down.Load() {
			return i, false
		}
	}
	now := time.Since(s.start)
	for j := range n {
		i := (pref + j) % n
		h := s.ts[i]
		h.mu.Lock()
		due := h.down.Load() && !h.probing && now >= h.nextProbe
		if due {
			h.probing = true
		}
		h.mu.Unlock()
		if due {
			return i, true
		}
	}
	return -1, false
}

// nextDue returns how long until the earliest probe is due (at least 1 ms).
func (s *healthSet) nextDue() time.Duration {
	now := time.Since(s.start)
	wait := s.probe
	for _, h := range s.ts {
		h.mu.Lock()
		if h.down.Load() && !h.probing {
			wait = min(wait, h.nextProbe-now)
		}
		h.mu.Unlock()
	}
	return max(wait, time.Millisecond)
}

// result records the outcome of a check sent to target i.
func (s *healthSet) result(i int, probe bool, err error) {
	h := s.ts[i]
	if err == nil {
		if h.consecutive.Load() != 0 {
			h.consecutive.Store(0)
		}
		if !h.down.Load() {
			return
		}
		h.mu.Lock()
		var ev TargetEvent
		fire := h.down.Load()
		if fire {
			h.down.Store(false)
			h.probing, h.backoff = false, s.probe
			ev = TargetEvent{Target: h.name, At: time.Since(s.start)}
			h.events = append(h.events, ev)
		}
		h.mu.Unlock()
		if fire && s.onEvent != nil {
			s.onEvent(ev)
		}
		return
	}
	n := h.consecutive.Add(1)
	if probe {
		h.mu.Lock()
		h.probing = false
		h.backoff = min(2*h.backoff, maxProbeIntervalFactor*s.probe)
		h.nextProbe = time.Since(s.start) + h.backoff
		h.lastErr = err.Error()
		h.mu.Unlock()
		return
	}
	if n < s.downAfter || h.down.Load() {
		return
	}
	h.mu.Lock()
	var ev TargetEvent
	fire := !h.down.Load()
	if fire {
		at := time.Since(s.start)
		h.down.Store(true)
		h.nextProbe = at + h.backoff
		h.lastErr = err.Error()
		ev = TargetEvent{Target: h.name, At: at, Down: true, Errors: n, Err: err.Error()}
		h.events = append(h.events, ev)
	}
	h.mu.Unlock()
	if fire && s.onEvent != nil {
		s.onEvent(ev)
	}
}

// String describes the event for a report line.
func (e TargetEvent) String() string {
	if e.Down {
		return fmt.Sprintf("down at %v after %d consecutive errors (last: %s); skipped, probed with one check at a time", e.At.Round(time.Millisecond), e.Errors, e.Err)
	}
	return fmt.Sprintf("answering again at %v", e.At.Round(time.Millisecond))
}
