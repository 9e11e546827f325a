package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// A full key table answers a new key with a *KeyTableFullError (ClassFull)
// that names the bound and when the earliest key frees, counts it, and logs
// one WARN a second; keys already held still pass; the new key passes once
// the earliest key is idle.
func TestFullKeyTable(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	t0 := int64(time.Hour)
	now.Store(t0)
	lb := &logBuffer{}
	m := (&countMetrics{}).init()
	n := testNode(t, func(c *Config) {
		c.MaxKeys = 3
		c.Clock = now.Load
		c.Metrics = m
		c.IdleScanInterval = time.Hour
		c.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: 10 * time.Second} // a key is idle 10 s after its hit
	for i := range 3 {
		now.Store(t0 + int64(i)*int64(2*time.Second)) // k0 at +0 s, k1 at +2 s, k2 at +4 s
		if _, err := n.Allow(ctx, fmt.Sprint("k", i), l); err != nil {
			t.Fatal(err)
		}
	}
	now.Store(t0 + int64(5*time.Second) + 1)
	_, err := n.Allow(ctx, "k3", l)
	var fe *KeyTableFullError
	const want = "key table full: this node holds 3 keys, its MaxKeys, none of them idle; the earliest key frees in 5s"
	if !errors.As(err, &fe) || !errors.Is(err, ErrTooManyKeys) || Classify(err) != ClassFull || RetryAfter(err) != 5*time.Second || Message(err) != want {
		t.Fatalf("new key on a full table: got %v (class %v, retry after %v), want ClassFull %q", err, Classify(err), RetryAfter(err), want)
	}
	if _, err := n.Allow(ctx, "k4", l); Classify(err) != ClassFull {
		t.Fatalf("another new key: got %v, want ClassFull", err)
	}
	if got := n.Stats().RefusedKeys; got != 2 {
		t.Errorf("Stats.RefusedKeys: got %d, want 2", got)
	}
	if got := m.evictions["refused"].Load(); got != 2 {
		t.Errorf("Eviction(refused): got %d, want 2", got)
	}
	if got := strings.Count(lb.String(), "key table full"); got != 1 {
		t.Errorf("WARN lines: got %d, want 1 (one a second)\n%s", got, lb.String())
	}
	if !strings.Contains(lb.String(), "level=WARN") || !strings.Contains(lb.String(), "max_keys=3") {
		t.Errorf("WARN line: got %s, want level WARN naming max_keys=3", lb.String())
	}
	if d, err := n.Allow(ctx, "k2", algo.Limit{Kind: algo.GCRA, Limit: 1, Period: 10 * time.Second, Burst: 1}); err != nil || !d.Allowed {
		t.Errorf("a key already held: got %+v, %v; want allowed", d, err)
	}
	now.Store(t0 + int64(10*time.Second)) // k0 idle
	if _, err := n.Allow(ctx, "k3", l); err != nil {
		t.Errorf("new key once the earliest is idle: got %v, want allowed", err)
	}
}

// A check forwarded to a full owner answers the same class on the node that
// forwarded it, naming the owner and when its earliest key frees; the
// forwarding node does not fall back to deciding the key itself.
func TestFullKeyTableForwarded(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 2, func(c *Config) {
		c.MaxKeys = 2
		c.IdleScanInterval = time.Hour
		c.Replication = ReplicationOff
	})
	owner, other := nodes[0], nodes[1]
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Hour}
	var keys []string
	for i := 0; len(keys) < 3 && i < 100_000; i++ {
		if k := fmt.Sprintf("f-%d", i); ownerIs(other, k, owner) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys[:2] {
		if _, err := owner.Allow(ctx, k, l); err != nil {
			t.Fatal(err)
		}
	}
	d, err := other.Allow(ctx, keys[2], l)
	var fe *KeyTableFullError
	if !errors.As(err, &fe) || Classify(err) != ClassFull || !strings.Contains(fe.Who, owner.Name()+" (the key's owner)") ||
		fe.RetryAfter <= 59*time.Minute || fe.RetryAfter > time.Hour || !strings.Contains(Message(err), "holds 2 keys, its MaxKeys") {
		t.Fatalf("forwarded new key on a full owner: got %+v, %v; want ClassFull from %s with about an hour to wait", d, err, owner.Name())
	}
	if got := other.Stats().FallbackKeys; got != 0 {
		t.Errorf("the forwarding node's fallback holds %d keys, want 0 (a full owner decided)", got)
	}
}

// ownerIs reports whether n's ring places key on owner.
func ownerIs(n *Node, key string, owner *Node) bool {
	m, ok := n.Owner(key)
	return ok && m.Name == owner.Name()
}
