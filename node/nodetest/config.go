package nodetest

import (
	"time"

	"github.com/ringlimit/ringlimit/node"
)

// TestConfig returns a fast profile for tests and single-machine clusters, run
// secure: a new in-memory cluster CA (one per call: every node of a cluster
// must use copies of one TestConfig, as StartCluster does), a random gossip
// SecretKey, and IssueCert set so New makes each member's certificate for its
// Name from that CA. Set Insecure and clear SecretKey to test the insecure
// path. It also sets loopback,
// free ports, node.FastGossip (a crash is detected in about a second), and
// short admission, debounce, idle-scan, forward (2 s, generous for -race on
// loaded machines), handoff, breaker, close and rejoin times. Name must still
// be set per node. Should crypto/rand fail, the config has no CA and New
// reports node.ErrInsecure.
func TestConfig() node.Config {
	c := node.DefaultConfig()
	if ca, err := NewTestCA(); err == nil {
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
	c.Gossip = node.FastGossip()
	return c
}
