package membership

import (
	"errors"
	"time"

	"github.com/ringlimit/ringlimit/transport"
)

// admission is the handshake state of one gossip member (not this node), kept
// under Table.mu. It is for one instance at one address: a member that
// restarts (new instance id) or moves starts over as joining.
type admission struct {
	id, addr string
	state    string // StateJoining, StateAlive or StateRefused
	reason   string
	inflight bool
	last     time.Time // end of the last attempt
	// redial: a new instance at the address of the one it replaces (a
	// restart on the same port). The pooled connection to that address
	// failed with the old process and may sit in reconnect backoff, so it is
	// dropped before the handshake, and checks reach the new process at once.
	redial bool
	// unreachable: the last attempt failed to reach the member (its address
	// did not answer), as opposed to a refusal. It is tried again every
	// ProbeInterval on a new connection, and at once when gossip says the
	// member is alive again (a healed partition), not after AdmissionRetry:
	// the pooled connection of the failed attempt may sit in reconnect
	// backoff for seconds.
	unreachable bool
	// doubt is set while gossip contradicts this admitted identity (see
	// doubt.go); probing while a probe of it runs.
	doubt   *doubt
	probing bool
	// proved is when the admitted identity last answered its Hello or a
	// probe; overruled is the last claim (id@addr) rejected as a conflict
	// whose probe passed (see claimMoved).
	proved    time.Time
	overruled string
}

// AdmitPending starts a handshake with every member that needs one: joining
// members, refused members whose last attempt is AdmissionRetry old, and
// unreachable ones whose last attempt is retryUnreachable old. It runs on the
// membership loop.
func (t *Table) AdmitPending() {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, a := range t.admit {
		wait := t.cfg.AdmissionRetry
		if a.unreachable {
			wait = t.retryUnreachable()
		}
		if a.inflight || a.state == StateAlive || (a.state == StateRefused && now.Sub(a.last) < wait) {
			continue
		}
		a.inflight = true
		t.cfg.WG.Add(1)
		go t.hello(name, a.id, a.addr, a.redial)
	}
}

// AdmitNow runs the handshakes with the members the seeds told of and waits
// for them (bounded by Timeout), so that the node builds its first ring with
// the admitted members: the ring change that adds this node then gates the
// partitions it gains from them until their handoffs arrive.
func (t *Table) AdmitNow() {
	t.AdmitPending()
	deadline := time.Now().Add(t.cfg.Timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		t.mu.Lock()
		busy := false
		for _, a := range t.admit {
			busy = busy || a.inflight
		}
		t.mu.Unlock()
		if !busy {
			return
		}
		<-tick.C
	}
}

// hello runs the admission handshake with one member and records the outcome:
// the member enters the ring only when its answer has this node's cluster
// label and protocol version, its own name and instance id, and (in secure
// mode) comes over a connection whose certificate names it.
func (t *Table) hello(name, id, addr string, redial bool) {
	defer t.cfg.WG.Done()
	if redial {
		t.cfg.Drop(addr)
	}
	resp, cert, err := t.sayHello(addr)
	reason := t.mismatch(name, id, resp, cert, err)
	t.mu.Lock()
	if reason == "" && t.cfg.Secure && t.revokedSeenLocked(name) {
		reason = "certificate revoked"
	}
	a := t.admit[name]
	if a == nil || a.id != id || a.addr != addr {
		t.mu.Unlock() // gone or restarted meanwhile: its new entry has its own attempt
		return
	}
	a.inflight, a.last = false, time.Now()
	a.unreachable = err != nil && !errors.Is(err, transport.ErrRefused)
	a.redial = a.unreachable // a new connection for the next attempt
	newRefusal := reason != "" && (a.state != StateRefused || a.reason != reason)
	if reason == "" {
		a.state, a.reason, a.proved = StateAlive, "", a.last
	} else {
		a.state, a.reason = StateRefused, reason
	}
	t.mu.Unlock()
	switch {
	case reason == "":
		t.cfg.Log.Info("member admitted", "member", name, "addr", addr)
		t.Changed()
	case newRefusal:
		t.cfg.Refused("member")
		t.cfg.Log.Warn("member refused: it stays out of the ring", "member", name, "addr", addr, "reason", reason)
	}
}

// retryUnreachable is how long after a failed attempt an unreachable member
// is tried again: ProbeInterval, at most AdmissionRetry.
func (t *Table) retryUnreachable() time.Duration {
	return min(t.cfg.AdmissionRetry, t.cfg.ProbeInterval)
}
