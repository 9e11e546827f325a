package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/transport/pki"
)

// This file is a minimal copy of nodetest (TestConfig, TestCA, StartCluster,
// WaitConverged) for node's own tests, which cannot import nodetest: nodetest
// imports node. Tests that need no internals live in node_test and use
// nodetest itself.

// testCA is nodetest.TestCA: an in-memory cluster CA and gossip key.
type testCA struct {
	CertPEM, KeyPEM, GossipKey []byte
}

func newTestCA() (*testCA, error) {
	cert, key, err := pki.CreateCA("ringlimit test CA", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	gk := make([]byte, 32)
	if _, err := rand.Read(gk); err != nil {
		return nil, err
	}
	return &testCA{CertPEM: cert, KeyPEM: key, GossipKey: gk}, nil
}

func (ca *testCA) NodePEM(member string) (certPEM, keyPEM []byte, err error) {
	return pki.CreateNode(ca.CertPEM, ca.KeyPEM, member, []string{"127.0.0.1", "localhost"}, 24*time.Hour)
}

func (ca *testCA) ClientPEM(client string) (certPEM, keyPEM []byte, err error) {
	return pki.CreateClient(ca.CertPEM, ca.KeyPEM, client, 24*time.Hour)
}

func (ca *testCA) issue(member string) (caPEM, certPEM, keyPEM []byte, err error) {
	certPEM, keyPEM, err = ca.NodePEM(member)
	return ca.CertPEM, certPEM, keyPEM, err
}

// Config is nodetest.TestCA.Config.
func (ca *testCA) Config(base Config, name string) (Config, error) {
	cert, key, err := ca.NodePEM(name)
	if err != nil {
		return Config{}, err
	}
	base.Name = name
	base.Insecure = false
	base.TLSCAFile, base.TLSCertFile, base.TLSKeyFile = "", "", ""
	base.TLSCAPEM, base.TLSCertPEM, base.TLSKeyPEM = ca.CertPEM, cert, key
	base.SecretKey = ca.GossipKey
	base.IssueCert = nil
	return base, nil
}

// testConfig is nodetest.TestConfig.
func testConfig() Config {
	c, _ := testConfigCA()
	return c
}

// testConfigCA is testConfig that also returns its CA (nil if crypto/rand
// failed).
func testConfigCA() (Config, *testCA) {
	c := DefaultConfig()
	ca, err := newTestCA()
	if err == nil {
		c.IssueCert = ca.issue
		c.SecretKey = ca.GossipKey
	}
	c.Name = ""
	c.BindAddr = "127.0.0.1"
	c.GossipPort = 0
	c.PeerPort = 0
	c.AdmissionRetry = time.Second
	c.MembershipDebounce = 5 * time.Millisecond
	c.IdleScanInterval = time.Second
	c.ForwardTimeout = 2 * time.Second
	c.HandoffTimeout = time.Second
	c.BreakerCooldown = 200 * time.Millisecond
	c.CloseTimeout = 5 * time.Second
	c.RejoinInterval = 500 * time.Millisecond
	c.Gossip = FastGossip()
	return c, ca
}

// testCluster is nodetest.Cluster.
type testCluster struct{ nodes []*Node }

func (c *testCluster) Nodes() []*Node { return c.nodes }

func (c *testCluster) Close() error {
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// startCluster is nodetest.StartCluster.
// startClusterAborted is startCluster that fails t on an error and aborts
// every member (as a crash would, without handoff) when t ends.
func startClusterAborted(ctx context.Context, t *testing.T, size int, base Config) *testCluster {
	t.Helper()
	c, err := startCluster(ctx, size, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes() {
			n.Abort()
		}
	})
	return c
}

func startCluster(ctx context.Context, size int, base Config) (*testCluster, error) {
	c := &testCluster{}
	for i := 0; i < size; i++ {
		cfg := base
		cfg.Name = fmt.Sprintf("node-%d", i)
		if i > 0 {
			cfg.Join = []string{c.nodes[0].GossipAddr()}
		}
		n, err := New(cfg)
		if err != nil {
			for _, n := range c.nodes {
				n.Abort()
			}
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	if err := waitConverged(ctx, c.nodes...); err != nil {
		for _, n := range c.nodes {
			n.Abort()
		}
		return nil, err
	}
	return c, nil
}

// waitConverged is nodetest.WaitConverged.
func waitConverged(ctx context.Context, nodes ...*Node) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		why := ""
		for _, n := range nodes {
			if got := n.Stats().Members; got != len(nodes) {
				why = fmt.Sprintf("%s sees %d members, want %d", n.Name(), got, len(nodes))
			} else if n.RingDigest() != nodes[0].RingDigest() {
				why = fmt.Sprintf("%s has another partition table than %s", n.Name(), nodes[0].Name())
			}
			if why != "" {
				break
			}
		}
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster did not converge: %s: %w", why, ctx.Err())
		case <-t.C:
		}
	}
}
