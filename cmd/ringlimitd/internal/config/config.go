// Package config reads ringlimitd's configuration from command-line flags and
// RINGLIMIT_* environment variables, validates it, and turns it into a
// node.Config.
//
// Data flow: Register declares one flag per setting on a pflag.FlagSet, bound to
// the fields of a Config that starts from Default. After the flag set has parsed
// the command line, ApplyEnv fills every flag the command line did not set from
// its environment variable (the flag name upper-cased, dashes turned into
// underscores, prefixed with RINGLIMIT_: --gossip-port is RINGLIMIT_GOSSIP_PORT).
// The precedence is therefore flag, then environment, then default. Validate then
// checks the whole Config, and NodeConfig reads the files it names (the gossip
// key) and builds the node.Config. Every error names the flag or variable at
// fault; the daemon exits with status 2 on any of them.
//
// config.go is over 600 lines because each setting's documentation sits on
// its Config field, next to its flag registration and its validation: one
// place to read (and review) what a setting means and what it accepts.
package config

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/auth"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/transport/pki"
)

// ErrInvalid is wrapped by every error of this package: a flag, variable or file
// whose value the daemon cannot use.
var ErrInvalid = errors.New("config: invalid")

// ErrInsecure is returned, wrapping ErrInvalid, when the secure-mode material
// (--certs-dir or the --tls-*-file flags, --gossip-key-file) is missing and --insecure is not set, or
// when --insecure is set together with any of it.
var ErrInsecure = fmt.Errorf("%w: security", ErrInvalid)

// File names in CertsDir, as CockroachDB names them.
const (
	// CACertFile is the cluster CA certificate.
	CACertFile = "ca.crt"
	// NodeCertFile is this member's certificate (pki.CreateNode).
	NodeCertFile = "node.crt"
	// NodeKeyFile is this member's private key.
	NodeKeyFile = "node.key"
)

// EnvPrefix prefixes the environment variable of every flag.
const EnvPrefix = "RINGLIMIT_"

// Gossip profiles accepted by --gossip-profile.
const (
	// ProfileLAN uses memberlist's LAN timings (node.DefaultConfig): a crashed
	// member is declared dead after about 5 s.
	ProfileLAN = "lan"
	// ProfileFast uses node.FastGossip's timings (probe every 200 ms, dead after
	// about a second): for single-host clusters such as docker-compose, at the cost
	// of more gossip traffic and more false suspicions under load.
	ProfileFast = "fast"
)

