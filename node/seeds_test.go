package node

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// seedDNS is a resolver whose answer for one name the test changes, counting
// the lookups.
type seedDNS struct {
	mu      sync.Mutex
	name    string
	addrs   []string
	lookups int
}

func (d *seedDNS) set(addrs ...string) {
	d.mu.Lock()
	d.addrs = addrs
	d.mu.Unlock()
}

func (d *seedDNS) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lookups
}

func (d *seedDNS) LookupHost(_ context.Context, host string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if host != d.name {
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	d.lookups++
	return slices.Clone(d.addrs), nil
}

// TestRejoinResolvesSeedNameAgain: the seed is a name (as a Kubernetes
// headless Service is) whose address changes while the node runs: first
// nobody, then member a, then member b of another cluster at the same port.
// The node follows each change on its next rejoin: it joins a, then b, which
// merges the two clusters. A name resolved once at start would stay on its
// first answer.
func TestRejoinResolvesSeedNameAgain(t *testing.T) {
	t.Parallel()
	base := testConfig()
	// a and b listen on one gossip port at two loopback addresses, so that
	// only the name's address changes, as a pod's does.
	var a, b *Node
	var port int
	for try := 0; ; try++ {
		cfg := base
		cfg.Name, cfg.BindAddr = "a", "127.0.0.2"
		na, err := New(cfg)
		if err != nil {
			t.Fatalf("New(a): %v", err)
		}
		_, ps, _ := net.SplitHostPort(na.GossipAddr())
		p, _ := strconv.Atoi(ps)
		cfg.Name, cfg.BindAddr, cfg.GossipPort = "b", "127.0.0.3", p
		nb, err := New(cfg)
		if err == nil {
			a, b, port = na, nb, p
			break
		}
		na.Abort()
		if try == 4 {
			t.Fatalf("New(b) at 127.0.0.3:%d: %v", p, err)
		}
	}
	t.Cleanup(func() { a.Close(); b.Close() })

	dns := &seedDNS{name: "peers.test.svc", addrs: []string{"127.0.0.9"}} // nobody there
	cfg := base
	cfg.Name = "c"
	cfg.Join = []string{"peers.test.svc:" + strconv.Itoa(port)}
	cfg.Resolver = dns.LookupHost
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New(c): %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if got := c.Stats().Members; got != 1 || c.Ready() {
		t.Fatalf("c before its seed name resolves to a member: %d members, ready %v; want 1, false", got, c.Ready())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dns.set("127.0.0.2")
	if err := waitConverged(ctx, a, c); err != nil {
		t.Fatalf("after the name moved to a: %v", err)
	}
	n := dns.count()
	dns.set("127.0.0.3")
	if err := waitConverged(ctx, a, b, c); err != nil {
		t.Fatalf("after the name moved to b: %v", err)
	}
	if got := dns.count(); got <= n || n < 2 {
		t.Fatalf("lookups of the seed name: %d before the move to b, %d after; want at least 2, then more", n, got)
	}
}
