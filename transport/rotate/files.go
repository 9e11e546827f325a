package rotate

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Debounce is how long a watch waits after the last change event before it
// reloads (several files of one Secret change together).
const Debounce = 100 * time.Millisecond

// Watch calls reload when one of files changes, Debounce after the last
// event, until stop is closed. It watches the directories of the files (not
// the files), so a file replaced by rename and Kubernetes' "..data" symlink
// swap are seen; an event on a name starting with ".." in a watched directory
// counts as a change of every file in it. Errors of the watcher itself are
// logged and followed by a reload (events may have been lost). It returns an
// error if a directory cannot be watched; reload runs on Watch's goroutine,
// one call at a time.
func Watch(files []string, stop <-chan struct{}, log *slog.Logger, reload func()) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rotate: watch: %w", err)
	}
	names := map[string]map[string]bool{} // dir -> base names
	for _, f := range files {
		if f == "" {
			continue
		}
		dir := filepath.Dir(f)
		if names[dir] == nil {
			if err := w.Add(dir); err != nil {
				w.Close()
				return fmt.Errorf("rotate: watch %s: %w", dir, err)
			}
			names[dir] = map[string]bool{}
		}
		names[dir][filepath.Base(f)] = true
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	go func() {
		defer w.Close()
		t := time.NewTimer(time.Hour)
		t.Stop()
		for {
			select {
			case <-stop:
				t.Stop()
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				base := filepath.Base(ev.Name)
				if names[filepath.Dir(ev.Name)][base] || strings.HasPrefix(base, "..") {
					t.Reset(Debounce)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("file watch error; reloading", "err", err)
				t.Reset(Debounce)
			case <-t.C:
				reload()
			}
		}
	}()
	return nil
}

// Files is a Source read from three PEM files (cert-manager's ca.crt,
// tls.crt and tls.key) and reloaded when they change (Watch) or on Reload.
// It is safe for concurrent use.
type Files struct {
	ca, cert, key string
	check         func(*Material) error
	log           *slog.Logger
	cur           atomic.Pointer[Material]
	reloads       atomic.Uint64
	failures      atomic.Uint64
	mu            sync.Mutex // one reload at a time; guards subs
	subs          []func()
	stop          chan struct{}
	stopOnce      sync.Once
}

// FilesConfig configures NewFiles.
type FilesConfig struct {
	// CAFile, CertFile and KeyFile name the PEM files: the CA bundle (one or
	// more CAs), this side's certificate (chain) and its private key. All
	// three are required.
	CAFile, CertFile, KeyFile string
	// Check, when set, must accept every version before it is used (the node
	// checks that the certificate names its member and chains to the bundle);
	// its error is returned by NewFiles and Reload.
	Check func(*Material) error
	// Watch makes NewFiles watch the files' directories and reload on change
	// until Close. Default off: reload only on Reload.
	Watch bool
	// Logger receives a line per reload (Info) and per refused version
	// (Error). Default: discard.
	Logger *slog.Logger
}

// NewFiles reads the three files and returns a Files serving them. Errors
// (unreadable file, bad material, Check refused) wrap ErrInvalid or the
// os error and name the file.
func NewFiles(c FilesConfig) (*Files, error) {
	if c.CAFile == "" || c.CertFile == "" || c.KeyFile == "" {
		return nil, fmt.Errorf("%w: CA, certificate and key files are all required", ErrInvalid)
	}
	f := &Files{ca: c.CAFile, cert: c.CertFile, key: c.KeyFile, check: c.Check, log: c.Logger, stop: make(chan struct{})}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	m, err := f.read()
	if err != nil {
		return nil, err
	}
	f.cur.Store(m)
	if c.Watch {
		if err := Watch([]string{c.CAFile, c.CertFile, c.KeyFile}, f.stop, f.log, func() { _ = f.Reload() }); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (f *Files) read() (*Material, error) {
	var pems [3][]byte
	for i, p := range []string{f.ca, f.cert, f.key} {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("rotate: %w", err)
		}
		pems[i] = b
	}
	m, err := NewMaterial(pems[0], pems[1], pems[2])
	if err != nil {
		return nil, fmt.Errorf("%s, %s, %s: %w", f.ca, f.cert, f.key, err)
	}
	if f.check != nil {
		if err := f.check(m); err != nil {
			return nil, fmt.Errorf("%s, %s, %s: %w", f.ca, f.cert, f.key, err)
		}
	}
	return m, nil
}

// Material returns the current material.
func (f *Files) Material() *Material { return f.cur.Load() }

// Reload reads the files again. A version that cannot be used is logged,
// counted (Failures) and returned, and the previous one stays; a good one
// replaces it for every new handshake, is counted (Reloads) and the OnChange
// functions run. Material that did not change is not counted and notifies
// nobody.
func (f *Files) Reload() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := f.read()
	if err != nil {
		f.failures.Add(1)
		f.log.Error("TLS material reload failed, keeping the previous material", "err", err)
		return err
	}
	if same(f.cur.Load(), m) {
		return nil
	}
	f.cur.Store(m)
	f.reloads.Add(1)
	f.log.Info("TLS material reloaded", "certificate", m.Cert.Leaf.Subject.CommonName,
		"serial", m.Cert.Leaf.SerialNumber.Text(16), "cas", len(m.CAs), "not_after", m.NotAfter())
	for _, s := range f.subs {
		s()
	}
	return nil
}

// OnChange registers fn to run after each reload that changed the material.
func (f *Files) OnChange(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, fn)
}

// Reloads counts the reloads that changed the material.
func (f *Files) Reloads() uint64 { return f.reloads.Load() }

// Failures counts the reloads refused (the previous material stayed).
func (f *Files) Failures() uint64 { return f.failures.Load() }

// Close stops watching. Safe to call twice.
func (f *Files) Close() { f.stopOnce.Do(func() { close(f.stop) }) }

func same(a, b *Material) bool {
	if a == nil || len(a.CAs) != len(b.CAs) || len(a.Cert.Certificate) != len(b.Cert.Certificate) {
		return false
	}
	for i := range a.CAs {
		if !a.CAs[i].Equal(b.CAs[i]) {
			return false
		}
	}
	for i := range a.Cert.Certificate {
		if string(a.Cert.Certificate[i]) != string(b.Cert.Certificate[i]) {
			return false
		}
	}
	return true
}