// Config is the daemon's configuration. Start from Default; every field has a
// flag (named in its comment) and an environment variable (EnvName of the flag).
type Config struct {
	// NodeName is the member name, unique in the cluster (--node-name). Default:
	// the hostname.
	NodeName string
	// BindAddr is the IP address every listener binds to: gossip, gRPC and HTTP
	// (--bind-addr). Default "0.0.0.0".
	BindAddr string
	// AdvertiseAddr is the IP address peers use to reach this node
	// (--advertise-addr). Default empty: BindAddr when specific, else the first
	// private address of the host.
	AdvertiseAddr string
	// GossipPort is the memberlist TCP+UDP port (--gossip-port). Default 7946; 0
	// picks a free port.
	GossipPort int
	// GRPCPort serves the public gRPC Limiter service (--grpc-port): TLS and
	// caller authentication in secure mode; the Peer service is never served
	// there. Default 8081; 0 picks a free port.
	GRPCPort int
	// PeerPort serves the internal gRPC Peer service, for cluster members only
	// (--peer-port): mutual TLS with the cluster CA in secure mode. Default
	// 7947; 0 picks a free port.
	PeerPort int
	// HTTPPort serves the HTTP/JSON client API: POST /v1/check, GET
	// /v1/members (--http-port): HTTPS and caller authentication in secure
	// mode. Default 8080; 0 picks a free port.
	HTTPPort int
	// AdminPort serves the read-only admin API: GET /metrics, /healthz, /readyz
	// (--admin-port). It authenticates nobody and changes nothing: expose it to
	// the scraper and the orchestrator's probes only. Default 8082; 0 picks a
	// free port.
	AdminPort int
	// RedisPort serves the Redis protocol (--redis-port: redis-cell's
	// CL.THROTTLE, RL.CHECK, RL.POLICY; TLS and AUTH with a client token unless
	// --insecure). Default -1: off; 0 picks a free port.
	RedisPort int
	// Join lists the seeds' gossip addresses, "host:port" or "host" for port 7946
	// (--join, comma-separated). A host name is resolved again at every join
	// attempt (start and every RejoinInterval) and each of its addresses that
	// is not a live member already is joined: a Kubernetes headless Service's
	// name lists the members of the moment. Default none: a cluster of one
	// until others join.
	Join []string
	// ClusterLabel keeps clusters sharing a network apart (--cluster-label).
	// Default "ringlimit".
	ClusterLabel string
	// GossipKeyFile names a file holding the gossip encryption key
	// (--gossip-key-file): either the key in standard base64 (surrounding
	// whitespace ignored, as written by `ringlimit cert create-gossip-key` or
	// `head -c 32 /dev/urandom | base64`) or the raw key bytes; the key is 16,
	// 24 or 32 bytes (AES-128/192/256). Content that is valid base64 is read as
	// base64 (see ReadGossipKey). Every node needs the same key. Required unless
	// Insecure.
	GossipKeyFile string
	// CertsDir is the directory of this node's TLS material (--certs-dir), named
	// as CockroachDB names it: ca.crt (the cluster CA), node.crt (this member's
	// certificate, naming NodeName; `ringlimit cert create-node`) and node.key.
	// The peer port uses them for mutual TLS; the gRPC and HTTP client ports
	// serve node.crt and verify client certificates against ca.crt. Required
	// unless Insecure or all three of TLSCAFile, TLSCertFile and TLSKeyFile are
	// set.
	CertsDir string
	// TLSCAFile, TLSCertFile and TLSKeyFile name the cluster CA bundle (PEM,
	// one or more CA certificates), this member's certificate and its key one
	// by one (--tls-ca-file, --tls-cert-file, --tls-key-file), each replacing
	// the file of that role in CertsDir. They take cert-manager's layout as it
	// is: ca.crt, tls.crt and tls.key, possibly from two mounts (the
	// certificate from a per-pod volume, the CA bundle from a Secret). Default
	// empty: the files in CertsDir. Not allowed with Insecure.
	TLSCAFile, TLSCertFile, TLSKeyFile string
	// ClientTokenFile names a file of bearer tokens accepted on the client
	// ports besides client certificates (--client-token-file): one token per
	// line, optionally "token,name" (see auth.ParseTokens). Default empty: client
	// certificates only. Not allowed with Insecure.
	ClientTokenFile string
	// ClientScopesFile names a YAML file of credential scopes
	// (--client-scopes-file, see package scope): per token or client
	// certificate name, the key prefixes and policy domains it may use,
	// whether it may send its own limits, the longest period and largest
	// limit it may ask for, and how many keys it may hold through this node.
	// Default empty: every caller gets scope.DefaultScope (own limits on any
	// key but the policy file's, periods up to 31 days).
	ClientScopesFile string
	// Insecure runs without TLS and authentication (--insecure): no TLS or
	// caller authentication on the client ports, no TLS or admission handshake
	// between peers (secure members refuse to admit an insecure one); gossip is
	// encrypted only if GossipKeyFile is also given. The daemon logs a WARN at
	// start, /healthz and /readyz say "insecure": true, and ringlimit_insecure
	// is 1. Without it the daemon refuses to start unless CertsDir and
	// GossipKeyFile are set; with it, CertsDir and ClientTokenFile are refused.
	// Default false.
	Insecure bool
	// OwnerUnreachable is the policy for checks whose owner cannot be reached
	// (--owner-unreachable: local, fail-open or fail-closed). Default local.
	OwnerUnreachable string
	// Replication is how owners copy key states to their backups
	// (--replication: async, sync or off; see node.Replication). Default async.
	Replication string
	// ReplicationLag is how often changed states are sent to backups under
	// async replication (--replication-lag). Default 5 ms.
	ReplicationLag time.Duration
	// LeaseSize is how many keys this node can hold capacity leases of at
	// once (--lease-size; see node.LeaseConfig.Size): a member that checks
	// one key often admits from slices its owner lends it, never more than
	// one limiter would in all. Default 0: leases off (every member of a
	// cluster should use the same value).
	LeaseSize int
	// LeaseThreshold is the rate of checks of one key on this node, in
	// checks per second, from which it asks the key's owner for leases
	// (--lease-threshold). Default 100.
	LeaseThreshold float64
	// LeasePeriod is the longest a lease lives (--lease-period). Default
	// 100 ms; at most 1 h.
	LeasePeriod time.Duration
	// MaxKeys bounds the keys this node holds (--max-keys), its own and the
	// states peers hand off or replicate to it. Default 1,000,000.
	MaxKeys int
	// MaxPeriod is the longest limit period this node accepts, from clients
	// and under peers' key states (--max-period; see node.Config.MaxPeriod):
	// no key is denied longer. Default 366 days (8784h).
	MaxPeriod time.Duration
	// MaxLimit is the largest limit or burst this node accepts, as MaxPeriod
	// (--max-limit). Default 10^12.
	MaxLimit int64
	// PeerDenyFile lists revoked peer certificates, "serial:<hex>" or
	// "member:<name>" per line (--peer-deny-file; node.Config.PeerDenyFile),
	// watched and applied on change. Default: none.
	PeerDenyFile string
	// AcceptCallerTimestamps honours created_at_unix_ns from callers
	// (--accept-caller-timestamps). Needed by `ringlimit replay`. Default false.
	AcceptCallerTimestamps bool
	// ForwardTimeout bounds a forward to an owner before OwnerUnreachable decides
	// (--forward-timeout). Default 1 s.
	ForwardTimeout time.Duration
	// RejoinInterval is how often the seeds are joined again so a healed partition
	// re-forms (--rejoin-interval). Default 30 s; 0 disables.
	RejoinInterval time.Duration
	// StateDir is the directory where this node saves the key states it
	// holds, so that a restart of every member at once keeps the limits
	// (--state-dir; node.Config.StateDir): written every SnapshotInterval and
	// at shutdown, restored at start. Give each member its own directory on
	// storage that outlives the process (a PersistentVolume). Default "":
	// nothing saved; a full restart starts every key full.
	StateDir string
	// SnapshotInterval is how often the state snapshot is written with
	// StateDir (--snapshot-interval; 0: only at shutdown). Default 30 s.
	SnapshotInterval time.Duration
	// GossipProfile selects failure-detection timings (--gossip-profile: lan or
	// fast). Default lan.
	GossipProfile string
	// ShutdownTimeout bounds the graceful stop on SIGTERM or SIGINT: HTTP drain,
	// leave and handoff together (--shutdown-timeout). Default 10 s.
	ShutdownTimeout time.Duration
	// LogLevel is the minimum level logged (--log-level: debug, info, warn or
	// error). Default info.
	LogLevel string
	// LogFormat is json or text (--log-format). Default json.
	LogFormat string
	// RedisPrimary, if set (redis:// or rediss:// URL), makes Redis the primary
	// limiter of the HTTP checks, with this node's cluster deciding while Redis
	// fails (package node/failover). Default "": the cluster decides everything.
	RedisPrimary string
	// RedisBudget is the deadline of each Redis call with RedisPrimary
	// (default 50 ms); past it the cluster decides the check.
	RedisBudget time.Duration
	// PolicyFile is an envoyproxy/ratelimit-format policy file (--policy-file)
	// served by POST /v1/check_descriptors and the gRPC CheckDescriptors RPC,
	// reloaded when it changes and on SIGHUP. Default: none.
	PolicyFile string
	// MaxConns bounds the open connections of the client ports (gRPC, HTTP,
	// Redis) together (--max-conns). At the bound the oldest connection that
	// has not authenticated yet is closed to admit a new one; when all have,
	// the new one is refused. Default 0: the file-descriptor limit less a
	// reserve of max(256, limit/8) for the admin and peer ports, at most 6,000
	// (door.DefaultMaxConns).
	MaxConns int
	// MaxConnsPerIP bounds the open client-port connections from one source
	// address, an IPv4 address or an IPv6 /64 (--max-conns-per-ip). Default
	// 1024.
	MaxConnsPerIP int
	// AuthTimeout is how long a client-port connection may take to finish its
	// TLS handshake and present a valid credential before it is closed
	// (--auth-timeout). Default 10 s.
	AuthTimeout time.Duration
	// IdleTimeout closes a client-port connection idle this long: HTTP
	// keep-alive, gRPC connections without RPCs, Redis connections without
	// commands (--idle-timeout). Default 5 min.
	IdleTimeout time.Duration
	// MaxAuthFailures closes a connection at its Nth refused credential (a
	// wrong AUTH, a 401, an Unauthenticated RPC); each refusal is answered
	// after a 250 ms delay (--max-auth-failures). Default 3.
	MaxAuthFailures int
}

