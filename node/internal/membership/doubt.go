// Gossip does not move an admitted member (secure mode).
//
// Whoever holds the gossip key (Config.SecretKey) can speak memberlist: it can
// make the others believe that a member left (a leave sent under its name),
// died (a dead message after a suspicion it forged), or moved (an alive
// message for its name at another address once gossip thinks it gone). The
// name, though, belongs to the holder of its certificate. An admitted member
// (it passed the Hello handshake at its peer address over a connection whose
// certificate names it) therefore keeps its place in the ring when gossip
// contradicts it: this node doubts it and probes its admitted identity, a
// Hello to its known peer address that must answer with its name, its
// instance id and a certificate naming it. While the probe passes (again
// every Gossip.ProbeInterval) the member stays in the ring and a new claim for
// its name waits, out of the ring; the first probe that fails (unreachable,
// refused, another instance id, a member that is leaving, a revoked
// certificate) drops it, and gossip's word is taken: the member leaves the
// ring, or the new claim for its name is admitted afresh, with a certificate
// for that name. Gossip that agrees with the admitted identity again (the
// member refuted the rumour) ends the doubt.
//
// In insecure mode nothing binds a name to anyone, and gossip decides alone.

package membership

import (
	"time"
)

// doubt is gossip's disagreement with an admitted member, kept on its
// admission under mu.
type doubt struct {
	// claim is gossip's live claim for the name at another peer address or
	// instance id; nil when gossip says the member is gone.
	claim  *Member
	since  time.Time // when gossip began to disagree
	last   time.Time // end of the last probe
	passed int       // probes that passed
	// quiet: gossip's own member list still holds the admitted identity;
	// the doubt comes from a claim gossip rejected as a conflict (see
	// claimMoved) or from the death of an earlier instance (see Set).
	// The first probe that passes ends it, since no later gossip would.
	quiet bool
}

// doubtClaimLocked is called when gossip says member m (not this node) is
// alive, under mu, with a its admission. When a is admitted at another
// address or instance id, m is recorded as a claim for the name and it
// returns true: the admitted identity keeps its place (see the top of this
// file). When m is the admitted identity, any doubt ends. Insecure mode: false.
func (t *Table) doubtClaimLocked(a *admission, m Member) bool {
	if a == nil || !t.cfg.Secure || a.state != StateAlive {
		return false
	}
	if a.id == m.ID && a.addr == m.Addr {
		if a.doubt != nil {
			t.cfg.Log.Info("gossip agrees again with an admitted member", "member", m.Name, "addr", a.addr, "doubted_for", time.Since(a.doubt.since).Round(time.Millisecond))
			a.doubt = nil
		}
		return false
	}
	t.doubtLocked(a, m.Name, false).claim = &m
	return true
}

// doubtLeaveLocked is called when gossip says member name left or died, under
// mu, with a its admission. It returns true when a is admitted (the
// member stays until its probe fails), false when the member is to be removed
// now (not admitted, or insecure mode).
func (t *Table) doubtLeaveLocked(name string, a *admission) bool {
	if a == nil || !t.cfg.Secure || a.state != StateAlive {
		return false
	}
	t.doubtLocked(a, name, false).claim = nil
	return true
}

// doubtLocked returns a's doubt, creating it (quiet, see doubt.quiet); a
// doubt that gossip itself holds (quiet false) stays until gossip agrees
// again. Under mu.
func (t *Table) doubtLocked(a *admission, name string, quiet bool) *doubt {
	if a.doubt == nil {
		a.doubt = &doubt{since: time.Now(), quiet: quiet}
		t.cfg.Log.Info("gossip contradicts an admitted member; probing it at its admitted address", "member", name, "addr", a.addr)
	}
	a.doubt.quiet = a.doubt.quiet && quiet
	return a.doubt
}

// Leaving is called when member name says, in its own handoff marker, that
// it is leaving (transport.TransferBatch.Leaving): gossip brings a leave to
// the last members up to a second after the first, the marker to every
// member at once. An admitted member that is not doubted yet is doubted
// quietly, and the membership loop (Run) probes it at once, without waiting
// for a change to settle or for ProbeInterval; the probe decides, as for a
// leave that gossip brings: a member that is leaving fails it and is
// dropped, one that answers stays (the doubt ends). This node, and members
// not admitted or already doubted, are left as they are. It does not block.
func (t *Table) Leaving(name string) {
	t.mu.Lock()
	a := t.admit[name]
	if name == t.cfg.Self.Member || a == nil || a.state != StateAlive || a.doubt != nil {
		t.mu.Unlock()
		return
	}
	t.doubtLocked(a, name, true)
	t.mu.Unlock()
	select {
	case t.probeNow <- struct{}{}:
	default: // a probe is already asked for; it reads every doubt
	}
}

// probeDoubted starts a probe of every doubted member whose last probe ended
// ProbeInterval ago or more (or that was not probed yet). It runs on
// the membership loop.
func (t *Table) probeDoubted() {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, a := range t.admit {
		if a.doubt == nil || a.probing || now.Sub(a.doubt.last) < t.cfg.ProbeInterval {
			continue
		}
		a.probing = true
		t.cfg.WG.Add(1)
		go t.probe(name, a.id, a.addr)
	}
}

