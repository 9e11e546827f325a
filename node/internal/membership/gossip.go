package membership

import (
	"log/slog"
	"time"

	"github.com/hashicorp/memberlist"
)

// Timings are the memberlist timings a node sets; the fields are those of
// node.GossipConfig, in the same order, so that the node converts one into
// the other (their documentation is there).
type Timings struct {
	ProbeInterval           time.Duration
	ProbeTimeout            time.Duration
	GossipInterval          time.Duration
	PushPullInterval        time.Duration
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	TCPTimeout              time.Duration
	DeadNodeReclaimTime     time.Duration
}

// Gossip is how a node runs memberlist: its member name, the address it
// binds and the one it advertises (the same port), the cluster label, the
// gossip key (nil: plaintext gossip) and the timings.
type Gossip struct {
	Name, BindAddr, AdvertiseAddr, Label string
	Port                                 int
	SecretKey                            []byte
	Timings                              Timings
}

// Config returns memberlist's configuration for g: memberlist's LAN preset
// with g's fields, compression off, its hooks answered by d and its log
// lines sent to log at debug level.
func (g Gossip) Config(d Delegate, log *slog.Logger) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = g.Name
	mc.BindAddr = g.BindAddr
	mc.BindPort = g.Port
	mc.AdvertiseAddr = g.AdvertiseAddr
	mc.AdvertisePort = g.Port
	mc.Label = g.Label
	mc.SecretKey = g.SecretKey
	t := g.Timings
	mc.ProbeInterval = t.ProbeInterval
	mc.ProbeTimeout = t.ProbeTimeout
	mc.GossipInterval = t.GossipInterval
	mc.PushPullInterval = t.PushPullInterval
	mc.SuspicionMult = t.SuspicionMult
	mc.SuspicionMaxTimeoutMult = t.SuspicionMaxTimeoutMult
	mc.TCPTimeout = t.TCPTimeout
	mc.DeadNodeReclaimTime = t.DeadNodeReclaimTime
	// memberlist compresses every message by default (LZW), probes and acks
	// included: a new 64 KiB table per packet, 11% of the CPU of a 20-member
	// fleet test under load, and the acks it delays make live members look
	// dead. Gossip messages are a few hundred bytes; a member still reads
	// the compressed ones of older members.
	mc.EnableCompression = false
	mc.Delegate, mc.Events, mc.Conflict = d, d, d
	mc.Logger = nil
	mc.LogOutput = LogWriter{Log: log}
	return mc
}

// Leave broadcasts member self's leave on ml and waits, at most timeout,
// until it has been gossiped. memberlist's Leave waits for the broadcast to
// be sent to live members; when the whole cluster stops together, the others
// leave first and nobody remains to send it to, so it would wait out its
// timeout and fail. Leave therefore returns nil as soon as no other member
// is alive (checked every interval): that is an ordinary end, logged at
// INFO, not an error. It returns memberlist's error when Leave fails (a
// timeout) while other members are still alive.
func Leave(ml *memberlist.Memberlist, self string, interval, timeout time.Duration, log *slog.Logger) error {
	othersAlive := func() bool {
		for _, m := range ml.Members() {
			if m.Name != self && m.State == memberlist.StateAlive {
				return true
			}
		}
		return false
	}
	done := make(chan error, 1) // Leave returns within timeout; the buffer lets it finish alone
	go func() { done <- ml.Leave(timeout) }()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			if err != nil && !othersAlive() {
				log.Info("left: no other member is alive to hear it")
				return nil
			}
			return err
		case <-t.C:
			if !othersAlive() {
				log.Info("left: no other member is alive to hear it")
				return nil
			}
		}
	}
}

// Every calls f every interval until stop is closed or f returns false.
func Every(stop <-chan struct{}, interval time.Duration, f func() bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if !f() {
				return
			}
		}
	}
}
