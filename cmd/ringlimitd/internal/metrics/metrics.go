// Package metrics implements node.Metrics with Prometheus collectors on a
// registry of its own (never the global default), and serves it for /metrics.
//
// Data flow: the node calls Check, Forward, Handoff and Eviction on its check and
// membership paths; each call updates a counter or histogram without blocking.
// The gauges (keys resident, members) are GaugeFuncs that read the node's Stats
// when Prometheus scrapes, so nothing polls in the background. The registry also
// carries the Go runtime and process collectors.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// Metric names exposed on /metrics, besides the go_* and process_* collectors.
const (
	// ChecksTotal counts decided checks by result (allowed, denied), route (owner,
	// forwarded, fallback) and algorithm (algo.Kind.String).
	ChecksTotal = "ringlimit_checks_total"
	// ForwardSeconds is the round-trip time of batches forwarded to an owner, by
	// peer (as the node names it: its gRPC address) and result (ok, error).
	ForwardSeconds = "ringlimit_forward_duration_seconds"
	// ForwardBatchSize is the number of checks per forwarded batch.
	ForwardBatchSize = "ringlimit_forward_batch_size"
	// KeysResident is the number of key states this node holds as owner.
	KeysResident = "ringlimit_keys_resident"
	// FallbackKeysResident is the number of key states in the node's local
	// fallback limiter (owner unreachable, policy local).
	FallbackKeysResident = "ringlimit_fallback_keys_resident"
	// Members is the number of cluster members this node sees, itself included.
	Members = "ringlimit_members"
	// HandoffsTotal counts handoffs sent to new owners, by result (ok, error).
	HandoffsTotal = "ringlimit_handoffs_total"
	// HandoffKeysTotal counts key states sent in handoffs.
	HandoffKeysTotal = "ringlimit_handoff_keys_total"
	// HandoffSeconds is the duration of handoffs.
	HandoffSeconds = "ringlimit_handoff_duration_seconds"
	// EvictionsTotal counts key states dropped other than by handoff, by reason
	// ("idle": back to full capacity; "refused": a new key refused at MaxKeys).
	EvictionsTotal = "ringlimit_evictions_total"
	// Insecure is 1 when the daemon runs with --insecure (no TLS, no
	// authentication, no gossip encryption), 0 otherwise: alert on it.
	Insecure = "ringlimit_insecure"
	// MembersRefused is the number of gossip members that failed the admission
	// handshake and own no key.
	MembersRefused = "ringlimit_members_refused"
	// PeerRefusedTotal counts what this node refused from peers, by what
	// ("member", "state", "timestamp", "sender", "not-member", "revoked":
	// node.SecurityMetrics).
	PeerRefusedTotal = "ringlimit_peer_refused_total"
	// AuthFailuresTotal counts callers refused on the client ports, by listener
	// ("grpc", "http").
	AuthFailuresTotal = "ringlimit_auth_failures_total"
	// TLSExpirySeconds is the time left until the earliest expiry of this
	// member's certificate and the CAs of its bundle, in seconds (negative once
	// expired; 0 with --insecure). Alert well before 0.
	TLSExpirySeconds = "ringlimit_tls_expiry_seconds"
	// TLSReloadsTotal counts reloads of the TLS files that changed the
	// material; TLSReloadFailuresTotal those refused (unreadable, bad PEM, a
	// key that does not match, a certificate that does not name the member or
	// chain to the bundle): the previous material stays.
	TLSReloadsTotal        = "ringlimit_tls_reloads_total"
	TLSReloadFailuresTotal = "ringlimit_tls_reload_failures_total"
	// TLSConnsClosedTotal counts accepted peer connections closed because the
	// material they were authenticated with is no longer trusted.
	TLSConnsClosedTotal = "ringlimit_tls_connections_closed_total"
	// SnapshotWritesTotal, SnapshotFailuresTotal and RestoredStatesTotal
	// count the state snapshots written (--state-dir), the writes or restores
	// that failed (a refused snapshot file is one), and the saved states
	// restored at start (node.Stats).
	SnapshotWritesTotal   = "ringlimit_snapshot_writes_total"
	SnapshotFailuresTotal = "ringlimit_snapshot_failures_total"
	RestoredStatesTotal   = "ringlimit_restored_states_total"
	// TokenReloadsTotal counts reloads of --client-token-file by result
	// ("ok", "error": the previous tokens stay).
	TokenReloadsTotal = "ringlimit_token_reloads_total"
	// ReplicationSendsTotal counts replication sends to backups by result
	// ("ok", "error"); a failed send is retried with the next one.
	ReplicationSendsTotal = "ringlimit_replication_sends_total"
	// ReplicatedStatesTotal counts key states sent to backups.
	ReplicatedStatesTotal = "ringlimit_replicated_states_total"
)

