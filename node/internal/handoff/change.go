package handoff

import (
	"github.com/ringlimit/ringlimit/node/internal/replication"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/ring"
)

// Change is one ring change as member Self sees it: from ring Old to Cur,
// with each ring's backups (nil: none, one member or replication off),
// Leaving when Self is leaving (it owns nothing in Cur), and the members of
// Cur that restarted under their name since Old (Restarted).
type Change struct {
	Self                   string
	Old, Cur               *ring.Snapshot
	OldBackups, CurBackups *replication.Backups
	Leaving                bool
	Restarted              map[string]bool
}

// Move says what the change does with the state Self holds of the key with
// ring hash h: keep it (owned, or still its replica), hand it to the new
// owner (store.MoveSend; store.MoveSendCopy keeps a copy where Self is the
// key's new backup, or the new owner is a restarted member it backs up),
// or, for a state that is neither, stray (a stale replica, or one handed to
// Self by mistake): store.MoveSend or store.MoveDrop, the caller's choice.
func (c *Change) Move(h uint64, stray store.MoveAction) store.MoveAction {
	m, ok := c.Cur.OwnerOfHash(h)
	switch {
	case !ok || c.Leaving:
		return store.MoveSend
	case m.Name == c.Self:
		return store.MoveKeep
	}
	wasOwner := c.Old.Len() == 0
	if !wasOwner {
		o, _ := c.Old.OwnerOfHash(h)
		wasOwner = o.Name == c.Self
	}
	if b, ok := c.CurBackups.OfHash(h); ok && b.Name == c.Self {
		if wasOwner || c.Restarted[m.Name] {
			return store.MoveSendCopy
		}
		return store.MoveKeep // still its replica
	}
	if wasOwner {
		return store.MoveSend
	}
	return stray
}

// MoveListed is Move for a state Self holds that may be listed as a stray
// (see Strays): a handed-off state installed here for a key Self did not own
// (listed true). Move keeps such a state where Self is the key's backup in
// Cur, as if it were its replica; but no owner has it, and Self's marker for
// Cur tells the new owner that Self holds nothing more of its partitions, so
// the owner would decide on what it has while the state waits here for the
// stray pass. A listed state of a key another member owns in Cur therefore
// goes to that owner with this handoff (store.MoveSendCopy: Self keeps the
// copy a backup holds). Seen at 20 members, 10 leaving at once with the
// default MembershipDebounce: the owner decided on an empty state for
// 80 ms, keys up to a whole limit over.
func (c *Change) MoveListed(h uint64, listed bool, stray store.MoveAction) store.MoveAction {
	a := c.Move(h, stray)
	if !listed || a != store.MoveKeep || c.Leaving {
		return a
	}
	if m, ok := c.Cur.OwnerOfHash(h); ok && m.Name != c.Self {
		return store.MoveSendCopy
	}
	return a
}

// Resync returns, per partition of Cur, whether Self must send its states
// of that partition to their backup again whole: Self owns it and did not
// own it in Old, or its backup changed or restarted. nil when there is
// nothing to send (no backups, or Self is leaving).
func (c *Change) Resync() []bool {
	if c.CurBackups == nil || c.Leaving {
		return nil
	}
	n := c.Cur.PartitionCount()
	var parts []bool
	for p := range n {
		if c.Cur.PartitionOwner(p).Name != c.Self {
			continue
		}
		b := c.CurBackups.Of(p).Name
		prevOwner, prevBackup := "", ""
		if c.Old.Len() > 0 && c.Old.PartitionCount() == n {
			prevOwner = c.Old.PartitionOwner(p).Name
		}
		if c.OldBackups != nil && c.OldBackups.Partitions() == n {
			prevBackup = c.OldBackups.Of(p).Name
		}
		if prevOwner != c.Self || prevBackup != b || c.Restarted[b] {
			if parts == nil {
				parts = make([]bool, n)
			}
			parts[p] = true
		}
	}
	return parts
}
