// Persistence (Config.StateDir): the snapshot of the key states this node
// holds, written periodically and at Close or Abort, and restored at New
// through the handoff path.

package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/snapshot"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

// ErrSnapshot is wrapped by the errors of writing or restoring a snapshot
// (Config.StateDir). They never fail New or Close: a snapshot that cannot be
// written is logged and counted (Stats.SnapshotFailures), and so is one that
// cannot be restored, after which the node starts empty.
var ErrSnapshot = errors.New("node: state snapshot")

// DefaultSnapshotInterval is Config.SnapshotInterval in DefaultConfig.
const DefaultSnapshotInterval = 30 * time.Second

// restoreBatch is the number of saved states judged and installed together,
// as one handoff batch.
const restoreBatch = 4096

// persister writes and reads this node's snapshot file.
type persister struct {
	path string     // the snapshot file
	mu   sync.Mutex // one write at a time
	// final is set by the snapshot of Close or Abort: the handoff that
	// follows empties the store, and a periodic write after it would replace
	// the snapshot with nothing. Under mu.
	final bool
	// writes and failures count the snapshots written and the writes or
	// restores that failed; restored the states installed at New.
	writes, failures, restored atomic.Uint64
}

// snapshotFile names the snapshot of the member called name in dir: the name
// with every byte outside [A-Za-z0-9._-] turned into '_'.
func snapshotFile(dir, name string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, name)
	return filepath.Join(dir, "ringlimit-"+clean+".snapshot")
}