// Default returns the documented defaults of every field.
func Default() Config {
	d := node.DefaultConfig()
	return Config{
		NodeName:         d.Name,
		BindAddr:         d.BindAddr,
		GossipPort:       d.GossipPort,
		GRPCPort:         8081,
		PeerPort:         d.PeerPort,
		HTTPPort:         8080,
		AdminPort:        8082,
		RedisPort:        -1,
		ClusterLabel:     d.ClusterLabel,
		OwnerUnreachable: d.OwnerUnreachable.String(),
		Replication:      d.Replication.String(),
		ReplicationLag:   d.ReplicationLag,
		LeaseSize:        d.Lease.Size,
		LeaseThreshold:   d.Lease.Threshold,
		LeasePeriod:      d.Lease.Period,
		MaxKeys:          d.MaxKeys,
		MaxPeriod:        d.MaxPeriod,
		MaxLimit:         d.MaxLimit,
		ForwardTimeout:   d.ForwardTimeout,
		RejoinInterval:   d.RejoinInterval,
		SnapshotInterval: d.SnapshotInterval,
		GossipProfile:    ProfileLAN,
		ShutdownTimeout:  10 * time.Second,
		LogLevel:         "info",
		LogFormat:        "json",
		RedisBudget:      50 * time.Millisecond,
		MaxConnsPerIP:    1024,
		AuthTimeout:      10 * time.Second,
		IdleTimeout:      5 * time.Minute,
		MaxAuthFailures:  3,
	}
}

