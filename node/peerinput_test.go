package node

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// keysWith returns n keys that owner owns and backup backs up in in's ring,
// none of them in skip.
func keysWith(t *testing.T, in, owner, backup *Node, n int, skip string) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n && i < 1_000_000; i++ {
		k := fmt.Sprintf("other-%d", i)
		o, ok1 := in.Owner(k)
		b, ok2 := in.Backup(k)
		if k != skip && ok1 && ok2 && o.Name == owner.Name() && b.Name == backup.Name() {
			out = append(out, k)
		}
	}
	if len(out) < n {
		t.Fatalf("only %d keys owned by %s with backup %s", len(out), owner.Name(), backup.Name())
	}
	return out
}

// The limit-change poisoning: a live key whose limit changes from 100/day to
// 10/min (the state its earlier, longer limit left denies it under the new
// one) and back, and to 10/min again, then its backup restarts (the owner
// sends every key to the new backup, then back) and its owner crashes. Every
// other key of that owner keeps its replicated state: none admits again after
// the crash. No state is refused anywhere, and no log line repeats within a
// second. (Before, the owner sent the key's state under its latest limit, the
// backup found it implausible and refused the whole batch, and the owner
// resent it forever, with every other key's.)
func TestLimitChangeKeepsReplicationFlowing(t *testing.T) {
	t.Parallel()
	lb := &logBuffer{}
	_, nodes, base := memClusterBase(t, 3, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	owner, backup, other := nodes[0], nodes[1], nodes[2]
	ctx := context.Background()
	daily := algo.Limit{Kind: algo.GCRA, Limit: 100, Period: 24 * time.Hour, Burst: 9}
	perMin := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Minute, Burst: 9}
	poisoned := keyWith(t, owner, owner, backup)
	step := func(l algo.Limit, want bool) {
		t.Helper()
		d, err := owner.Allow(ctx, poisoned, l)
		if err != nil || d.Allowed != want {
			t.Fatalf("%s under %v per %v: got %+v, %v; want allowed %v", poisoned, l.Limit, l.Period, d, err, want)
		}
	}
	step(daily, true)   // TAT 864 s ahead
	step(perMin, false) // owes 804 s more than 10/min allows
	step(daily, true)
	step(perMin, false)

	// The backup restarts: the owner sends its keys to the member that
	// backs them up meanwhile, then to the restarted one.
	name := backup.Name()
	if err := backup.Close(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := WaitConverged(wctx, owner, other); err != nil {
		t.Fatal(err)
	}
	cfg := base
	cfg.Name = name
	cfg.Join = []string{owner.GossipAddr()}
	restarted, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restarted.Abort() })
	if err := WaitConverged(wctx, owner, other, restarted); err != nil {
		t.Fatal(err)
	}

	// Every other key of the owner that the restarted node backs up takes
	// all it may, and reaches its backup.
	l := algo.Limit{Kind: algo.TokenBucket, Limit: 5, Period: 24 * time.Hour, Burst: 5}
	keys := keysWith(t, owner, owner, restarted, 20, poisoned)
	for _, k := range keys {
		if d, err := owner.AllowN(ctx, k, l, 5); err != nil || !d.Allowed {
			t.Fatalf("%s: got %+v, %v; want admitted", k, d, err)
		}
	}
	for _, k := range keys {
		waitReplica(t, restarted, k, l, 0)
	}
	// The poisoned key's replica is the owner's state.
	if got, want := replica(t, restarted, poisoned, daily).Remaining, replica(t, owner, poisoned, daily).Remaining; got != want {
		t.Errorf("replica of %s: %d remaining, owner %d", poisoned, got, want)
	}

	owner.Abort()
	eventually(t, 10*time.Second, "the crash is seen", func() bool {
		o, ok := other.Owner(keys[0])
		return ok && o.Name == restarted.Name()
	})
	readmitted := 0
	for _, k := range keys {
		d, err := other.Allow(ctx, k, l)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			readmitted++
		}
	}
	if readmitted != 0 {
		t.Errorf("after the owner's crash %d of %d keys admitted again, want 0", readmitted, len(keys))
	}
	for _, n := range []*Node{other, restarted} {
		if got := n.Stats().RefusedStates; got != 0 {
			t.Errorf("%s refused %d states, want 0", n.Name(), got)
		}
	}
	assertNoRepeatWithinSecond(t, lb.String())
}

// assertNoRepeatWithinSecond fails if one WARN or ERROR message of one node
// appears twice within a second in log (slog's text format).
func assertNoRepeatWithinSecond(t *testing.T, log string) {
	t.Helper()
	re := regexp.MustCompile(`^time=(\S+) level=(?:WARN|ERROR) msg=("(?:[^"\\]|\\.)*"|\S+).* node=(\S+)`)
	last := map[string]time.Time{}
	for _, line := range strings.Split(log, "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		k := m[3] + " " + m[2]
		if prev, ok := last[k]; ok && at.Sub(prev) < time.Second {
			t.Errorf("log line repeated within %v: %s", at.Sub(prev), line)
			return
		}
		last[k] = at
	}
}