// Metrics is a node.Metrics backed by Prometheus collectors. Its methods are safe
// for concurrent use and never block.
type Metrics struct {
	reg          *prometheus.Registry
	checks       *prometheus.CounterVec
	forward      *prometheus.HistogramVec
	batchSize    prometheus.Histogram
	handoffs     *prometheus.CounterVec
	handoffKeys  prometheus.Counter
	handoffTime  prometheus.Histogram
	evictions    *prometheus.CounterVec
	peerRefused  *prometheus.CounterVec
	authFailures *prometheus.CounterVec
	tokenReloads *prometheus.CounterVec
	replSends    *prometheus.CounterVec
	replStates   prometheus.Counter
	checkCounter [2][node.RouteLease + 1][7]prometheus.Counter // [allowed][route][kind], resolved once
}

var (
	_ node.Metrics            = (*Metrics)(nil)
	_ node.SecurityMetrics    = (*Metrics)(nil)
	_ node.ReplicationMetrics = (*Metrics)(nil)
)

// New returns Metrics on a new registry. stats is called at every scrape for
// the keys and members gauges (the daemon passes the node's Stats method, which
// must be cheap and safe to call concurrently); nil reports both as 0.
func New(stats func() node.Stats) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ChecksTotal,
			Help: "Checks decided on this node, by result, route and algorithm.",
		}, []string{"result", "route", "algorithm"}),
		forward: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ForwardSeconds,
			Help:    "Round-trip time of check batches forwarded to their owner, by peer and result.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50 µs .. 1.6 s
		}, []string{"peer", "result"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    ForwardBatchSize,
			Help:    "Checks per batch forwarded to an owner.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 .. 1024
		}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: HandoffsTotal,
			Help: "Handoffs of key states sent to their new owner, by result.",
		}, []string{"result"}),
		handoffKeys: prometheus.NewCounter(prometheus.CounterOpts{
			Name: HandoffKeysTotal,
			Help: "Key states sent in handoffs.",
		}),
		handoffTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    HandoffSeconds,
			Help:    "Duration of handoffs.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 14), // 1 ms .. 8 s
		}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: EvictionsTotal,
			Help: `Key states dropped other than by handoff, by reason ("idle": back to full capacity; "refused": new key refused at max keys).`,
		}, []string{"reason"}),
		peerRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: PeerRefusedTotal,
			Help: `What this node refused from peers, by what ("member": failed admission; "state": invalid handed-off state; "timestamp": forwarded created_at not accepted; "sender": transfer from another member than its certificate names; "not-member": a peer RPC from a certificate that names no admitted member; "revoked": a peer certificate on the deny list).`,
		}, []string{"what"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: AuthFailuresTotal,
			Help: "Callers refused on the client ports (no or unknown credential), by listener.",
		}, []string{"listener"}),
		replSends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ReplicationSendsTotal,
			Help: "Replication sends of changed key states to their backup, by result (a failed send is retried with the next).",
		}, []string{"result"}),
		replStates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: ReplicatedStatesTotal,
			Help: "Key states sent to their backup by replication.",
		}),
	}
	if stats == nil {
		stats = func() node.Stats { return node.Stats{} }
	}
	keys := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: KeysResident,
		Help: "Key states held by this node as owner.",
	}, func() float64 { return float64(stats().Keys) })
	fallbackKeys := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: FallbackKeysResident,
		Help: "Key states held by this node's local fallback limiter (owner unreachable).",
	}, func() float64 { return float64(stats().FallbackKeys) })
	members := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: Members,
		Help: "Cluster members seen by this node, itself included.",
	}, func() float64 { return float64(stats().Members) })
	insecure := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: Insecure,
		Help: "1 when the daemon runs with --insecure: no TLS, no authentication, no gossip encryption.",
	}, func() float64 {
		if stats().Insecure {
			return 1
		}
		return 0
	})
	refused := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: MembersRefused,
		Help: "Gossip members that failed the admission handshake and own no key.",
	}, func() float64 { return float64(stats().Refused) })
	tlsExpiry := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: TLSExpirySeconds,
		Help: "Seconds until the earliest expiry of this member's certificate and its CA bundle (0 when insecure).",
	}, func() float64 {
		if t := stats().TLSNotAfter; !t.IsZero() {
			return time.Until(t).Seconds()
		}
		return 0
	})
	tlsReloads := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: TLSReloadsTotal,
		Help: "Reloads of the TLS files that changed the material.",
	}, func() float64 { return float64(stats().TLSReloads) })
	tlsFailures := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: TLSReloadFailuresTotal,
		Help: "Reloads of the TLS files refused; the previous material stayed.",
	}, func() float64 { return float64(stats().TLSReloadFailures) })
	tlsClosed := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: TLSConnsClosedTotal,
		Help: "Accepted peer connections closed because their TLS material is no longer trusted.",
	}, func() float64 { return float64(stats().TLSConnsClosed) })
	snapWrites := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: SnapshotWritesTotal,
		Help: "State snapshots written to --state-dir.",
	}, func() float64 { return float64(stats().SnapshotWrites) })
	snapFailures := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: SnapshotFailuresTotal,
		Help: "State snapshots not written, or refused at start (torn, altered, another version or cluster).",
	}, func() float64 { return float64(stats().SnapshotFailures) })
	restored := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: RestoredStatesTotal,
		Help: "Saved key states restored from --state-dir at start.",
	}, func() float64 { return float64(stats().RestoredStates) })
	m.tokenReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: TokenReloadsTotal,
		Help: "Reloads of the client token file by result (ok, error: the previous tokens stay).",
	}, []string{"result"})
	m.reg.MustRegister(tlsExpiry, tlsReloads, tlsFailures, tlsClosed, m.tokenReloads, snapWrites, snapFailures, restored)
	m.reg.MustRegister(m.checks, m.forward, m.batchSize, m.handoffs, m.handoffKeys, m.handoffTime, m.evictions, keys, fallbackKeys, members,
		insecure, refused, m.peerRefused, m.authFailures, m.replSends, m.replStates,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Resolve the label combinations of the hot path once, so Check costs an
	// atomic add and no map lookup; they also appear at 0 before the first check.
	for a, result := range []string{"denied", "allowed"} {
		for _, r := range []node.Route{node.RouteOwner, node.RouteForwarded, node.RouteFallback, node.RouteBackup, node.RouteCachedDenial, node.RouteLease} {
			for _, k := range algo.Kinds() {
				m.checkCounter[a][r][k] = m.checks.WithLabelValues(result, r.String(), k.String())
			}
		}
	}
	for _, reason := range []string{"idle", "refused"} {
		m.evictions.WithLabelValues(reason)
	}
	for _, result := range []string{"ok", "error"} {
		m.handoffs.WithLabelValues(result)
	}
	for _, what := range []string{"member", "state", "timestamp", "sender", "not-member", "revoked"} {
		m.peerRefused.WithLabelValues(what)
	}
	for _, l := range []string{"grpc", "http"} {
		m.authFailures.WithLabelValues(l)
	}
	for _, r := range []string{"ok", "error"} {
		m.replSends.WithLabelValues(r)
	}
	return m
}