// Register declares one flag per field of c on fs, with c's current values as
// defaults, and binds the flags to c's fields.
func (c *Config) Register(fs *pflag.FlagSet) {
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "member name, unique in the cluster (default: hostname)")
	fs.StringVar(&c.BindAddr, "bind-addr", c.BindAddr, "IP address the gossip, gRPC and HTTP listeners bind to")
	fs.StringVar(&c.AdvertiseAddr, "advertise-addr", c.AdvertiseAddr, "IP address peers use to reach this node (default: bind address, or the first private IP when binding 0.0.0.0)")
	fs.IntVar(&c.GossipPort, "gossip-port", c.GossipPort, "memberlist TCP+UDP port (0 = any free port)")
	fs.IntVar(&c.GRPCPort, "grpc-port", c.GRPCPort, "public gRPC Limiter port; TLS + client certificate or bearer token unless --insecure (0 = any free port)")
	fs.IntVar(&c.PeerPort, "peer-port", c.PeerPort, "internal gRPC Peer port, cluster members only; mutual TLS unless --insecure (0 = any free port)")
	fs.IntVar(&c.HTTPPort, "http-port", c.HTTPPort, "HTTP client API port: POST /v1/check, GET /v1/members; HTTPS + client certificate or bearer token unless --insecure (0 = any free port)")
	fs.IntVar(&c.RedisPort, "redis-port", c.RedisPort, "Redis-protocol port (CL.THROTTLE); TLS + AUTH <client token> unless --insecure (-1 = off, 0 = any free port)")
	fs.IntVar(&c.AdminPort, "admin-port", c.AdminPort, "read-only admin HTTP port: GET /metrics, /healthz, /readyz; no authentication (0 = any free port)")
	fs.StringSliceVar(&c.Join, "join", c.Join, "comma-separated seed gossip addresses host[:port]; a name is resolved again at every rejoin (a headless Service's name)")
	fs.StringVar(&c.ClusterLabel, "cluster-label", c.ClusterLabel, "cluster label; gossip from another label is dropped")
	fs.StringVar(&c.GossipKeyFile, "gossip-key-file", c.GossipKeyFile, "file with the gossip encryption key: base64 or raw, 16/24/32 bytes (required unless --insecure)")
	fs.StringVar(&c.CertsDir, "certs-dir", c.CertsDir, "directory with ca.crt, node.crt and node.key, made by 'ringlimit cert' (required unless --insecure or all three --tls-*-file flags are set)")
	fs.StringVar(&c.TLSCAFile, "tls-ca-file", c.TLSCAFile, "cluster CA bundle (PEM), instead of ca.crt in --certs-dir; cert-manager's ca.crt")
	fs.StringVar(&c.TLSCertFile, "tls-cert-file", c.TLSCertFile, "this member's certificate, instead of node.crt in --certs-dir; cert-manager's tls.crt")
	fs.StringVar(&c.TLSKeyFile, "tls-key-file", c.TLSKeyFile, "this member's private key, instead of node.key in --certs-dir; cert-manager's tls.key")
	fs.StringVar(&c.ClientScopesFile, "client-scopes-file", c.ClientScopesFile, "YAML file of what each client credential may do: key prefixes, policy domains, own limits or policy only, max period and limit, max keys (default: own limits on any key, periods up to 31 days)")
	fs.StringVar(&c.ClientTokenFile, "client-token-file", c.ClientTokenFile, "file of bearer tokens accepted on the client ports besides client certificates: one \"token[,name]\" per line")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "no TLS and no authentication on any port (gossip encrypted only with --gossip-key-file): for a laptop, never a deployment")
	fs.StringVar(&c.OwnerUnreachable, "owner-unreachable", c.OwnerUnreachable, "policy when a key's owner and its backup are unreachable: local (this node's share of the limit), fail-open or fail-closed")
	fs.StringVar(&c.Replication, "replication", c.Replication, "how owners copy key states to their backup: async (every --replication-lag), sync (a decision waits for the backup) or off")
	fs.DurationVar(&c.ReplicationLag, "replication-lag", c.ReplicationLag, "how often changed key states are sent to their backup under async replication: the state a crash can lose")
	fs.IntVar(&c.LeaseSize, "lease-size", c.LeaseSize, "keys this node can hold capacity leases of at once (0: leases off); set the same value on every member")
	fs.Float64Var(&c.LeaseThreshold, "lease-threshold", c.LeaseThreshold, "checks per second of one key on this node from which it asks the key's owner for a lease")
	fs.DurationVar(&c.LeasePeriod, "lease-period", c.LeasePeriod, "the longest a capacity lease lives (at most 1h)")
	fs.IntVar(&c.MaxKeys, "max-keys", c.MaxKeys, "maximum keys held by this node, its own and those peers hand off or replicate to it")
	fs.DurationVar(&c.MaxPeriod, "max-period", c.MaxPeriod, "longest limit period accepted from clients and in peers' key states: no key is denied longer")
	fs.Int64Var(&c.MaxLimit, "max-limit", c.MaxLimit, "largest limit or burst accepted from clients and in peers' key states")
	fs.StringVar(&c.PeerDenyFile, "peer-deny-file", c.PeerDenyFile, "revoked peer certificates, one \"serial:<hex>\" or \"member:<name>\" per line; watched and applied on change (needs secure mode)")
	fs.BoolVar(&c.AcceptCallerTimestamps, "accept-caller-timestamps", c.AcceptCallerTimestamps, "honour caller timestamps (created_at_unix_ns); needed for replays")
	fs.DurationVar(&c.ForwardTimeout, "forward-timeout", c.ForwardTimeout, "deadline of a forward to a key's owner")
	fs.DurationVar(&c.RejoinInterval, "rejoin-interval", c.RejoinInterval, "how often seeds are joined again so partitions heal (0 = never)")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "directory where this node saves its key states so a restart of every member at once keeps the limits (default: none, a full restart starts every key full)")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", c.SnapshotInterval, "with --state-dir: how often the key states are saved, besides at shutdown (0 = only at shutdown)")
	fs.StringVar(&c.GossipProfile, "gossip-profile", c.GossipProfile, "failure-detection timings: lan (dead after ~5 s) or fast (~1 s, single host)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "bound on the graceful stop (HTTP drain, leave, handoff)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "json or text")
	fs.StringVar(&c.RedisPrimary, "redis-primary", c.RedisPrimary, "redis:// or rediss:// URL (Sentinel with ?master_name=, Cluster with ?addr= seeds): decide checks on Redis first, on the cluster while Redis fails (default: cluster only)")
	fs.IntVar(&c.MaxConns, "max-conns", c.MaxConns, "open connections of the gRPC, HTTP and Redis ports together; at the bound unauthenticated ones make room (0 = the fd limit less a reserve for the admin and peer ports, at most 6000)")
	fs.IntVar(&c.MaxConnsPerIP, "max-conns-per-ip", c.MaxConnsPerIP, "open client-port connections from one IPv4 address or IPv6 /64")
	fs.DurationVar(&c.AuthTimeout, "auth-timeout", c.AuthTimeout, "a client-port connection not through TLS and authentication by then is closed")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "a client-port connection idle this long is closed")
	fs.IntVar(&c.MaxAuthFailures, "max-auth-failures", c.MaxAuthFailures, "a connection is closed at this many refused credentials (each answered after 250ms)")
	fs.DurationVar(&c.RedisBudget, "redis-budget", c.RedisBudget, "with --redis-primary: deadline of each Redis call, after which the cluster decides")
	fs.StringVar(&c.PolicyFile, "policy-file", c.PolicyFile, "policy file (envoyproxy/ratelimit format) for /v1/check_descriptors; reloaded on change and on SIGHUP")
}

