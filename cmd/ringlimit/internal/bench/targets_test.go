package bench

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/node"
)

// routed is a fake cluster member: it answers its checks in turn with the
// routes of cycle (a cached denial denies, every other route admits), after
// delay, or fails every check when dead; it counts what it decided per route.
type routed struct {
	cycle []node.Route
	delay time.Duration
	dead  bool

	mu     sync.Mutex
	n      int
	routes map[node.Route]int64
}

func (f *routed) Check(ctx context.Context, c node.Check) (node.Decision, error) {
	if f.dead {
		return node.Decision{}, errors.New("connection refused")
	}
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return node.Decision{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rt := f.cycle[f.n%len(f.cycle)]
	f.n++
	f.routes[rt]++
	return node.Decision{Decision: algo.Decision{Allowed: rt != node.RouteCachedDenial, Limit: c.Limit.Limit}, Route: rt}, nil
}

func (f *routed) decided() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(f.n)
}

// TestRunPerTarget: each target's row holds exactly what that target decided,
// by route, with its own latency: the instant owner's p50 stays under the
// slow member's 5 ms, which the merged figure alone would blur. The callers
// pinned to the dead target move to the next live one, whose row counts them.
func TestRunPerTarget(t *testing.T) {
	t.Parallel()
	owner := &routed{cycle: []node.Route{node.RouteOwner}, routes: map[node.Route]int64{}}
	member := &routed{cycle: []node.Route{node.RouteForwarded, node.RouteForwarded, node.RouteCachedDenial, node.RouteBackup, node.RouteFallback},
		delay: 5 * time.Millisecond, routes: map[node.Route]int64{}}
	dead := &routed{dead: true, routes: map[node.Route]int64{}}
	fakes := []*routed{owner, member, dead}
	r, err := Run(context.Background(), Options{
		Targets:     []target.Target{{Name: "owner", Checker: owner}, {Name: "member", Checker: member}, {Name: "dead", Checker: dead}},
		Limit:       algo.Limit{Kind: algo.FixedWindow, Limit: 1 << 40, Period: time.Second},
		Keys:        100,
		Duration:    300 * time.Millisecond,
		Concurrency: 6,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Targets) != 3 {
		t.Fatalf("got %d target reports, want 3", len(r.Targets))
	}
	var sumDecided, sumLat int64
	sumRoutes := map[node.Route]int64{}
	for i, f := range fakes {
		tr := r.Targets[i]
		if tr.Decided != f.decided() {
			t.Errorf("%s: got %d decided, want %d (what the target decided)", tr.Name, tr.Decided, f.decided())
		}
		if tr.Latency.TotalCount() != tr.Decided {
			t.Errorf("%s: got %d latencies, want %d", tr.Name, tr.Latency.TotalCount(), tr.Decided)
		}
		for _, rt := range []node.Route{node.RouteOwner, node.RouteForwarded, node.RouteCachedDenial, node.RouteBackup, node.RouteFallback} {
			if tr.Routes[rt] != f.routes[rt] {
				t.Errorf("%s: got %d checks by route %v, want %d", tr.Name, tr.Routes[rt], rt, f.routes[rt])
			}
			sumRoutes[rt] += tr.Routes[rt]
		}
		if want := float64(tr.Decided) / r.Elapsed.Seconds(); tr.Throughput != want {
			t.Errorf("%s: got %.1f checks/s, want %.1f", tr.Name, tr.Throughput, want)
		}
		sumDecided += tr.Decided
		sumLat += tr.Latency.TotalCount()
	}
	if owner.decided() == 0 || member.routes[node.RouteCachedDenial] == 0 || member.routes[node.RouteFallback] == 0 {
		t.Fatalf("got owner %d decided, member routes %v: want every route used", owner.decided(), member.routes)
	}
	if r.Targets[2].Decided != 0 || r.Targets[2].Errors == 0 || !r.Targets[2].Down {
		t.Errorf("dead: got %+v, want no decided, errors, down", r.Targets[2])
	}
	if sumDecided != r.Decided || sumLat != r.Latency.TotalCount() {
		t.Errorf("got targets' sums %d decided, %d latencies; want the totals %d, %d", sumDecided, sumLat, r.Decided, r.Latency.TotalCount())
	}
	for rt, n := range sumRoutes {
		if r.Routes[rt] != n {
			t.Errorf("route %v: got total %d, want the targets' sum %d", rt, r.Routes[rt], n)
		}
	}
	if r.DeniedChecks != member.routes[node.RouteCachedDenial] {
		t.Errorf("got %d denied, want %d (the cached denials)", r.DeniedChecks, member.routes[node.RouteCachedDenial])
	}
	fast, slow := time.Duration(r.Targets[0].Latency.ValueAtQuantile(50)), time.Duration(r.Targets[1].Latency.ValueAtQuantile(50))
	if slow < 5*time.Millisecond || fast >= 5*time.Millisecond {
		t.Errorf("got p50 owner %v, member %v; want owner < 5ms <= member", fast, slow)
	}

	var buf bytes.Buffer
	if err := r.Write(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "per target  decided  checks/s") || !strings.Contains(out, "cached_denial") {
		t.Fatalf("report lacks the per-target table:\n%s", out)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 12 {
			rows[f[0]] = f
		}
	}
	for i, f := range fakes {
		tr := r.Targets[i]
		row := rows[tr.Name]
		if row == nil {
			t.Errorf("no row for %s:\n%s", tr.Name, out)
			continue
		}
		want := []string{tr.Name, strconv.FormatInt(f.decided(), 10)}
		for _, rt := range []node.Route{node.RouteOwner, node.RouteForwarded, node.RouteLease, node.RouteCachedDenial, node.RouteBackup, node.RouteFallback} {
			want = append(want, strconv.FormatInt(f.routes[rt], 10))
		}
		want = append(want, strconv.FormatInt(tr.Errors, 10))
		got := append(row[:2:2], row[5:]...)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("row %s: got %v, want %v (name, decided, routes, errors)", tr.Name, got, want)
		}
	}
	if rows["dead"] != nil && (rows["dead"][3] != "-" || rows["dead"][4] != "-") {
		t.Errorf("dead row: got %v, want no percentiles", rows["dead"])
	}
}
