package node

// This file is over 600 lines because Config documents each of its fields
// (default, unit, effect) where a user reads them; the code is DefaultConfig,
// FastGossip, validation and the TLS material.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/tlsrotate"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/transport/rotate"
)

// ErrInvalidConfig is returned by New, wrapped with the offending field and value,
// when a Config cannot be honoured.
var ErrInvalidConfig = tlsrotate.ErrInvalidConfig

// ErrInsecure is returned by New, wrapped with what is missing, for a Config
// with neither the material of secure mode (a cluster CA, this member's
// certificate and key, a gossip SecretKey) nor Insecure set. It wraps
// ErrInvalidConfig.
var ErrInsecure = tlsrotate.ErrInsecure

// Replication says how an owner copies its keys' states to their backup: the
// member that would own a key if its owner disappeared (the key's owner in the
// ring without the owner; every node computes the same one, see Node.Backup).
// The backup decides a key's checks while its owner is unreachable
// (RouteBackup), and after a crash the backup is the new owner and starts from
// its replica instead of a full bucket.
type Replication uint8

const (
	// ReplicationAsync sends the changed states to the backup in batches every
	// Config.ReplicationLag, on the peer connections. A crash loses at most the
	// hits the owner admitted in its last ReplicationLag (plus one send's
	// time), so a key over-admits after a crash by at most what it admits in
	// that time. Default.
	ReplicationAsync Replication = iota
	// ReplicationSync returns a Decision that changed a key's state only after
	// the backup has acknowledged the new state (group commit: checks waiting
	// together share one send). A crash loses no admitted hit; a check costs one
	// more round trip to the backup. If the backup cannot be reached within
	// ForwardTimeout the Decision is returned anyway (availability first) and the
	// state is sent again with the next batch.
	ReplicationSync
	// ReplicationOff keeps no replica: a crash resets the dead owner's keys, and
	// a forward that fails goes to the OwnerUnreachable policy at once.
	ReplicationOff
)

// String returns "async", "sync" or "off".
func (r Replication) String() string {
	switch r {
	case ReplicationAsync:
		return "async"
	case ReplicationSync:
		return "sync"
	case ReplicationOff:
		return "off"
	}
	return fmt.Sprintf("replication(%d)", uint8(r))
}

