package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/transport"
	"github.com/ringlimit/ringlimit/transport/pki"
)

// Test 6b: the test profile runs mutual TLS; the cluster forwards among its
// members, and a peer without a certificate from the cluster's CA cannot
// forward.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3, nil)
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Burst: 5, Limit: 10, Period: time.Second}
	forwarded := 0
	for i := 0; i < 30; i++ {
		d, err := nodes[0].Allow(ctx, string(rune('a'+i)), l)
		if err != nil || d.Route == node.RouteFallback {
			t.Fatalf("check over mTLS: route %v err %v", d.Route, err)
		}
		if d.Route == node.RouteForwarded {
			forwarded++
		}
	}
	if forwarded == 0 {
		t.Fatal("no check was forwarded; the test proves nothing")
	}
	if nodes[0].Insecure() {
		t.Fatal("TestConfig node runs insecure")
	}
	check := transport.Check{Key: "k", Limit: l, Hits: 1}

	plain, err := transport.NewPool(transport.ClientConfig{ForwardTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Forward(ctx, nodes[1].PeerAddr(), check); err == nil {
		t.Fatal("a peer without TLS forwarded to an mTLS node")
	}

	wrong := foreignPool(t, "node-9")
	if _, err := wrong.Forward(ctx, nodes[1].PeerAddr(), check); err == nil {
		t.Fatal("a peer with a certificate from another CA forwarded to an mTLS node")
	}
}

// foreignPool returns a peer pool whose node certificate for member comes from
// a CA of its own, not the cluster's.
func foreignPool(t *testing.T, member string) *transport.Pool {
	t.Helper()
	other, err := nodetest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := other.NodePEM(member)
	if err != nil {
		t.Fatal(err)
	}
	_, client, err := pki.PeerTLS(other.CertPEM, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	p, err := transport.NewPool(transport.ClientConfig{TLS: client, ForwardTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