// EnvName returns the environment variable of the flag named flag:
// EnvName("gossip-port") == "RINGLIMIT_GOSSIP_PORT".
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// ApplyEnv sets every flag of fs that the command line did not set from its
// environment variable, if lookupEnv finds one (os.LookupEnv in the daemon).
// A variable set to the empty string counts as set. Call it after fs.Parse.
func ApplyEnv(fs *pflag.FlagSet, lookupEnv func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		name := EnvName(f.Name)
		v, ok := lookupEnv(name)
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s=%q: %v", ErrInvalid, name, v, err))
		}
	})
	return errors.Join(errs...)
}

// Load parses args (without the program name) and the environment into a
// validated Config starting from Default. It is Register, Parse, ApplyEnv and
// Validate in one call, for callers that do not need the flag set.
func Load(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	c := Default()
	fs := pflag.NewFlagSet("ringlimitd", pflag.ContinueOnError)
	fs.SetOutput(discard{})
	c.Register(fs)
	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("%w: unexpected argument %q", ErrInvalid, fs.Arg(0))
	}
	if err := ApplyEnv(fs, lookupEnv); err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Validate checks every field and returns the first problem found, naming its
// flag and variable. It normalizes Join (spaces trimmed, empty entries dropped)
// and reads no file.
func (c *Config) Validate() error {
	bad := func(flag string, v any, why string) error {
		return fmt.Errorf("%w: --%s (%s) = %v: %s", ErrInvalid, flag, EnvName(flag), v, why)
	}
	if strings.TrimSpace(c.NodeName) == "" {
		return bad("node-name", `""`, "must not be empty")
	}
	if c.RedisPrimary != "" && !strings.HasPrefix(c.RedisPrimary, "redis://") && !strings.HasPrefix(c.RedisPrimary, "rediss://") {
		return bad("redis-primary", strconv.Quote(c.RedisPrimary), "want a redis:// or rediss:// URL")
	}
	if c.RedisBudget <= 0 {
		return bad("redis-budget", c.RedisBudget, "must be > 0")
	}
	if net.ParseIP(c.BindAddr) == nil {
		return bad("bind-addr", strconv.Quote(c.BindAddr), "want an IP address")
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return bad("advertise-addr", strconv.Quote(c.AdvertiseAddr), "want an IP address")
	}
	for _, p := range []struct {
		flag string
		v    int
	}{{"gossip-port", c.GossipPort}, {"grpc-port", c.GRPCPort}, {"peer-port", c.PeerPort}, {"http-port", c.HTTPPort}, {"admin-port", c.AdminPort}} {
		if p.v < 0 || p.v > 65535 {
			return bad(p.flag, p.v, "want 0..65535")
		}
	}
	if c.RedisPort < -1 || c.RedisPort > 65535 {
		return bad("redis-port", c.RedisPort, "want -1 (off) or 0..65535")
	}
	if err := c.distinctPorts(); err != nil {
		return err
	}
	seeds := c.Join[:0:0]
	for _, s := range c.Join {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if host, port, err := net.SplitHostPort(s); err == nil {
			if host == "" {
				return bad("join", strconv.Quote(s), "empty host")
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return bad("join", strconv.Quote(s), "want host:port with a port in 1..65535")
			}
		} else if strings.ContainsAny(s, ":/ ") && net.ParseIP(s) == nil {
			return bad("join", strconv.Quote(s), "want host:port or host")
		}
		seeds = append(seeds, s)
	}
	c.Join = seeds
	if c.ClusterLabel == "" {
		return bad("cluster-label", `""`, "must not be empty")
	}
	if _, err := node.ParsePolicy(c.OwnerUnreachable); err != nil {
		return bad("owner-unreachable", strconv.Quote(c.OwnerUnreachable), "want local, fail-open or fail-closed")
	}
	if _, err := node.ParseReplication(c.Replication); err != nil {
		return bad("replication", strconv.Quote(c.Replication), "want async, sync or off")
	}
	if c.ReplicationLag <= 0 {
		return bad("replication-lag", c.ReplicationLag, "must be > 0")
	}
	if c.LeaseSize < 0 || c.LeaseSize > 1<<24 {
		return bad("lease-size", c.LeaseSize, "want 0 (off) to 16777216")
	}
	if c.LeaseSize > 0 && !(c.LeaseThreshold > 0 && c.LeaseThreshold <= 1e12) {
		return bad("lease-threshold", c.LeaseThreshold, "want > 0 and <= 1e12 checks/s")
	}
	if c.LeaseSize > 0 && (c.LeasePeriod <= 0 || c.LeasePeriod > time.Hour) {
		return bad("lease-period", c.LeasePeriod, "want > 0 and <= 1h")
	}
	if c.MaxKeys <= 0 {
		return bad("max-keys", c.MaxKeys, "must be > 0")
	}
	if c.MaxPeriod <= 0 || c.MaxPeriod > algo.MaxDuration {
		return bad("max-period", c.MaxPeriod, fmt.Sprintf("must be in (0, %v]", algo.MaxDuration))
	}
	if c.MaxLimit <= 0 {
		return bad("max-limit", c.MaxLimit, "must be > 0")
	}
	if c.ForwardTimeout <= 0 {
		return bad("forward-timeout", c.ForwardTimeout, "must be > 0")
	}
	if c.RejoinInterval < 0 {
		return bad("rejoin-interval", c.RejoinInterval, "must be >= 0")
	}
	if c.SnapshotInterval < 0 {
		return bad("snapshot-interval", c.SnapshotInterval, "must be >= 0")
	}
	if c.GossipProfile != ProfileLAN && c.GossipProfile != ProfileFast {
		return bad("gossip-profile", strconv.Quote(c.GossipProfile), "want lan or fast")
	}
	if c.MaxConns < 0 {
		return bad("max-conns", c.MaxConns, "must be >= 0 (0: from the fd limit)")
	}
	if c.MaxConnsPerIP <= 0 {
		return bad("max-conns-per-ip", c.MaxConnsPerIP, "must be > 0")
	}
	if c.MaxAuthFailures <= 0 {
		return bad("max-auth-failures", c.MaxAuthFailures, "must be > 0")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"auth-timeout", c.AuthTimeout}, {"idle-timeout", c.IdleTimeout}} {
		if d.v <= 0 {
			return bad(d.name, d.v, "must be > 0")
		}
	}
	if c.ShutdownTimeout <= 0 {
		return bad("shutdown-timeout", c.ShutdownTimeout, "must be > 0")
	}
	if _, err := c.Level(); err != nil {
		return err
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return bad("log-format", strconv.Quote(c.LogFormat), "want json or text")
	}
	return c.validateSecurity()
}