// probe runs a Hello with the admitted identity (name, id, addr) of a doubted
// member. If it passes, the member stays in the ring; if it fails, the member
// is dropped as gossip says: removed, or replaced by gossip's claim for its
// name, which is then admitted afresh.
func (t *Table) probe(name, id, addr string) {
	defer t.cfg.WG.Done()
	resp, cert, err := t.sayHello(addr)
	reason := t.mismatch(name, id, resp, cert, err)
	t.mu.Lock()
	if reason == "" && t.revokedSeenLocked(name) {
		reason = "certificate revoked"
	}
	a := t.admit[name]
	if a == nil || a.id != id || a.addr != addr {
		t.mu.Unlock() // replaced meanwhile
		return
	}
	a.probing = false
	d := a.doubt
	if d == nil {
		t.mu.Unlock() // gossip agrees again
		return
	}
	d.last = time.Now()
	if reason == "" && a.state == StateAlive {
		d.passed++
		a.proved = d.last
		first := d.passed == 1
		what := "left or died"
		if d.claim != nil {
			what = "is at " + d.claim.Addr + " (instance " + d.claim.ID + ")"
		}
		if d.quiet {
			// Gossip still holds the admitted identity: nothing would end
			// the doubt. A rejected claim is a rumour overruled (once per
			// claim); an earlier instance's death is none.
			a.doubt = nil
			first = d.claim != nil && a.overruled != d.claim.ID+"@"+d.claim.Addr
			if first {
				a.overruled = d.claim.ID + "@" + d.claim.Addr
			}
		}
		t.mu.Unlock()
		if first {
			t.cfg.Refused("gossip")
			t.cfg.Log.Warn("gossip says an admitted member "+what+", but it answers at its admitted address with its certificate: it stays in the ring",
				"member", name, "addr", addr, "instance", id)
		}
		return
	}
	if reason == "" {
		reason = a.reason // refused meanwhile (deny list)
	}
	claim := d.claim
	if claim != nil {
		t.mu.Unlock()
		t.cfg.Log.Info("member moved: its admitted address fails its probe; admitting its new address", "member", name, "addr", addr, "reason", reason, "new_addr", claim.Addr, "new_instance", claim.ID)
		t.admitClaim(a, *claim, claim.Addr == addr)
		return
	}
	t.removeLocked(name)
	t.mu.Unlock()
	t.cfg.Log.Info("member dropped: gossip says it is gone, and its probe failed", "member", name, "addr", addr, "reason", reason)
	t.Changed()
}

// admitClaim replaces the admitted identity old of a member, whose probe just
// failed, with gossip's claim for its name (a restart at another address or
// under another instance id): it runs the claim's Hello first and installs its
// outcome in one step, so that the member does not leave the ring between
// its two identities when the claim passes (the table stays the same; the
// others hand the new instance the states they kept for it, see rebuild). If
// the admission changed meanwhile, the newer one stands. redial: the claim is
// at the address of the identity it replaces (see admission.redial).
func (t *Table) admitClaim(old *admission, claim Member, redial bool) {
	if redial {
		t.cfg.Drop(claim.Addr)
	}
	resp, cert, err := t.sayHello(claim.Addr)
	reason := t.mismatch(claim.Name, claim.ID, resp, cert, err)
	t.mu.Lock()
	if t.admit[claim.Name] != old {
		t.mu.Unlock()
		return
	}
	if reason == "" && t.cfg.Secure && t.revokedSeenLocked(claim.Name) {
		reason = "certificate revoked"
	}
	t.departed[claim.Name] = time.Now() // its handoff may still arrive (see MayCall)
	t.members[claim.Name] = claim
	now := time.Now()
	a := &admission{id: claim.ID, addr: claim.Addr, state: StateAlive, last: now, proved: now}
	if reason != "" {
		a.state, a.reason = StateRefused, reason
	}
	t.admit[claim.Name] = a
	t.mu.Unlock()
	if reason != "" {
		t.cfg.Refused("member")
		t.cfg.Log.Warn("member refused: it stays out of the ring", "member", claim.Name, "addr", claim.Addr, "reason", reason)
	} else {
		t.cfg.Log.Info("member admitted", "member", claim.Name, "addr", claim.Addr)
	}
	t.Changed()
}

// claimMoved is called when gossip reports a live member m (not this node)
// at another address than the one gossip holds for its name (memberlist
// rejects that claim until the old address is found dead, see
// delegate.NotifyConflict). A member that restarted at a new address (a
// rescheduled pod) is such a claim: the admitted identity is doubted and
// probed at once, and when its address no longer answers the claim is
// admitted, without waiting for gossip to find the old address dead. A claim
// for a member that is not admitted replaces it (its Hello decides). Under
// no lock; it does not block.
func (t *Table) claimMoved(m Member) {
	t.mu.Lock()
	a := t.admit[m.Name]
	switch {
	case a != nil && a.id == m.ID && a.addr == m.Addr:
		t.mu.Unlock()
		return // gossip caught up with what is admitted
	case a != nil && a.state == StateAlive && a.doubt == nil && time.Since(a.proved) < t.cfg.ProbeInterval:
		t.mu.Unlock()
		return // it answered at its admitted address a moment ago
	case a != nil && a.state == StateAlive:
		t.doubtLocked(a, m.Name, true).claim = &m
	case a == nil || a.state == StateRefused:
		t.members[m.Name] = m
		t.admit[m.Name] = &admission{id: m.ID, addr: m.Addr, state: StateJoining, redial: a != nil && a.addr == m.Addr}
	default: // joining: its handshake, under way, decides first
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.Changed()
}
