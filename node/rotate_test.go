package node_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/transport/pki"
)

// rotateBase is the fast test profile the rotation tests start from.
func rotateBase() node.Config { return nodetest.TestConfig() }

// secretDir is a directory laid out as Kubernetes mounts a cert-manager
// Secret: ca.crt, tls.crt and tls.key are symlinks into ..data, itself a
// symlink to a timestamped directory that each update replaces atomically.
type secretDir struct {
	dir string
	gen int
}

func newSecretDir(t *testing.T, ca, cert, key []byte) *secretDir {
	t.Helper()
	s := &secretDir{dir: t.TempDir()}
	s.write(t, ca, cert, key)
	for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(s.dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// write swaps in a new version as the kubelet does: a new directory, a new
// ..data_tmp symlink renamed over ..data.
func (s *secretDir) write(t *testing.T, ca, cert, key []byte) {
	t.Helper()
	s.gen++
	ts := fmt.Sprintf("..v%d", s.gen)
	if err := os.Mkdir(filepath.Join(s.dir, ts), 0o700); err != nil {
		t.Fatal(err)
	}
	for f, b := range map[string][]byte{"ca.crt": ca, "tls.crt": cert, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(s.dir, ts, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(s.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func (s *secretDir) files(c *node.Config) {
	c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = filepath.Join(s.dir, "ca.crt"), filepath.Join(s.dir, "tls.crt"), filepath.Join(s.dir, "tls.key")
}

func mustCA(t *testing.T, cn string) (cert, key []byte) {
	t.Helper()
	cert, key, err := pki.CreateCA(cn, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func mustNode(t *testing.T, caCert, caKey []byte, name string) (cert, key []byte) {
	t.Helper()
	cert, key, err := pki.CreateNode(caCert, caKey, name, []string{"127.0.0.1", "localhost"}, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRotateUnderLoad rotates the CA (old and new trusted together, then the
// old removed), every member's certificate, across a running three-member
// cluster under load, through cert-manager's Secret layout: no check fails,
// no key admits more than its limit, no forwarded batch fails (connections are replaced, not broken), no member
// restarts or leaves, no reload is refused.
func TestRotateUnderLoad(t *testing.T) {
	ca1, ca1Key := mustCA(t, "ca-1")
	ca2, ca2Key := mustCA(t, "ca-2")
	names := []string{"r0", "r1", "r2"}
	dirs := make([]*secretDir, len(names))
	nodes := make([]*node.Node, len(names))
	base := rotateBase()
	base.TLSSweepInterval = 200 * time.Millisecond
	fe := &fwdErrs{}
	base.Metrics = fe
	var lb logBuf
	base.Logger = slog.New(slog.NewTextHandler(&lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defer func() {
		if t.Failed() {
			t.Log(lb.String())
		}
	}()
	for i, name := range names {
		cert, key := mustNode(t, ca1, ca1Key, name)
		dirs[i] = newSecretDir(t, ca1, cert, key)
		c := base
		c.Name = name
		dirs[i].files(&c)
		if i > 0 {
			c.Join = []string{nodes[0].GossipAddr()}
		}
		n, err := node.New(c)
		if err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		nodes[i] = n
		defer n.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := nodetest.WaitConverged(ctx, nodes...); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every member ready (handoffs done)", 10*time.Second, func() bool {
		for _, n := range nodes {
			if !n.Ready() {
				return false
			}
		}
		return true
	})

	// Load: every key allows limit hits a day; callers on every member.
	const keys, limit = 8, 20
	lim := algo.Limit{Kind: algo.TokenBucket, Limit: limit, Burst: limit, Period: 24 * time.Hour}
	var admitted [keys]atomic.Int64
	var errs, checks, fallbacks atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := rng.Intn(keys)
				d, err := nodes[g%len(nodes)].Check(ctx, node.Check{Key: fmt.Sprintf("rot-%d", k), Limit: lim, Hits: 1})
				checks.Add(1)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				if d.Allowed {
					admitted[k].Add(1)
					if d.Route == node.RouteFallback || d.Route == node.RouteBackup {
						fallbacks.Add(1)
					}
				}
				time.Sleep(time.Millisecond)
			}
		}(g)
	}
	reloads := func(want uint64) func() bool {
		return func() bool {
			for _, n := range nodes {
				if n.Stats().TLSReloads < want {
					return false
				}
			}
			return true
		}
	}
	bundle := append(append([]byte{}, ca1...), ca2...)
	certs := make([][2][]byte, len(names))
	// 1. Trust both CAs.
	for i, name := range names {
		cert, key := mustNode(t, ca1, ca1Key, name)
		certs[i] = [2][]byte{cert, key}
		dirs[i].write(t, bundle, cert, key)
	}
	waitFor(t, "the bundle of two CAs", 10*time.Second, reloads(1))
	time.Sleep(300 * time.Millisecond) // load runs across each step
	// 2. Every member's certificate from the new CA.
	for i, name := range names {
		cert, key := mustNode(t, ca2, ca2Key, name)
		dirs[i].write(t, bundle, cert, key)
	}
	waitFor(t, "the new certificates", 10*time.Second, reloads(2))
	time.Sleep(300 * time.Millisecond)
	// 3. The old CA removed.
	for i, name := range names {
		cert, key := mustNode(t, ca2, ca2Key, name)
		dirs[i].write(t, ca2, cert, key)
	}
	waitFor(t, "the old CA removed", 10*time.Second, reloads(3))
	// Forwarding still works over connections made with the new material.
	before := checks.Load()
	waitFor(t, "checks after the rotation", 10*time.Second, func() bool { return checks.Load() > before+500 })
	close(stop)
	wg.Wait()

	fe.mu.Lock()
	if len(fe.errs) > 0 {
		t.Errorf("%d forwarded batches failed, first: %s", len(fe.errs), fe.errs[0])
	}
	fe.mu.Unlock()
	if e := errs.Load(); e != 0 {
		t.Errorf("%d of %d checks failed, first: %v", e, checks.Load(), firstErr.Load())
	}
	// A key admitted above its limit would be a double admission: a check
	// decided twice, or by a member that did not hold the key's state.
	over := 0
	for k := range admitted {
		if a := admitted[k].Load(); a > limit {
			over += int(a - limit)
			t.Errorf("key rot-%d admitted %d, limit %d", k, a, limit)
		}
	}
	t.Logf("admissions over the limit: %d", over)
	for _, n := range nodes {
		s := n.Stats()
		if s.Members != len(nodes) || s.TLSReloadFailures != 0 {
			t.Errorf("%s: %d members, %d reload failures; members %+v", n.Name(), s.Members, s.TLSReloadFailures, n.Members())
		}
	}
	var closed uint64
	for _, n := range nodes {
		closed += n.Stats().TLSConnsClosed
	}
	t.Logf("%d checks, %d errors, %d admitted by fallback or backup, %d connections closed by the sweep", checks.Load(), errs.Load(), fallbacks.Load(), closed)
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fwdErrs is a node.Metrics that keeps the forward errors.
type fwdErrs struct {
	mu   sync.Mutex
	errs []string
}

func (m *fwdErrs) Check(algo.Kind, node.Route, bool) {}
func (m *fwdErrs) Forward(peer string, _ int, _ time.Duration, err error) {
	if err != nil {
		m.mu.Lock()
		m.errs = append(m.errs, peer+": "+err.Error())
		m.mu.Unlock()
	}
}
func (m *fwdErrs) Handoff(int, time.Duration, error) {}
func (m *fwdErrs) Eviction(string)                   {}