// ParseReplication maps "async", "sync" or "off" to its Replication. Any other
// string returns an error wrapping ErrInvalidConfig.
func ParseReplication(s string) (Replication, error) {
	for _, r := range []Replication{ReplicationAsync, ReplicationSync, ReplicationOff} {
		if r.String() == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("%w: replication %q (want async, sync or off)", ErrInvalidConfig, s)
}

// Policy says how a node decides a check whose owner cannot be reached (down,
// partitioned, or past the forward deadline) when neither can its backup
// (see Replication). Whatever the policy, the Decision carries RouteFallback so
// the caller can tell.
type Policy uint8

const (
	// Local decides on a limiter local to this node for that key until the owner
	// or its backup answers again, with this node's share of the limit: the
	// limit (and burst) divided by the number of members in the ring, rounded
	// up, so that the members falling back together admit about the limit, not
	// N times it. The Decision reports the share as its Limit. Default.
	Local Policy = iota
	// FailOpen admits every check while the owner is unreachable; the Decision
	// reports the limit's full capacity as Remaining (what a fresh key would have),
	// since the real state is unknown. Protects availability.
	FailOpen
	// FailClosed denies every check while the owner is unreachable (RetryAfter is
	// the forward timeout). Protects the limited resource.
	FailClosed
)

// String returns "local", "fail-open" or "fail-closed".
func (p Policy) String() string {
	switch p {
	case Local:
		return "local"
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// ParsePolicy maps "local", "fail-open" or "fail-closed" to its Policy. Any other
// string returns an error wrapping ErrInvalidConfig.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range []Policy{Local, FailOpen, FailClosed} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: policy %q (want local, fail-open or fail-closed)", ErrInvalidConfig, s)
}

// Metrics receives the node's events. Implementations must be safe for concurrent
// use and must not block: they are called on the check path. A nil Metrics in
// Config records nothing.
type Metrics interface {
	// Check is called once per decided check on the node that received it.
	Check(kind algo.Kind, route Route, allowed bool)
	// Forward is called once per batch forwarded to a peer: its size in checks,
	// the round-trip time and the transport error (nil on success).
	Forward(peer string, batchSize int, took time.Duration, err error)
	// Handoff is called once per handoff this node sends (on a ring change or on
	// Close): the number of key states and how long the transfer took.
	Handoff(keys int, took time.Duration, err error)
	// Eviction is called when a key state leaves memory for a reason other than a
	// handoff: "idle" (back to full capacity, dropping it changes no decision) or
	// "refused" (a new key was refused because the node holds MaxKeys keys).
	Eviction(reason string)
}

// SecurityMetrics is an optional interface of a Metrics: when Config.Metrics
// implements it, the node reports what it refuses from peers. It is separate so
// that existing Metrics implementations keep compiling; a daemon should
// implement it. Same rules as Metrics: safe for concurrent use, never blocks.
type SecurityMetrics interface {
	// PeerRefused is called once per refusal: what is "member" (a member failed
	// the admission handshake and stays out of the ring), "state" (a handed-off
	// or replicated key state refused, each one alone), "timestamp" (a
	// forwarded check carried created_at while AcceptCallerTimestamps is off),
	// "sender" (a Transfer whose From is not the member named by the sender's
	// certificate), "not-member" (a Peer RPC other than Hello from a
	// certificate whose name is not an admitted member), "revoked" (a peer
	// certificate on the deny list, Config.PeerDenyFile) or "gossip" (gossip
	// said an admitted member left, died or moved, and it still answered its
	// probe: it stayed in the ring; once per such rumour).
	PeerRefused(what string)
}

// Config configures a Node. Every field is read once by New and never changed
// afterwards. Start from DefaultConfig (a LAN), or nodetest.TestConfig (loopback, fast
// failure detection) in tests, and override fields.
type Config struct {
	// Name is the member name, unique in the cluster; it decides the key ranges
	// this node owns, so a node restarted under the same name takes back the same
	// keys. Default: the hostname.
	Name string
	// BindAddr is the IP address the gossip and gRPC listeners bind to.
	// Default "0.0.0.0"; nodetest.TestConfig uses "127.0.0.1".
	BindAddr string
	// AdvertiseAddr is the IP address peers use to reach this node. Default: empty,
	// meaning BindAddr when it is a specific address, else memberlist picks the
	// first private address of the host.
	AdvertiseAddr string
	// GossipPort is the memberlist TCP+UDP port. Default 7946; 0 picks a free port
	// (tests).
	GossipPort int
	// PeerPort is the port of the internal gRPC Peer service (forwarding,
	// handoff, admission handshake), the only gRPC service a node serves: the
	// public Limiter service is the daemon's, on its own port
	// (transport.NewLimiterServer with the Node as handler). Default 7947; 0
	// picks a free port (tests).
	PeerPort int
	// Join lists seed gossip addresses ("host:port", or "host" for the gossip
	// port). New joins them before it returns (an unreachable seed is not an
	// error as long as the node can start alone), and the node re-joins them
	// every RejoinInterval so a healed network partition re-forms the cluster.
	// A host name is resolved again on every attempt (see Resolver) and each of
	// its addresses is joined: a Kubernetes headless Service's name lists the
	// members of the moment. An attempt skips the seeds that are live members
	// already (a push/pull with them would merge nothing), so a settled
	// cluster's rejoins cost a lookup and no traffic. Default: none (a cluster
	// of one).
	Join []string
	// ClusterLabel is memberlist's Label: gossip packets from a cluster with a
	// different label are dropped, so two clusters on one network never merge.
	// Default "ringlimit".
	ClusterLabel string
	// SecretKey is the gossip encryption key (AES-GCM), 16, 24 or 32 bytes. A node
	// with another key cannot join. Required in secure mode (see Insecure).
	SecretKey []byte
	// TLSCertFile, TLSKeyFile and TLSCAFile name the PEM files of this member's
	// certificate (made by pki.CreateNode for Name, or `ringlimit cert
	// create-node`), its key, and the cluster CA. Alternatively TLSCertPEM,
	// TLSKeyPEM and TLSCAPEM carry the same PEM in memory; set
	// each of the three either as a file or as bytes, not both. With them and
	// SecretKey the node runs secure: peers use mutual TLS 1.3, every peer
	// certificate must chain to the CA and name the member it claims to be
	// (the certificate's ringlimit://member/<name> URI equals the memberlist
	// name), and a member enters the ring only after that handshake. The
	// certificate must name Name. Default: none.
	TLSCertFile, TLSKeyFile, TLSCAFile string
	// TLSCertPEM, TLSKeyPEM and TLSCAPEM are the in-memory form of the three
	// files above. Default: nil.
	TLSCertPEM, TLSKeyPEM, TLSCAPEM []byte
	// PeerDenyFile names the deny list of revoked peer certificates (secure
	// mode only): one entry per line, "serial:<hex>" (a certificate's serial
	// number, as `openssl x509 -serial` prints it; case and colons ignored)
	// or "member:<name>"; blank lines and # comments are ignored. New reads
	// it (unreadable or invalid: ErrInvalidConfig); the node watches it and
	// applies it again when it changes (an invalid new version is logged and
	// the previous list kept; see Node.ReloadPeerDenyList). A revoked
	// certificate fails the TLS handshake with this node in both directions,
	// its open streams end at their next message, and the member it names is
	// refused admission and leaves the ring. Default: none.
	PeerDenyFile string
	// IssueCert, when set, Insecure is off and neither the certificate nor the
	// key is given (as a file or PEM), is called once by New with Name and
	// returns the cluster CA and this member's certificate and key (PEM); the
	// CA is used unless TLSCAFile/TLSCAPEM is given. Its error fails New with
	// ErrInvalidConfig. nodetest.TestConfig sets it from an in-memory CA, so
	// every copy of one config belongs to one cluster whatever Name it is
	// given. Default: nil.
	IssueCert func(member string) (caPEM, certPEM, keyPEM []byte, err error)
	// TLSSource, instead of the TLS*File and TLS*PEM fields, gives this
	// member's TLS material at every handshake: a Go service that rotates
	// its certificates itself (or uses rotate.NewFiles with files of its
	// choosing) passes its own. Its certificate must name Name and chain to
	// its bundle at New. With the TLS*File fields the node makes its own
	// source, watches the files' directories (cert-manager's ..data swap
	// works) and reloads them on change and on ReloadTLS; PEM fields never
	// change. Default nil.
	TLSSource rotate.Source
	// TLSSweepInterval is how often the node closes the peer connections
	// whose TLS material is no longer trusted (the remote's or this node's
	// certificate no longer chains to the current CA bundle, or expired),
	// besides the sweep right after each reload of the TLS*File material:
	// the bound for a TLSSource that is not a rotate.Notifier and for
	// expiry. Default (0) 1 min.
	TLSSweepInterval time.Duration
	// CertExpiryWarning is how long before the earliest expiry of this
	// member's certificate or of a CA of its bundle the node logs a WARN
	// (checked at every sweep, logged at most once an hour), unless that
	// certificate is still in the first half of its lifetime (a short-lived
	// certificate is not late). Default (0) 14 days; negative: never.
	CertExpiryWarning time.Duration
	// Insecure runs the peer listener without TLS: anyone who reaches the peer
	// port can forward checks under limits of their choice and install key
	// states (validated against their limit, but chosen by them), and anyone who
	// reaches the gossip port (with the SecretKey, if one is set) joins the ring.
	// For a laptop or a test of the insecure path, never a default: New logs a
	// WARN and Node.Insecure reports it. With Insecure false, New refuses a
	// Config that lacks any of the secure-mode material (ErrInsecure, naming
	// what is missing). Insecure together with TLS material is ErrInvalidConfig
	// (ambiguous); a SecretKey may still encrypt gossip. Default false.
	Insecure bool
	// MaxPeerClockSkew is how far ahead of this node's clock a handed-off key
	// state may be, in ns: a state whose times (last check, GCRA TAT minus τ,
	// window starts, log entries) lie further in the future is refused as
	// implausible (see algo.State.Plausible). It must cover the clock offset
	// between members (NTP keeps a LAN within milliseconds). Default 2 s. Larger
	// lets an injected state hold a key for that much longer.
	MaxPeerClockSkew time.Duration
	// MaxPeriod is the longest Limit.Period this node accepts, in checks and in
	// the key states peers hand off or replicate: a check whose Limit has a
	// longer Period is refused with ErrLimitAboveMax (wrapping
	// transport.ErrInvalidCheck), and a peer's state under such a Limit is
	// refused (see Transfer), so a peer cannot make a state plausible by
	// claiming a limit of 1 per century. Default DefaultMaxPeriod (366 days:
	// the policy file's longest unit, a 365-day YEAR, fits). Every member
	// should have the same value: a backup with a shorter one refuses the
	// replicas of the keys above it. A GCRA or TokenBucket burst that takes
	// longer than MaxPeriod to drain (Burst × Period/Limit) is refused alike
	// (field "burst"): a burst holds no key longer than MaxPeriod.
	MaxPeriod time.Duration
	// MaxLimit is the largest Limit.Limit and Limit.Burst this node accepts,
	// in checks and in peers' key states, as MaxPeriod. Default
	// DefaultMaxLimit (10^12).
	MaxLimit int64
	// AdmissionRetry is how often a member that failed the admission handshake
	// is tried again (a member fixed meanwhile gets in). Default 5 s; nodetest.TestConfig
	// 1 s. Each attempt costs a TLS handshake (ECDSA) on both sides.
	AdmissionRetry time.Duration
	// MembershipDebounce is how long the node waits, after gossip reports a
	// membership change (a join, leave, death or new address), for further
	// changes before it rebuilds its ring: each change within the wait starts
	// it again, up to 10 × MembershipDebounce after the first, so a burst (a
	// rolling deploy, a zone outage, a cluster forming) costs one rebuild,
	// one handoff and one replica resync rather than one per member. Default
	// 100 ms; nodetest.TestConfig 5 ms; 0 rebuilds on every change. Longer coalesces
	// more, at the cost of that much longer before a change takes effect: a
	// new member owns its keys later, and checks for a dead member's keys go
	// through its backup (by the breaker) that much longer.
	MembershipDebounce time.Duration
	// OwnerUnreachable decides checks whose owner and backup cannot be reached.
	// Default Local.
	OwnerUnreachable Policy
	// Replication sets how owners copy key states to their backups. Default
	// ReplicationAsync. Each key is then held twice in the cluster (owner and
	// backup), so a node holds about twice the keys it owns, all counted
	// against MaxKeys.
	Replication Replication
	// ReplicationLag is how often an owner sends the states changed since the
	// last send to their backups, under ReplicationAsync: the bound on the
	// state a crash can lose. Default 5 ms. Shorter loses less and costs more
	// sends; each send is one request per backup, on a long-lived replication
	// stream to it, holding only the keys that changed.
	ReplicationLag time.Duration
	// BreakerCooldown is how long this node stops forwarding to a member after a
	// forward to it failed (a per-peer circuit breaker): meanwhile the member's
	// keys go straight to their backups, so a dead member slows no check. After
	// the cooldown one check tries the member again (half-open); an answer
	// closes the breaker, a failure restarts the cooldown. A ring change that
	// drops or restarts the member resets it. Default 1 s; nodetest.TestConfig 200 ms.
	BreakerCooldown time.Duration
	// AcceptCallerTimestamps lets a check carry its own time (Check.CreatedAt,
	// Unix ns) used by the owner instead of its clock: for replays and for
	// callers that need consistent reset times. Default false: such checks are
	// refused with an *InputError matching ErrCallerTimestamp, so a caller with
	// a wrong clock cannot move a key's window.
	AcceptCallerTimestamps bool
	// MaxKeys bounds the key states this node holds as owner (and separately as
	// local fallback). At the bound, idle keys (back to full capacity) are dropped
	// first; if none is idle, a check that would create a new key returns
	// ErrTooManyKeys and is counted as Eviction("refused"). An unexpired key is never
	// dropped. A key costs the same whatever its length (the node keeps its
	// 64-bit hash, not its bytes): about 34 bytes for GCRA, 44 for TokenBucket
	// and FixedWindow, 55 for SlidingWindowCounter, 140 for a SlidingWindowLog
	// holding one hit (BenchmarkMemoryPerKey). Default 1,000,000.
	MaxKeys int
	// IdleScanInterval is how often idle keys are dropped. Default 10 s. Shorter
	// frees memory sooner at the cost of more scanning.
	IdleScanInterval time.Duration
	// MaxKeyLen is the longest key accepted, in bytes. Default
	// transport.DefaultMaxKeyLen.
	MaxKeyLen int
	// BatchMaxItems flushes a micro-batch to a peer when it holds this many checks.
	// Default 500. Larger batches raise throughput and latency under load.
	BatchMaxItems int
	// BatchMaxWait flushes a micro-batch this long after its first check, unless
	// it went out earlier: at once when nothing to that peer is in flight, or when
	// it reaches BatchMaxItems. Default 200 µs. Longer waits batch more under load
	// but add up to that much latency.
	BatchMaxWait time.Duration
	// DeniedCacheSize is the number of denials a member remembers to answer
	// further checks of the same key and limit itself, without a forward,
	// until the denial's RetryAfter (or ban) ends (RouteCachedDenial). The
	// cache is exact: it denies only what the owner would deny (see
	// node/denials.go). A fixed-size direct-mapped cache of about 120 bytes
	// per entry (rounded up to a power of two). Default 4096; 0 turns it off.
	DeniedCacheSize int
	// DeniedCacheMaxTTL bounds how long a cached denial is used, whatever
	// its RetryAfter: the safety net should a member miss the invalidation a
	// reset or an unban sends. Default 10 s; must be > 0 when DeniedCacheSize
	// is.
	DeniedCacheMaxTTL time.Duration
	// Lease configures capacity leases (RouteLease, see node/lease.go): a
	// member that checks a key often (Lease.Threshold checks/s) admits
	// them itself from slices of the key's capacity that the owner takes
	// from the key's state and lends it, for at most Lease.Period, so the
	// members together never admit more than one limiter would; unused
	// slices are under-admission (at most one slice per member per
	// period). GCRA, TokenBucket and FixedWindow only. Off by default
	// (Size 0): a leased check's Remaining is what is left of the lessee's
	// slice, not of the key, and unused slices admit a little less than
	// the limit; set Lease.Size (1024 is a good start) on every member to
	// turn it on. DefaultConfig sets Threshold 100/s, Period 100 ms and
	// MaxShare 0.5.
	Lease LeaseConfig
	// TopDeniedKeys is how many keys a node keeps counting in each 10 s
	// slot of its most-limited keys (Node.TopDenied): a space-saving
	// summary of its callers' denials over the last minute, 6 slots of at
	// most this many keys each (with their bytes). Default 100; 0 turns it
	// off.
	TopDeniedKeys int
	// ForwardTimeout bounds every forward to an owner, including retries after a
	// "not owner" answer, after which OwnerUnreachable decides. Default 1 s.
	ForwardTimeout time.Duration
	// HandoffTimeout bounds a handoff: sending key states to a new owner on a ring
	// change, and how long a new owner holds checks for keys whose previous owner
	// is still alive while it waits for their states, counted from the later of
	// the ring change and the previous owner's first handshake with this node's
	// instance (a previous owner that has not heard of this node yet still
	// decides those keys itself; it is waited for at most ForwardTimeout more).
	// Default 2 s. Past it the new owner decides on what it has (possibly a
	// fresh state).
	HandoffTimeout time.Duration
	// CloseTimeout bounds Close: leave, hand off, drain. Default 10 s.
	CloseTimeout time.Duration
	// StateDir, when set, is a directory where this node saves the key states
	// it holds (those it owns and the replicas it backs up, skipping those
	// back to full capacity, and the ban states of penalized keys) so that
	// they survive a restart of every member at once, when no running member is left to hand them to: a quota of one per
	// user per day is not handed out again after a cluster-wide upgrade or a
	// power cut. The snapshot is the file ringlimit-<Name>.snapshot, written
	// atomically (temporary file, fsync, rename) every SnapshotInterval and at
	// the start of Close and of Abort; New restores it before the node decides
	// any check, judging each state as a peer's handoff (MaxPeriod, MaxLimit,
	// MaxPeerClockSkew, MaxKeys), and its first ring hands the states of keys
	// other members own to them, where the copies merge keeping the more
	// restrictive. A file that is torn, altered, of another format version or
	// of another ClusterLabel is refused (logged at ERROR, counted in
	// Stats.SnapshotFailures, moved aside to <file>.refused) and the node
	// starts empty. Hits admitted after the last snapshot of a member that
	// crashes are lost with it. New creates the directory (0700) if needed and
	// returns ErrInvalidConfig if it cannot create a file in it. Give every
	// member its own directory (or at least its own Name). Default "": off,
	// nothing is written.
	StateDir string
	// SnapshotInterval is how often a node with StateDir writes its snapshot;
	// a crash loses at most the hits admitted since the last one (what a
	// snapshot costs per key, in time and bytes: docs/operations.md). Default 30 s
	// (DefaultSnapshotInterval); 0: only at Close and Abort. Negative is
	// ErrInvalidConfig.
	SnapshotInterval time.Duration
	// RejoinInterval is how often the seeds in Join are joined again so that a
	// healed partition re-forms. Default 30 s; 0 disables.
	RejoinInterval time.Duration
	// Resolver returns the IP addresses of a host name in Join (an IP literal
	// is never passed to it). It is called on every join attempt, at New and
	// every RejoinInterval, so a seed name whose addresses change (a
	// Kubernetes headless Service as pods come and go) is followed. A name
	// that fails to resolve is skipped for that attempt, logged at DEBUG.
	// Each call gets a context bounded by Gossip.TCPTimeout and cancelled by
	// Close. Default nil: net.DefaultResolver.LookupHost (the system's
	// resolver, with its search domains; names are never cached by the node).
	Resolver func(ctx context.Context, host string) ([]string, error)
	// Gossip tunes failure detection (memberlist). Default: memberlist's LAN preset.
	Gossip GossipConfig
	// Ring configures the consistent-hash ring. Default ring.DefaultConfig().
	Ring ring.Config
	// Logger receives structured logs. Default: discard.
	Logger *slog.Logger
	// Metrics receives events for monitoring. Default: none.
	Metrics Metrics
	// Clock returns the current time in Unix ns; the owner reads it once per check.
	// Default: the wall clock read once at New plus the monotonic time elapsed
	// since, so a step of the system clock (NTP) never moves limits backwards or
	// forwards; gradual NTP slewing still applies.
	Clock func() int64

	// peerNet, set only by node's own tests, carries forwards and handoffs in
	// memory (nodetest/memnet) instead of over gRPC (the node still serves
	// gRPC).
	peerNet peerNet
	// cutNet, set only by node's own tests, carries gossip and dials the
	// gRPC peer connections through a network they can cut (a partition).
	cutNet cutNet
	// anyCertName, set only by node's own tests, lets New start with a
	// certificate that names another member (to play an impostor).
	anyCertName bool
}
