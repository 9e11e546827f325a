package membership

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Delegate answers memberlist's hooks for a Table (memberlist.Delegate,
// EventDelegate and ConflictDelegate). Its methods must not block and must
// not call back into memberlist (that deadlocks), so events only signal the
// membership loop (Table.Run). Meta is the node's metadata (EncodeMeta).
type Delegate struct {
	T    *Table
	Meta []byte
}

func (d Delegate) NodeMeta(limit int) []byte                  { return d.Meta }
func (d Delegate) NotifyMsg([]byte)                           {}
func (d Delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d Delegate) LocalState(join bool) []byte                { return nil }
func (d Delegate) MergeRemoteState(buf []byte, join bool)     {}
func (d Delegate) NotifyJoin(m *memberlist.Node)              { d.T.set(m, true) }
func (d Delegate) NotifyLeave(m *memberlist.Node)             { d.T.set(m, false) }
func (d Delegate) NotifyUpdate(m *memberlist.Node)            { d.T.set(m, true) }

// NotifyConflict implements memberlist.ConflictDelegate: two live members
// claim one name. On the newcomer (the name is ours) it records the other's
// address for NameConflict; everywhere it logs a WARN.
func (d Delegate) NotifyConflict(existing, other *memberlist.Node) {
	t := d.T
	self := t.cfg.Self.Member
	theirs := net.JoinHostPort(other.Addr.String(), strconv.Itoa(int(other.Port)))
	peerAddr, _, _ := DecodeMeta(other.Meta)
	if existing.Name != self {
		if addr, id, ok := DecodeMeta(other.Meta); ok {
			t.claimMoved(Member{Name: other.Name, Addr: addr, ID: id, GossipAddr: theirs})
		}
	}
	if existing.Name == self {
		t.conflictMu.Lock()
		if t.conflict == "" {
			t.conflict = fmt.Sprintf("gossip %s, peer %s", theirs, peerAddr)
			t.conflictPeer = peerAddr
		}
		t.conflictMu.Unlock()
	}
	t.cfg.Log.Warn("two live members claim one member name", "member", existing.Name,
		"known_at", net.JoinHostPort(existing.Addr.String(), strconv.Itoa(int(existing.Port))), "other_at", theirs)
}

// set copies what the node needs of a memberlist member while memberlist
// holds its lock (the *Node it passes is its own and changes after the callback
// returns), then signals the membership loop. In secure mode, gossip that
// contradicts an admitted member (it left, died, or its name is at another
// address or instance) does not move it: see doubt.go.
func (t *Table) set(m *memberlist.Node, alive bool) {
	t.mu.Lock()
	self := m.Name == t.cfg.Self.Member
	if alive {
		if addr, id, ok := DecodeMeta(m.Meta); ok {
			mem := Member{
				Name: m.Name, Addr: addr, ID: id, Self: self,
				GossipAddr: net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port))),
			}
			a := t.admit[m.Name]
			switch {
			case self:
				t.members[m.Name] = mem
			case t.doubtClaimLocked(a, mem):
				// The admitted identity stays until its probe fails.
			default:
				t.members[m.Name] = mem
				// A member new to us, restarted or moved is admitted afresh.
				if a == nil || a.id != id || a.addr != addr {
					t.admit[m.Name] = &admission{id: id, addr: addr, state: StateJoining, redial: a != nil && a.addr == addr}
				} else if a.state == StateRefused && a.unreachable {
					// Gossip hears from it again (a healed partition): try
					// now, on a new connection.
					a.last = time.Time{}
				}
			}
		}
	} else if _, id, ok := DecodeMeta(m.Meta); ok && !self && t.admit[m.Name] != nil && t.admit[m.Name].id != id {
		// The leave or death of an instance this node does not hold for the
		// name: typically the one before a restart at another address,
		// replaced before gossip found it dead (see claimMoved). If it is
		// the claim a doubt waits on, the claim is gone. Otherwise the
		// admitted instance is probed (quietly): gossip may have taken the
		// leave of the instance it still had under this name for its own
		// (a restarted member that leaves before gossip holds its new
		// address), and a leaving member fails its probe.
		a := t.admit[m.Name]
		if d := a.doubt; d != nil && d.claim != nil && d.claim.ID == id {
			d.claim = nil
		} else if a.state == StateAlive && d == nil {
			t.doubtLocked(a, m.Name, true)
		}
	} else if !t.doubtLeaveLocked(m.Name, t.admit[m.Name]) {
		t.removeLocked(m.Name)
	}
	t.mu.Unlock()
	t.Changed()
}

// LogWriter routes memberlist's log lines to Log at debug level.
type LogWriter struct{ Log *slog.Logger }

func (w LogWriter) Write(p []byte) (int, error) {
	w.Log.Debug(strings.TrimSpace(string(p)), "src", "memberlist")
	return len(p), nil
}
