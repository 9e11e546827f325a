package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// value reads a counter without prometheus/testutil (whose diff dependency is
// not in go.mod).
func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var pb dto.Metric
	if err := c.Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetCounter().GetValue()
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("/metrics: got %d, want 200", w.Code)
	}
	b, _ := io.ReadAll(w.Body)
	return string(b)
}

func TestNamesExposed(t *testing.T) {
	t.Parallel()
	m := New(func() node.Stats { return node.Stats{Keys: 7, FallbackKeys: 2, Members: 3} })
	m.Check(algo.GCRA, node.RouteForwarded, true)
	m.Forward("node-2", 12, 3*time.Millisecond, nil)
	m.Handoff(40, 20*time.Millisecond, nil)
	m.Eviction("idle")
	body := scrape(t, m)
	for _, name := range []string{ChecksTotal, ForwardSeconds, ForwardBatchSize, KeysResident, FallbackKeysResident, Members,
		HandoffsTotal, HandoffKeysTotal, HandoffSeconds, EvictionsTotal, "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(body, "\n"+name) && !strings.HasPrefix(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	for _, line := range []string{
		`ringlimit_checks_total{algorithm="gcra",result="allowed",route="forwarded"} 1`,
		`ringlimit_checks_total{algorithm="token_bucket",result="denied",route="fallback"} 0`,
		`ringlimit_keys_resident 7`,
		`ringlimit_fallback_keys_resident 2`,
		`ringlimit_members 3`,
		`ringlimit_forward_batch_size_count 1`,
		`ringlimit_forward_duration_seconds_count{peer="node-2",result="ok"} 1`,
		`ringlimit_handoffs_total{result="ok"} 1`,
		`ringlimit_handoff_keys_total 40`,
		`ringlimit_evictions_total{reason="idle"} 1`,
		`ringlimit_evictions_total{reason="refused"} 0`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks line %q", line)
		}
	}
}

func TestCounts(t *testing.T) {
	t.Parallel()
	m := New(nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 250 {
				m.Check(algo.SlidingWindowLog, node.RouteOwner, false)
				m.Check(algo.TokenBucket, node.RouteFallback, true)
			}
		})
	}
	wg.Wait()
	m.Check(algo.Kind(0), node.RouteUnknown, true) // out of range: counted under its own labels
	m.Forward("p", 1, time.Millisecond, errors.New("unavailable"))
	m.Handoff(0, time.Millisecond, errors.New("timeout"))

	for _, tt := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"denied", "owner", "sliding_window_log"}, 1000},
		{[]string{"allowed", "fallback", "token_bucket"}, 1000},
		{[]string{"allowed", "unknown", "kind(0)"}, 1},
		{[]string{"allowed", "owner", "gcra"}, 0},
	} {
		if got := value(t, m.checks.WithLabelValues(tt.labels...)); got != tt.want {
			t.Errorf("checks%v: got %v, want %v", tt.labels, got, tt.want)
		}
	}
	if got := value(t, m.handoffs.WithLabelValues("error")); got != 1 {
		t.Errorf("handoff errors: got %v, want 1", got)
	}
	if n := strings.Count(scrape(t, m), `ringlimit_forward_duration_seconds_count{peer="p",result="error"} 1`); n != 1 {
		t.Errorf("forward error series: got %d, want 1", n)
	}
	body := scrape(t, m)
	if !strings.Contains(body, "ringlimit_keys_resident 0\n") {
		t.Errorf("keys gauge with nil stats: want 0")
	}
}

// TestRegistriesIndependent checks that two Metrics (two daemons in one
// process, as in tests) do not share state: nothing is registered globally.
func TestRegistriesIndependent(t *testing.T) {
	t.Parallel()
	a, b := New(nil), New(nil)
	a.Eviction("idle")
	if got := value(t, b.evictions.WithLabelValues("idle")); got != 0 {
		t.Errorf("second registry saw the first's eviction: got %v, want 0", got)
	}
}

// TestSecurityMetrics checks the trust-boundary series: the insecure gauge and
// the refused-members gauge follow Stats, and the refusal counters count by
// label (present at 0 before the first refusal).
func TestSecurityMetrics(t *testing.T) {
	t.Parallel()
	var insecure bool
	var mu sync.Mutex
	m := New(func() node.Stats {
		mu.Lock()
		defer mu.Unlock()
		return node.Stats{Insecure: insecure, Refused: 2}
	})
	var sm node.SecurityMetrics = m // the node finds it by type assertion
	body := scrape(t, m)
	for _, line := range []string{"ringlimit_insecure 0", "ringlimit_members_refused 2",
		`ringlimit_peer_refused_total{what="state"} 0`, `ringlimit_auth_failures_total{listener="grpc"} 0`} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	sm.PeerRefused("member")
	sm.PeerRefused("member")
	sm.PeerRefused("timestamp")
	m.AuthFailure("http")
	mu.Lock()
	insecure = true
	mu.Unlock()
	body = scrape(t, m)
	for _, line := range []string{"ringlimit_insecure 1", `ringlimit_peer_refused_total{what="member"} 2`,
		`ringlimit_peer_refused_total{what="timestamp"} 1`, `ringlimit_auth_failures_total{listener="http"} 1`} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}
