// Config's defaults (DefaultConfig), the gossip presets and the validation
// New runs.

package node

import (
	"fmt"
	"os"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport"
)

// GossipConfig holds the memberlist timings that decide how fast a crash is
// detected and how much gossip traffic the cluster makes.
type GossipConfig struct {
	// ProbeInterval between failure probes of a random member. LAN 1 s.
	ProbeInterval time.Duration
	// ProbeTimeout for a probe's ack. LAN 500 ms. Must be below ProbeInterval.
	ProbeTimeout time.Duration
	// GossipInterval between gossip rounds. LAN 200 ms.
	GossipInterval time.Duration
	// PushPullInterval between full state syncs with a random member. LAN 30 s.
	PushPullInterval time.Duration
	// SuspicionMult scales how long a suspect member has to refute before it is
	// declared dead: SuspicionMult * log10(N+1) * ProbeInterval. LAN 4.
	SuspicionMult int
	// SuspicionMaxTimeoutMult caps the suspicion timeout at this multiple of its
	// minimum while too few members confirm the suspicion (Lifeguard). LAN 6.
	SuspicionMaxTimeoutMult int
	// TCPTimeout for push/pull and join. LAN 10 s.
	TCPTimeout time.Duration
	// DeadNodeReclaimTime after which a dead or left member's name may be taken by a
	// new process at another address (a restart under the same name). LAN 10 s.
	DeadNodeReclaimTime time.Duration
}

// The defaults of Config.MaxPeriod and Config.MaxLimit.
const (
	// DefaultMaxPeriod is 366 days.
	DefaultMaxPeriod = 366 * 24 * time.Hour
	// DefaultMaxLimit is 10^12 hits per Period.
	DefaultMaxLimit int64 = 1_000_000_000_000
)

// DefaultConfig returns the configuration for a LAN deployment: the documented
// defaults of every field, memberlist's LAN timings.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Name:               host,
		BindAddr:           "0.0.0.0",
		GossipPort:         7946,
		PeerPort:           7947,
		MaxPeerClockSkew:   2 * time.Second,
		MaxPeriod:          DefaultMaxPeriod,
		MaxLimit:           DefaultMaxLimit,
		AdmissionRetry:     5 * time.Second,
		MembershipDebounce: 100 * time.Millisecond,
		ClusterLabel:       "ringlimit",
		OwnerUnreachable:   Local,
		MaxKeys:            1_000_000,
		IdleScanInterval:   10 * time.Second,
		MaxKeyLen:          transport.DefaultMaxKeyLen,
		BatchMaxItems:      500,
		BatchMaxWait:       200 * time.Microsecond,
		ForwardTimeout:     time.Second,
		DeniedCacheSize:    4096,
		DeniedCacheMaxTTL:  10 * time.Second,
		Lease:              LeaseConfig{Threshold: 100, Period: 100 * time.Millisecond, MaxShare: 0.5},
		TopDeniedKeys:      100,
		HandoffTimeout:     2 * time.Second,
		ReplicationLag:     5 * time.Millisecond,
		BreakerCooldown:    time.Second,
		CloseTimeout:       10 * time.Second,
		RejoinInterval:     30 * time.Second,
		SnapshotInterval:   DefaultSnapshotInterval,
		Gossip: GossipConfig{
			ProbeInterval:           time.Second,
			ProbeTimeout:            500 * time.Millisecond,
			GossipInterval:          200 * time.Millisecond,
			PushPullInterval:        30 * time.Second,
			SuspicionMult:           4,
			SuspicionMaxTimeoutMult: 6,
			TCPTimeout:              10 * time.Second,
			DeadNodeReclaimTime:     10 * time.Second,
		},
		Ring: ring.DefaultConfig(),
	}
}

// FastGossip returns memberlist timings for loopback and single-machine
// clusters (tests, the in-process demo, the daemon's fast profile): probes every
// 200 ms with a 150 ms timeout and a suspicion of 0.8-1.6 s detect a crash in
// about 2 s, yet tolerate the scheduling stalls of -race tests on two loaded
// cores (at 100/50 ms, members were falsely declared dead under load, and a
// false death hands its keys to fresh owners). It is deliberately not
// memberlist's Local preset, which stalls for 16-26 s at times.
func FastGossip() GossipConfig {
	return GossipConfig{
		ProbeInterval:           200 * time.Millisecond,
		ProbeTimeout:            150 * time.Millisecond,
		GossipInterval:          20 * time.Millisecond,
		PushPullInterval:        500 * time.Millisecond,
		SuspicionMult:           4,
		SuspicionMaxTimeoutMult: 2,
		TCPTimeout:              time.Second,
		DeadNodeReclaimTime:     100 * time.Millisecond,
	}
}

