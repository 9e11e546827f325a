// Package persist keeps one node's state snapshot file (node.Config.StateDir):
// where it lives, writing it so that a crash leaves the old file or the new
// one, reading and checking it whole at start, and counting both. The file
// format is package snapshot's; what a restored state may be, and where it
// goes, is the node's (it judges and installs them as a handoff).
//
// Data flow: at New the node calls Open (the directory is made and probed)
// and Restore, which reads the file, checks every record before giving out
// one, and hands the states to the node in batches. Periodically and at Close
// or Abort the node calls Write, which streams the store's states and ban
// states through a snapshot.Writer into a temporary file, syncs it, renames
// it over the previous snapshot and syncs the directory.
package persist

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/node/internal/snapshot"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

// ErrSnapshot is wrapped by the errors of writing or restoring a snapshot;
// node re-exports it as node.ErrSnapshot.
var ErrSnapshot = errors.New("node: state snapshot")

// RestoreBatch is the number of saved states Restore hands over together,
// as one handoff batch.
const RestoreBatch = 4096

// File writes and reads one node's snapshot file. Its methods are safe for
// concurrent use; one write runs at a time.
type File struct {
	path string
	mu   sync.Mutex // one write at a time
	// final is set by the snapshot of Close or Abort: the handoff that
	// follows empties the store, and a periodic write after it would replace
	// the snapshot with nothing. Under mu.
	final bool
	// writes and failures count the snapshots written and the writes or
	// restores that failed; restored the states installed by Restore.
	writes, failures, restored atomic.Uint64
}

// FileName names the snapshot of the member called name in dir: the name
// with every byte outside [A-Za-z0-9._-] turned into '_'.
func FileName(dir, name string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, name)
	return filepath.Join(dir, "ringlimit-"+clean+".snapshot")
}

// Open creates dir if needed (mode 0700), checks that a file can be created
// in it, and returns the File of member name's snapshot there. Errors come
// from the file system; the node wraps them as invalid config.
func Open(dir, name string) (*File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, ".ringlimit-probe-*")
	if err != nil {
		return nil, fmt.Errorf("%q is not writable: %w", dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return &File{path: FileName(dir, name)}, nil
}

// Path returns the snapshot file's path.
func (p *File) Path() string { return p.path }

// Counts returns the snapshots written, the writes and restores that failed,
// and the states Restore installed.
func (p *File) Counts() (writes, failures, restored uint64) {
	return p.writes.Load(), p.failures.Load(), p.restored.Load()
}

// Installer takes one batch of restored states (From and Sender name the
// file) and returns how many of them it installed and refused.
type Installer func(b transport.TransferBatch) (installed, refused int)

// Restore reads the snapshot file and gives its states to install, at most
// RestoreBatch at a time; a ban state whose key banOK refuses is skipped and
// counted as refused (banOK logs why). A missing file starts the node empty
// (INFO). One that is unreadable, torn, altered, of another format version
// or written by another cluster than cluster is refused whole before one
// state is given out (ERROR, counted as a failure) and moved aside to
// <file>.refused for inspection.
func (p *File) Restore(cluster string, log *slog.Logger, banOK func(key string) bool, install Installer) {
	t0 := time.Now()
	b, err := os.ReadFile(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		log.Info("no state snapshot to restore; starting empty", "file", p.path)
		return
	}
	if err != nil {
		p.failures.Add(1)
		log.Error("state snapshot unreadable; starting empty", "file", p.path, "err", err)
		return
	}
	// The whole file is checked (checksum, header, every record) before one
	// state is installed: a refused file leaves the store empty.
	hdr, records, err := snapshot.Check(b)
	if err == nil && hdr.Cluster != cluster {
		err = fmt.Errorf("%w: written by cluster %q, this node is in %q", ErrSnapshot, hdr.Cluster, cluster)
	}
	if err != nil {
		p.failures.Add(1)
		log.Error("state snapshot refused; starting empty", "file", p.path, "err", err)
		if rerr := os.Rename(p.path, p.path+".refused"); rerr != nil {
			log.Warn("could not move the refused snapshot aside", "file", p.path, "err", rerr)
		}
		return
	}
	rd, _ := snapshot.Open(b) // Check opened it
	from := "state snapshot " + p.path
	batch := transport.TransferBatch{From: from, Sender: from, States: make([]transport.KeyState, 0, RestoreBatch)}
	var restored, refused int
	flush := func() {
		ok, bad := install(batch)
		restored, refused = restored+ok, refused+bad
		batch.States, batch.Penalties = batch.States[:0], batch.Penalties[:0]
	}
	for {
		r, ok, _ := rd.Next() // Check read them all
		if !ok {
			break
		}
		if b := r.Ban; b != nil {
			if !banOK(b.Key) {
				refused++
				continue
			}
			batch.Penalties = append(batch.Penalties, transport.PenaltyState{Key: b.Key, BanUntil: b.BanUntil, Denials: b.Denials, Expire: b.Expire})
		} else {
			batch.States = append(batch.States, transport.KeyState{
				KeyHash: r.KeyHash, Limit: r.Limit, State: r.State, LastNow: r.LastNow, CallerClock: r.CallerClock,
			})
		}
		if len(batch.States)+len(batch.Penalties) == RestoreBatch {
			flush()
		}
	}
	if len(batch.States)+len(batch.Penalties) > 0 {
		flush()
	}
	p.restored.Add(uint64(restored))
	log.Info("state snapshot restored", "file", p.path, "written_by", hdr.Node, "written_at", time.Unix(0, hdr.Written).UTC(),
		"records", records, "restored", restored, "refused", refused, "took", time.Since(t0))
}

// Write saves every state of owned whose window is still open at wall (Unix
// ns), and every ban state of bans still in force, to the snapshot file
// under header h (h.Written is set to wall): written to a temporary file
// beside it, synced, renamed over the previous snapshot, and the directory
// synced, so that a crash at any point leaves the previous snapshot or the
// new one. Counted as a write, or, with the error (wrapping ErrSnapshot)
// logged, as a failure. final marks the last snapshot (Close, Abort): every
// write after it is skipped and returns nil.
func (p *File) Write(why string, final bool, h snapshot.Header, wall int64, owned *store.Store, bans *store.Bans, log *slog.Logger) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.final {
		return nil
	}
	p.final = final
	t0 := time.Now()
	h.Written = wall
	keys, size, err := saveTo(p.path, h, wall, owned, bans)
	if err != nil {
		p.failures.Add(1)
		err = fmt.Errorf("%w: %s: %w", ErrSnapshot, p.path, err)
		log.Error("state snapshot not written", "why", why, "err", err)
		return err
	}
	p.writes.Add(1)
	log.Info("state snapshot written", "why", why, "file", p.path, "keys", keys, "bytes", size, "took", time.Since(t0))
	return nil
}

// saveTo writes the snapshot to path atomically (see Write).
func saveTo(path string, h snapshot.Header, wall int64, owned *store.Store, bans *store.Bans) (keys uint64, size int64, err error) {
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
	w, err := snapshot.NewWriter(f, h)
	if err != nil {
		return 0, 0, err
	}
	err = owned.Save(wall, func(ms []store.Moved) error {
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
	err = bans.Save(wall, func(bs []store.BanState) error {
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
