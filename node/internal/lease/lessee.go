package lease

import (
	"context"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/transport"
)

// This file is the lessee's side of leases over the Table: waiting for a
// renewal in flight (Await), renewing in the background (Renew), and installing what a
// forward that asked for a lease brought back (Result).

// Await is for a check of hits of the key with ring hash h under l that
// Decide (at epoch) neither admitted nor asked for a lease for: when the
// key's renewal is in flight, the check waits for it (at most a Period),
// rather than forward too, and is decided again (Decide, filling *a) at
// that instant (Config.Clock). Without a renewal in flight it returns
// false, 0 and epoch at once. The node calls Decide itself first, so that
// a check a lease admits costs no more than Decide.
func (t *Table) Await(h uint64, l algo.Limit, hits int64, epoch uint64, a *Answer) (ok bool, ask int64, _ uint64) {
	ch := t.Pending(h, l)
	if ch == nil {
		return false, 0, epoch
	}
	tm := time.NewTimer(time.Duration(t.period))
	select {
	case <-ch:
	case <-tm.C:
	}
	tm.Stop()
	return t.Decide(h, l, hits, t.node.Clock(), a)
}

// Fill writes into d the decision of a check under l that a lease admitted
// (a: what Decide or Use answered): allowed, with the key's capacity as
// Limit and a's Remaining and ResetAfter. d's other fields are left as
// they are.
func (a *Answer) Fill(d *algo.Decision, l algo.Limit) {
	d.Allowed = true
	d.Limit = Capacity(l)
	d.Remaining, d.ResetAfter = a.Remaining, a.ResetAfter
}

// Renew asks the owner of the key with ring hash h (Config.Owner) for the
// next lease of ask hits, in the background: a forward of w, the wire form
// of the check Decide admitted, as a peek (0 hits, nothing taken) that
// carries the ask and a's account of the lease it renews (its id and the
// hits still usable of it; named only to the owner that lent it). Its
// answer is installed (Result, with epoch and sent, the node clock before
// the send) when it returns; the caller's check does not wait for it.
// Without an owner to ask, the request only ends.
func (t *Table) Renew(h uint64, w transport.Check, ask int64, epoch uint64, sent int64, a *Answer) {
	owner, addr, ok := t.node.Owner(h)
	if !ok {
		t.Answered(h, w.Limit, epoch, sent, 0, 0, "")
		return
	}
	w.Hits, w.LeaseHits = 0, ask
	if a.RenewID != 0 && a.Owner == owner {
		w.LeaseID, w.LeaseLeft = a.RenewID, a.RenewLeft
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), t.node.Timeout)
		defer cancel()
		res, err := t.node.Forward(ctx, addr, w)
		t.Result(h, w.Limit, epoch, sent, w.LeaseID, &res, err, owner)
	}()
}

// Result installs the lease that res, the answer (or err) of a forward of
// the key with ring hash h under l that asked for one at epoch and was
// sent at sent (node clock), carries from owner; named is the id of the
// lease the forward renewed (0: none), which the new lease replaces when
// res says the owner renewed it. With an error or without a grant it only
// ends the request.
func (t *Table) Result(h uint64, l algo.Limit, epoch uint64, sent, named int64, res *transport.Result, err error, owner string) {
	if err != nil || res.Code != transport.CodeOK {
		t.Answered(h, l, epoch, sent, 0, 0, "")
		return
	}
	g := Grant{Hits: res.LeaseHits, For: res.LeaseFor, ID: res.LeaseID, Owner: owner}
	if res.LeaseRenewed {
		g.Renewed = named
	}
	t.Install(h, l, epoch, sent, g)
}

// Stats returns the checks admitted from leases and the grants installed;
// 0, 0 for a nil t (leases off).
func (t *Table) Stats() (admitted, granted uint64) {
	if t == nil {
		return 0, 0
	}
	return t.Admitted(), t.Granted()
}