// validate checks every field against its documented range; the first
// field out of range is named in an error wrapping ErrInvalidConfig.
func (c *Config) validate() error {
	bad := func(field string, v any) error {
		return fmt.Errorf("%w: %s = %v", ErrInvalidConfig, field, v)
	}
	g := &c.Gossip
	for _, r := range []struct {
		field string
		bad   bool
		v     any
	}{
		{"Name", c.Name == "", `""`},
		{"BindAddr", c.BindAddr == "", `""`},
		{"GossipPort", c.GossipPort < 0 || c.GossipPort > 65535, c.GossipPort},
		{"PeerPort", c.PeerPort < 0 || c.PeerPort > 65535, c.PeerPort},
		{"MaxPeerClockSkew", c.MaxPeerClockSkew < 0, c.MaxPeerClockSkew},
		{"MaxPeriod", c.MaxPeriod <= 0 || c.MaxPeriod > algo.MaxDuration, c.MaxPeriod},
		{"MaxLimit", c.MaxLimit <= 0, c.MaxLimit},
		{"AdmissionRetry", c.AdmissionRetry <= 0, c.AdmissionRetry},
		{"MembershipDebounce", c.MembershipDebounce < 0, c.MembershipDebounce},
		{"OwnerUnreachable", c.OwnerUnreachable > FailClosed, c.OwnerUnreachable},
		{"Replication", c.Replication > ReplicationOff, c.Replication},
		{"ReplicationLag", c.ReplicationLag <= 0, c.ReplicationLag},
		{"BreakerCooldown", c.BreakerCooldown <= 0, c.BreakerCooldown},
		{"MaxKeys", c.MaxKeys <= 0, c.MaxKeys},
		{"IdleScanInterval", c.IdleScanInterval <= 0, c.IdleScanInterval},
		{"MaxKeyLen", c.MaxKeyLen <= 0, c.MaxKeyLen},
		{"BatchMaxItems", c.BatchMaxItems <= 0, c.BatchMaxItems},
		{"BatchMaxWait", c.BatchMaxWait <= 0, c.BatchMaxWait},
		{"ForwardTimeout", c.ForwardTimeout <= 0, c.ForwardTimeout},
		{"DeniedCacheSize", c.DeniedCacheSize < 0 || c.DeniedCacheSize > 1<<24, c.DeniedCacheSize},
		{"DeniedCacheMaxTTL", c.DeniedCacheSize > 0 && c.DeniedCacheMaxTTL <= 0, c.DeniedCacheMaxTTL},
		{"Lease.Size", c.Lease.Size < 0 || c.Lease.Size > 1<<24, c.Lease.Size},
		{"Lease.Threshold", c.Lease.Size > 0 && !(c.Lease.Threshold > 0 && c.Lease.Threshold <= 1e12), c.Lease.Threshold},
		{"Lease.Period", c.Lease.Size > 0 && (c.Lease.Period <= 0 || c.Lease.Period > time.Hour), c.Lease.Period},
		{"Lease.MaxShare", c.Lease.Size > 0 && !(c.Lease.MaxShare > 0 && c.Lease.MaxShare <= 1), c.Lease.MaxShare},
		{"TopDeniedKeys", c.TopDeniedKeys < 0 || c.TopDeniedKeys > 100_000, c.TopDeniedKeys},
		{"HandoffTimeout", c.HandoffTimeout <= 0, c.HandoffTimeout},
		{"CloseTimeout", c.CloseTimeout <= 0, c.CloseTimeout},
		{"SnapshotInterval", c.SnapshotInterval < 0, c.SnapshotInterval},
		{"TLSSweepInterval", c.TLSSweepInterval < 0, c.TLSSweepInterval},
		{"RejoinInterval", c.RejoinInterval < 0, c.RejoinInterval},
		{"Gossip.ProbeInterval", g.ProbeInterval <= 0, g.ProbeInterval},
		{"Gossip.ProbeTimeout", g.ProbeTimeout <= 0 || g.ProbeTimeout >= g.ProbeInterval, g.ProbeTimeout},
		{"Gossip.GossipInterval", g.GossipInterval <= 0, g.GossipInterval},
		{"Gossip.PushPullInterval", g.PushPullInterval <= 0, g.PushPullInterval},
		{"Gossip.SuspicionMult", g.SuspicionMult <= 0, g.SuspicionMult},
		{"Gossip.SuspicionMaxTimeoutMult", g.SuspicionMaxTimeoutMult <= 0, g.SuspicionMaxTimeoutMult},
		{"Gossip.TCPTimeout", g.TCPTimeout <= 0, g.TCPTimeout},
		{"Gossip.DeadNodeReclaimTime", g.DeadNodeReclaimTime < 0, g.DeadNodeReclaimTime},
	} {
		if r.bad {
			return bad(r.field, r.v)
		}
	}
	switch len(c.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return bad("len(SecretKey)", len(c.SecretKey))
	}
	if c.Insecure && c.PeerDenyFile != "" {
		return fmt.Errorf("%w: PeerDenyFile needs secure mode (peer certificates), and Insecure is set", ErrInvalidConfig)
	}
	spec := c.tlsSpec()
	return spec.Validate()
}