// Registry returns the registry holding every collector.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Check counts one decided check.
func (m *Metrics) Check(kind algo.Kind, route node.Route, allowed bool) {
	a := 0
	if allowed {
		a = 1
	}
	if kind.Valid() && route >= node.RouteOwner && route <= node.RouteLease {
		m.checkCounter[a][route][kind].Inc()
		return
	}
	m.checks.WithLabelValues([]string{"denied", "allowed"}[a], route.String(), kind.String()).Inc()
}

// Forward records one forwarded batch.
func (m *Metrics) Forward(peer string, batchSize int, took time.Duration, err error) {
	m.forward.WithLabelValues(peer, result(err)).Observe(took.Seconds())
	m.batchSize.Observe(float64(batchSize))
}

// Handoff records one handoff sent.
func (m *Metrics) Handoff(keys int, took time.Duration, err error) {
	m.handoffs.WithLabelValues(result(err)).Inc()
	m.handoffKeys.Add(float64(keys))
	m.handoffTime.Observe(took.Seconds())
}

// Replicated implements node.ReplicationMetrics: one replication send of
// states key states to backup, failed when err is not nil.
func (m *Metrics) Replicated(backup string, states int, err error) {
	m.replSends.WithLabelValues(result(err)).Inc()
	if err == nil {
		m.replStates.Add(float64(states))
	}
}

// Eviction counts one key state dropped for reason.
func (m *Metrics) Eviction(reason string) {
	m.evictions.WithLabelValues(reason).Inc()
}

// PeerRefused implements node.SecurityMetrics.
func (m *Metrics) PeerRefused(what string) { m.peerRefused.WithLabelValues(what).Inc() }

// TokenReload counts a reload of the client token file: ok, or refused (err
// non-nil; the previous tokens stay).
func (m *Metrics) TokenReload(err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.tokenReloads.WithLabelValues(result).Inc()
}

// AuthFailure counts a caller refused on listener ("grpc" or "http").
func (m *Metrics) AuthFailure(listener string) { m.authFailures.WithLabelValues(listener).Inc() }

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}