// validateSecurity requires the secure-mode material unless Insecure, and
// refuses Insecure together with certificates or client tokens (ambiguous:
// which was meant?). Insecure with a gossip key is allowed, as node allows it:
// gossip stays encrypted, everything else is open.
func (c *Config) validateSecurity() error {
	set := []struct{ flag, v string }{
		{"certs-dir", c.CertsDir}, {"gossip-key-file", c.GossipKeyFile}, {"client-token-file", c.ClientTokenFile},
		{"tls-ca-file", c.TLSCAFile}, {"tls-cert-file", c.TLSCertFile}, {"tls-key-file", c.TLSKeyFile},
	}
	if c.Insecure && c.PeerDenyFile != "" {
		return fmt.Errorf("%w: --insecure with --peer-deny-file: drop one or the other", ErrInsecure)
	}
	for _, f := range set {
		if c.Insecure && f.v != "" && f.flag != "gossip-key-file" {
			return fmt.Errorf("%w: --insecure with --%s: drop one or the other", ErrInsecure, f.flag)
		}
	}
	if c.Insecure {
		return nil
	}
	files := set[3:]
	var given, absent []string
	for _, f := range files {
		if f.v != "" {
			given = append(given, "--"+f.flag)
		} else {
			absent = append(absent, "--"+f.flag)
		}
	}
	var missing []string
	switch {
	case c.CertsDir != "" || len(absent) == 0:
	case len(given) == 0:
		missing = append(missing, "--certs-dir ("+EnvName("certs-dir")+")")
	default:
		return fmt.Errorf("%w: %s without --certs-dir needs %s too", ErrInsecure, strings.Join(given, ", "), strings.Join(absent, " and "))
	}
	if c.GossipKeyFile == "" {
		missing = append(missing, "--gossip-key-file ("+EnvName("gossip-key-file")+")")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: ringlimitd runs secure unless told otherwise and needs %s; create the material with "+
			"`ringlimit cert create-ca`, `create-node`, `create-gossip-key` (or give cert-manager's ca.crt, tls.crt and tls.key "+
			"with --tls-ca-file, --tls-cert-file and --tls-key-file), or pass --insecure (no TLS, no authentication: laptops only)",
			ErrInsecure, strings.Join(missing, " and "))
	}
	return nil
}