// openStateDir creates Config.StateDir if needed, checks that a file can be
// created in it (an error wrapping ErrInvalidConfig otherwise) and restores
// the snapshot found there. Called by New before the first ring is built, so
// the restored states are in the store before any check is decided, and the
// first rebuild hands those of keys other members own to them (see restore).
func (n *Node) openStateDir() error {
	dir := n.cfg.StateDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w: StateDir: %w", ErrInvalidConfig, err)
	}
	f, err := os.CreateTemp(dir, ".ringlimit-probe-*")
	if err != nil {
		return fmt.Errorf("%w: StateDir %q is not writable: %w", ErrInvalidConfig, dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	n.persist = &persister{path: snapshotFile(dir, n.cfg.Name)}
	n.restore()
	return nil
}

// restore reads the snapshot file and installs its states as a handoff from
// this node's past self: each is judged by checkKeyState (valid Limit within
// MaxPeriod and MaxLimit, plausible, not later than now + MaxPeerClockSkew,
// caller clocks only with AcceptCallerTimestamps), refused ones are counted
// in Stats.RefusedStates and logged, the rest are merged into the store as
// installHandoff does (a key held already keeps the more restrictive state;
// new keys count against MaxKeys). Ban states (AllowPenalized) are judged
// and merged as a handoff's too (a key of at most MaxKeyLen bytes, no denial
// after now + MaxPeerClockSkew; the later ban wins). A file that is missing
// starts the node empty (INFO); one that is torn, altered, of another format
// version or of another ClusterLabel is refused whole (ERROR,
// Stats.SnapshotFailures), moved aside to <file>.refused for inspection, and
// the node starts empty.
//
// The states are not this node's to keep: it installs them before its first
// ring, and that ring's handoff sends every state of a key another member
// owns to it (keeping a copy where this node is the key's backup), exactly as
// a ring change sends the states of keys a member no longer owns. The owner
// merges the copies it gets from its own snapshot, from the key's backup and
// from any member that held the key earlier, keeping the more restrictive.
func (n *Node) restore() {
	p := n.persist
	t0 := time.Now()
	b, err := os.ReadFile(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		n.log.Info("no state snapshot to restore; starting empty", "file", p.path)
		return
	}
	if err != nil {
		p.failures.Add(1)
		n.log.Error("state snapshot unreadable; starting empty", "file", p.path, "err", err)
		return
	}
	// The whole file is checked (checksum, header, every record) before one
	// state is installed: a refused file leaves the store empty.
	hdr, records, err := snapshot.Check(b)
	if err == nil && hdr.Cluster != n.cfg.ClusterLabel {
		err = fmt.Errorf("%w: written by cluster %q, this node is in %q", ErrSnapshot, hdr.Cluster, n.cfg.ClusterLabel)
	}
	if err != nil {
		p.failures.Add(1)
		n.log.Error("state snapshot refused; starting empty", "file", p.path, "err", err)
		if rerr := os.Rename(p.path, p.path+".refused"); rerr != nil {
			n.log.Warn("could not move the refused snapshot aside", "file", p.path, "err", rerr)
		}
		return
	}
	rd, _ := snapshot.Open(b) // Check opened it
	from := "state snapshot " + p.path
	batch := transport.TransferBatch{From: from, Sender: from, States: make([]transport.KeyState, 0, restoreBatch)}
	var restored, refused int
	flush := func() {
		cb, _ := n.checkTransfer(batch) // Sender is From: no error
		n.installHandoff(batch, cb)
		for i := range batch.States {
			if cb.refusedAt(i) {
				refused++
			} else {
				restored++
			}
		}
		for i := range batch.Penalties {
			if cb.penRefusedAt(i) {
				refused++
			} else {
				restored++
			}
		}
		batch.States, batch.Penalties = batch.States[:0], batch.Penalties[:0]
	}
	for {
		r, ok, _ := rd.Next() // Check read them all
		if !ok {
			break
		}
		if b := r.Ban; b != nil {
			if err := algo.ValidateKey(b.Key, n.cfg.MaxKeyLen, ErrInvalid); err != nil {
				refused++
				n.refusedState(from, b.Key, fmt.Errorf("%w: ban state: %w", ErrRefusedState, err))
				continue
			}
			batch.Penalties = append(batch.Penalties, transport.PenaltyState{Key: b.Key, BanUntil: b.BanUntil, Denials: b.Denials, Expire: b.Expire})
		} else {
			batch.States = append(batch.States, transport.KeyState{
				KeyHash: r.KeyHash, Limit: r.Limit, State: r.State, LastNow: r.LastNow, CallerClock: r.CallerClock,
			})
		}
		if len(batch.States)+len(batch.Penalties) == restoreBatch {
			flush()
		}
	}
	if len(batch.States)+len(batch.Penalties) > 0 {
		flush()
	}
	p.restored.Add(uint64(restored))
	n.log.Info("state snapshot restored", "file", p.path, "written_by", hdr.Node, "written_at", time.Unix(0, hdr.Written).UTC(),
		"records", records, "restored", restored, "refused", refused, "took", time.Since(t0))
}

// writeSnapshot saves every state this node holds (as owner or as backup)
// whose window is still open, and every ban state still in force, to the
// snapshot file: written to a temporary file in StateDir, synced, renamed
// over the previous snapshot, and the directory synced, so that a crash at
// any point leaves the previous snapshot or the new one. One write runs at a time. Counted in Stats.SnapshotWrites
// or, with the error logged, Stats.SnapshotFailures. final marks the last
// snapshot (Close, Abort): every write after it is skipped.
func (n *Node) writeSnapshot(why string, final bool) error {
	p := n.persist
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.final {
		return nil
	}
	p.final = final
	t0 := time.Now()
	keys, size, err := n.saveTo(p.path)
	if err != nil {
		p.failures.Add(1)
		err = fmt.Errorf("%w: %s: %w", ErrSnapshot, p.path, err)
		n.log.Error("state snapshot not written", "why", why, "err", err)
		return err
	}
	p.writes.Add(1)
	n.log.Info("state snapshot written", "why", why, "file", p.path, "keys", keys, "bytes", size, "took", time.Since(t0))
	return nil
}

// saveTo writes the snapshot to path atomically (see writeSnapshot).
func (n *Node) saveTo(path string) (keys uint64, size int64, err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, 0, err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	wall := n.clock()
	w, err := snapshot.NewWriter(f, snapshot.Header{Cluster: n.cfg.ClusterLabel, Node: n.cfg.Name, Written: wall})
	if err != nil {
		return 0, 0, err
	}
	err = n.owned.Save(wall, func(ms []store.Moved) error {
		for i := range ms {
			m := &ms[i]
			if err := w.Add(m.H, m.Limit, &m.St, m.LastNow, m.CallerClock); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	err = n.bans.Save(wall, func(bs []store.BanState) error {
		for _, b := range bs {
			if err := w.AddBan(snapshot.Ban{Key: b.Key, BanUntil: b.BanUntil, Expire: b.Expire, Denials: b.Denials}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if err = w.Close(); err != nil {
		return 0, 0, err
	}
	if err = f.Sync(); err != nil {
		return 0, 0, err
	}
	if size, err = f.Seek(0, 1); err != nil {
		return 0, 0, err
	}
	if err = f.Close(); err != nil {
		return 0, 0, err
	}
	if err = os.Rename(tmp, path); err != nil {
		return 0, 0, err
	}
	if d, derr := os.Open(dir); derr == nil {
		// The rename is durable once the directory is synced; a file system
		// that cannot sync a directory still has the renamed file.
		_ = d.Sync()
		d.Close()
	}
	return w.Records(), size, nil
}

// snapshotLoop writes a snapshot every Config.SnapshotInterval until the node
// stops.
func (n *Node) snapshotLoop() {
	n.every(n.cfg.SnapshotInterval, func() bool {
		_ = n.writeSnapshot("periodic", false)
		return true
	})
}

// persistStats fills the snapshot counters of s.
func (n *Node) persistStats(s *Stats) {
	if p := n.persist; p != nil {
		s.SnapshotWrites = p.writes.Load()
		s.SnapshotFailures = p.failures.Load()
		s.RestoredStates = p.restored.Load()
	}
}