// distinctPorts refuses two listeners on one non-zero port.
func (c *Config) distinctPorts() error {
	ports := []struct {
		flag string
		v    int
	}{{"gossip-port", c.GossipPort}, {"grpc-port", c.GRPCPort}, {"peer-port", c.PeerPort}, {"http-port", c.HTTPPort}, {"admin-port", c.AdminPort}, {"redis-port", c.RedisPort}}
	for i, a := range ports {
		for _, b := range ports[i+1:] {
			if a.v > 0 && a.v == b.v {
				return fmt.Errorf("%w: --%s and --%s are both %d: every listener needs its own port", ErrInvalid, a.flag, b.flag, a.v)
			}
		}
	}
	return nil
}

// Level returns LogLevel as a slog.Level.
func (c *Config) Level() (slog.Level, error) {
	var l slog.Level
	switch strings.ToLower(c.LogLevel) {
	case "debug":
		l = slog.LevelDebug
	case "info":
		l = slog.LevelInfo
	case "warn", "warning":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		return 0, fmt.Errorf("%w: --log-level (%s) = %q: want debug, info, warn or error", ErrInvalid, EnvName("log-level"), c.LogLevel)
	}
	return l, nil
}

// HTTPAddr returns the host:port the HTTP client API listens on.
func (c *Config) HTTPAddr() string {
	return net.JoinHostPort(c.BindAddr, strconv.Itoa(c.HTTPPort))
}

// GRPCAddr returns the host:port the gRPC Limiter service listens on.
func (c *Config) GRPCAddr() string {
	return net.JoinHostPort(c.BindAddr, strconv.Itoa(c.GRPCPort))
}

// RedisAddr returns the host:port of the Redis-protocol listener, "" when
// --redis-port is off (-1).
func (c *Config) RedisAddr() string {
	if c.RedisPort < 0 {
		return ""
	}
	return net.JoinHostPort(c.BindAddr, strconv.Itoa(c.RedisPort))
}

// AdminAddr returns the host:port the admin API listens on.
func (c *Config) AdminAddr() string {
	return net.JoinHostPort(c.BindAddr, strconv.Itoa(c.AdminPort))
}

// NodeConfig returns the node.Config this Config describes, starting from
// node.DefaultConfig (or node.FastGossip's timings for the fast gossip profile),
// with logger and metrics installed. It reads the gossip key file; node.New
// validates the rest again.
func (c *Config) NodeConfig(logger *slog.Logger, metrics node.Metrics) (node.Config, error) {
	policy, err := node.ParsePolicy(c.OwnerUnreachable)
	if err != nil {
		return node.Config{}, fmt.Errorf("%w: --owner-unreachable: %w", ErrInvalid, err)
	}
	nc := node.DefaultConfig()
	if c.GossipProfile == ProfileFast {
		nc.Gossip = node.FastGossip()
	}
	nc.Name = c.NodeName
	nc.BindAddr = c.BindAddr
	nc.AdvertiseAddr = c.AdvertiseAddr
	nc.GossipPort = c.GossipPort
	nc.PeerPort = c.PeerPort
	nc.Insecure = c.Insecure
	nc.Join = append([]string(nil), c.Join...)
	nc.ClusterLabel = c.ClusterLabel
	if !c.Insecure {
		ca, cert, key := c.certFiles()
		nc.TLSCAFile, nc.TLSCertFile, nc.TLSKeyFile = ca.path, cert.path, key.path
	}
	nc.OwnerUnreachable = policy
	if nc.Replication, err = node.ParseReplication(c.Replication); err != nil {
		return node.Config{}, fmt.Errorf("%w: --replication: %w", ErrInvalid, err)
	}
	nc.ReplicationLag = c.ReplicationLag
	nc.Lease.Size, nc.Lease.Threshold, nc.Lease.Period = c.LeaseSize, c.LeaseThreshold, c.LeasePeriod
	nc.MaxKeys = c.MaxKeys
	nc.MaxPeriod = c.MaxPeriod
	nc.MaxLimit = c.MaxLimit
	nc.PeerDenyFile = c.PeerDenyFile
	nc.AcceptCallerTimestamps = c.AcceptCallerTimestamps
	nc.ForwardTimeout = c.ForwardTimeout
	nc.RejoinInterval = c.RejoinInterval
	nc.StateDir = c.StateDir
	nc.SnapshotInterval = c.SnapshotInterval
	nc.CloseTimeout = c.ShutdownTimeout
	nc.Logger = logger
	nc.Metrics = metrics
	if c.GossipKeyFile != "" {
		key, err := ReadGossipKey(c.GossipKeyFile)
		if err != nil {
			return node.Config{}, err
		}
		nc.SecretKey = key
	}
	return nc, nil
}

// tlsFile is one TLS file and the flag it comes from.
type tlsFile struct{ path, flag string }

// certFiles returns the CA bundle, the member certificate and its key: each
// file flag when set, else its file in CertsDir.
func (c *Config) certFiles() (ca, cert, key tlsFile) {
	pick := func(v, flag, name string) tlsFile {
		if v != "" {
			return tlsFile{v, "--" + flag}
		}
		return tlsFile{filepath.Join(c.CertsDir, name), "--certs-dir"}
	}
	return pick(c.TLSCAFile, "tls-ca-file", CACertFile), pick(c.TLSCertFile, "tls-cert-file", NodeCertFile), pick(c.TLSKeyFile, "tls-key-file", NodeKeyFile)
}

// Security is what the client listeners need in secure mode.
type Security struct {
	// TLS is the server configuration of the gRPC and HTTP client ports
	// (pki.ServerTLS: node.crt, client certificates verified against ca.crt
	// when given).
	TLS *tls.Config
	// Tokens are the bearer tokens of ClientTokenFile; nil when unset.
	Tokens *auth.Tokens
	// Warnings name secret files that others, or a group this process is not
	// in, may read (node.key, the token file): the daemon logs them at WARN.
	// `ringlimit cert` writes 0600; a Kubernetes volume's 0440 owned by the
	// pod's fsGroup is not warned about.
	Warnings []string
}

// Security reads the TLS material (CertsDir, or the files of the --tls-*-file
// flags) and the token file. It returns
// the zero Security when Insecure. Errors wrap ErrInvalid and name the file.
func (c *Config) Security() (Security, error) {
	if c.Insecure {
		return Security{}, nil
	}
	caFile, certFile, keyFile := c.certFiles()
	var pems [3][]byte
	for i, f := range []tlsFile{caFile, certFile, keyFile} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return Security{}, fmt.Errorf("%w: %s: %v", ErrInvalid, f.flag, err)
		}
		pems[i] = b
	}
	cfg, err := pki.ServerTLS(pems[0], pems[1], pems[2])
	if err != nil {
		return Security{}, fmt.Errorf("%w: %s, %s, %s: %w", ErrInvalid, caFile.path, certFile.path, keyFile.path, err)
	}
	if cert, err := pki.ParseCertificate(pems[1]); err == nil {
		if name, ok := pki.MemberName(cert); !ok || name != c.NodeName {
			return Security{}, fmt.Errorf("%w: %s %s: %s names member %q, not --node-name %q (make it with `ringlimit cert create-node %s`, "+
				"or issue it with the URI SAN %s://%s/%s and the server auth and client auth usages)",
				ErrInvalid, certFile.flag, certFile.path, filepath.Base(certFile.path), name, c.NodeName, c.NodeName, pki.Scheme, pki.MemberHost, c.NodeName)
		}
	}
	sec := Security{TLS: cfg}
	secrets := []string{keyFile.path}
	if c.ClientTokenFile != "" {
		secrets = append(secrets, c.ClientTokenFile)
	}
	for _, f := range secrets {
		if fi, err := os.Stat(f); err == nil && tooOpen(fi) {
			sec.Warnings = append(sec.Warnings, fmt.Sprintf("%s is readable by group or others (mode %v): chmod 600 it", f, fi.Mode().Perm()))
		}
	}
	if c.ClientTokenFile != "" {
		sec.Tokens, err = auth.LoadTokens(c.ClientTokenFile)
		if err != nil {
			return Security{}, fmt.Errorf("%w: --client-token-file: %w", ErrInvalid, err)
		}
	}
	return sec, nil
}

// ReadGossipKey reads a gossip encryption key from path: standard base64 of 16,
// 24 or 32 bytes (surrounding whitespace ignored), or else exactly 16, 24 or 32
// raw bytes. A file whose content is valid base64 is always read as base64 (and
// refused unless it decodes to a valid length), so a mistyped base64 key is never
// taken for a raw one; a random raw key is valid base64 with negligible
// probability. The error names the file but never the key.
func ReadGossipKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --gossip-key-file: %v", ErrInvalid, err)
	}
	validLen := func(n int) bool { return n == 16 || n == 24 || n == 32 }
	if dec, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(b))); err == nil && len(dec) > 0 {
		if !validLen(len(dec)) {
			return nil, fmt.Errorf("%w: --gossip-key-file %q: base64 of %d bytes, want 16, 24 or 32", ErrInvalid, path, len(dec))
		}
		return dec, nil
	}
	if validLen(len(b)) {
		return b, nil
	}
	return nil, fmt.Errorf("%w: --gossip-key-file %q: want 16, 24 or 32 bytes, raw or base64 (file has %d bytes)", ErrInvalid, path, len(b))
}
