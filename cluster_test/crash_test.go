package cluster_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// The crash tests of issue 14, on the load harness of load_test.go: 3 nodes,
// 300 keys each limited to 50 hits per 10 minutes (crashLimit), 32 closed-loop
// callers checking random keys on random live nodes. The keys are exhausted
// first, so every admission after that is one too many; then the node owning the
// most keys is aborted (a crash: no leave, no handoff) and restarted under the
// same name on the same ports, and the callers keep going until every key has
// been denied again by an owner or backup after the cluster settled. They do not
// call t.Parallel: the throughput they compare is CPU-bound.

// crashRun is what one crash scenario measured.
type crashRun struct {
	sum          loadSummary
	victim       string
	victimKeys   int
	detected     time.Duration // crash to the survivors' agreement on a ring without it; 0 if restarted first
	restartReady time.Duration // crash to the restarted node reporting Ready
	settled      time.Duration // crash to all nodes agreeing on the ring again
	before       float64       // checks/s in the second before the crash
	after        float64       // checks/s in the second after the crash
	minBucket    float64       // lowest checks/s of a series bucket while the node was down
	restarted    *node.Node    // the victim's new process
	others       []*node.Node  // the nodes that stayed up
}

// runCrash runs the scenario: load until every key is exhausted (at least 1 s),
// abort the node owning the most keys, restart it under the same name and ports
// downFor after the crash, wait until the cluster agrees again and every key
// has been denied since (and at least 2 s), and stop.
func runCrash(t *testing.T, mod func(*node.Config), downFor time.Duration) crashRun {
	t.Helper()
	return runCrashAt(t, mod, downFor, 0)
}

// runCrashAt is runCrash; with midway > 0 it aborts the node as soon as that
// share (0..1) of all the keys' hits has been admitted, while the keys are
// still admitting, instead of after they are exhausted: the states changed in
// the owner's last replication lag are then lost with it.
func runCrashAt(t *testing.T, mod func(*node.Config), downFor time.Duration, midway float64) crashRun {
	t.Helper()
	return runCrashWith(t, loadSpec{Mod: mod}, downFor, midway)
}

// runCrashWith is runCrashAt with the restart options of spec (Moved,
// EarlyLoad); its Nodes, Keys, Callers and Limit are the crash tests'.
func runCrashWith(t *testing.T, spec loadSpec, downFor time.Duration, midway float64) crashRun {
	t.Helper()
	spec.Nodes, spec.Keys, spec.Callers, spec.Limit = 3, 300, 32, crashLimit
	r := startLoad(t, spec)
	if midway > 0 {
		want := int64(midway * float64(int64(len(r.keys))*crashLimit.Limit))
		deadline := time.Now().Add(30 * time.Second)
		for {
			total := int64(0)
			for _, a := range r.summary().admitted {
				total += a
			}
			if total >= want {
				t.Logf("%d of %d hits admitted after %v: crash now", total, int64(len(r.keys))*crashLimit.Limit, time.Since(r.start).Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d hits admitted within 30 s", total, want)
			}
			time.Sleep(time.Millisecond) // poll: admissions have no event to wait on
		}
	} else {
		exhausted := r.waitExhausted(r.start, time.Second, 30*time.Second)
		t.Logf("every key exhausted and >= 1 s of load after %v: %s", exhausted.Sub(r.start).Round(time.Millisecond), r.summary())
		// The scenario is a crash after the exhausted states reached the
		// backups. Under asynchronous replication the owner's last
		// ReplicationLag of admissions (plus the send in flight) may still be
		// lost, which TestCrashMidAdmissionAsync bounds; without this margin
		// the last key's final admission could be 1 ms old at the crash (seen:
		// crash:110 admitted 52 of 50, its backup's replica one hit short).
		// The load goes on meanwhile and every key must be denied again.
		r.waitExhausted(exhausted, crashSettle, 30*time.Second)
	}
	pre := r.summary()
	if n := pre.routes[node.RouteFallback.String()] + pre.routes[node.RouteBackup.String()]; n > 0 {
		// No member is down yet: a forward timed out (ForwardTimeout) or a member
		// was falsely declared dead, which happens when the machine is overloaded.
		t.Errorf("%d checks were decided by a backup or a fallback before any crash (max latency %v): the owners were alive; over-admission from here on is not the crash's (rerun alone on a quiet machine)",
			n, pre.maxLat.Round(time.Millisecond))
	}

	victim, owned := r.mostKeys()
	res := crashRun{victim: victim.Name(), victimKeys: owned}
	crashAt := r.abort(victim.Name())

	// Detection, unless the restart comes first.
	restartAt := crashAt.Add(downFor)
	for time.Now().Before(restartAt) {
		if agreeNow(r.liveNodes()...) {
			res.detected = time.Since(crashAt)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(time.Until(restartAt)) // the scenario's downtime, not a wait for an event
	others := r.liveNodes()
	n, started, ready := r.restart(victim.Name(), 20*time.Second)
	res.restarted, res.others = n, others
	res.restartReady = ready.Sub(crashAt)
	conv := waitConverged(t, 20*time.Second, r.liveNodes()...)
	settledAt := time.Now()
	res.settled = settledAt.Sub(crashAt)
	done := r.waitExhausted(settledAt, 2*time.Second, 30*time.Second)
	r.stopLoad()

	res.sum = r.summary()
	res.before = r.rate(crashAt.Add(-time.Second), crashAt)
	res.after = r.rate(crashAt, crashAt.Add(time.Second))
	res.minBucket = -1
	for at := crashAt; at.Add(seriesStep).Before(crashAt.Add(downFor)); at = at.Add(seriesStep) {
		if v := r.rate(at, at.Add(seriesStep)); res.minBucket < 0 || v < res.minBucket {
			res.minBucket = v
		}
	}
	detected := "not detected by the survivors before the restart"
	if res.detected > 0 {
		detected = "detected by the survivors after " + res.detected.Round(time.Millisecond).String()
	}
	t.Logf("aborted %s (owner of %d of %d keys) at +%v; %s; restarted (New returned) %v after the crash, Ready %v after it (%v after New), ring agreed %v later (%v after the crash); ran %v more until every key was denied again",
		res.victim, owned, len(r.keys), crashAt.Sub(r.start).Round(time.Millisecond), detected,
		started.Sub(crashAt).Round(time.Millisecond), res.restartReady.Round(time.Millisecond), ready.Sub(started).Round(time.Millisecond),
		conv.Round(time.Millisecond), res.settled.Round(time.Millisecond), done.Sub(settledAt).Round(time.Millisecond))
	t.Logf("checks/s: %.0f in the second before the crash, %.0f in the second after (ratio %.2f); lowest 100 ms bucket while %s was down: %.0f/s",
		res.before, res.after, res.after/max(res.before, 1), res.victim, res.minBucket)
	t.Logf("checks per 100 ms, 1 s before to 3 s after the crash (| = crash): %s", r.seriesAround(crashAt, time.Second, 3*time.Second))
	t.Logf("before the crash: %s", pre)
	t.Logf("whole run: %s", res.sum)
	if len(res.sum.firstErrs) > 0 {
		t.Logf("first errors: %v", res.sum.firstErrs)
	}
	back := 0
	for _, k := range r.keys {
		if m, ok := n.Owner(k); ok && m.Name == res.victim {
			back++
		}
	}
	if back != owned {
		t.Errorf("restarted %s owns %d of the keys in its ring, want %d (the same name owns the same keys)", res.victim, back, owned)
	}
	return res
}

// checkBound fails the test for every key admitted more than bound, and for
// errors other than ErrStopped (a caller that picked the aborted node).
func checkBound(t *testing.T, res crashRun, bound int64) {
	t.Helper()
	bad := 0
	for k, a := range res.sum.admitted {
		if a > bound {
			if bad < 10 {
				t.Errorf("key crash:%d admitted %d, want at most %d", k, a, bound)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d keys admitted more than %d (limit %d): %d extra admissions in all, at most %d on one key",
			bad, res.sum.keys, bound, res.sum.limit, res.sum.extra, res.sum.maxKey)
	}
	if res.sum.errs > 0 {
		t.Errorf("%d checks returned an error, first: %v", res.sum.errs, res.sum.firstErrs)
	}
}

// checkThroughput fails the test when the checks/s in the second after the
// crash fell below half of the second before (both measured in this run).
func checkThroughput(t *testing.T, res crashRun) {
	t.Helper()
	if res.before <= 0 {
		t.Fatalf("no checks measured in the second before the crash")
	}
	if res.after < res.before/2 {
		t.Errorf("checks/s fell from %.0f in the second before the crash to %.0f in the second after (ratio %.2f), want at least half",
			res.before, res.after, res.after/res.before)
	}
}

// replication returns a Mod that sets Config.Replication to mode.
func replication(mode node.Replication) func(*node.Config) {
	return func(c *node.Config) { c.Replication = mode }
}

// issue 14 (a) and (c): a crash under load with asynchronous replication (the
// default) admits no key more than 1.05 times its limit, and the checks/s in
// the second after the crash is at least half of the second before.
func TestCrashUnderLoadAsync(t *testing.T) {
	res := runCrash(t, replication(node.ReplicationAsync), 3*time.Second)
	checkBound(t, res, crashLimit.Limit*105/100)
	checkThroughput(t, res)
}

// issue 14 (a), the crash while the keys are still admitting: with
// asynchronous replication the owner's last ReplicationLag of admissions (plus
// the send in flight) may be lost. The README's bound is what a key admits in
// that time, L + s; at this test's rate (about 40 admissions per second per
// key) and with sends taking up to tens of ms under -race on a loaded machine,
// that is a few hits: the test allows 5 (10 % of the limit) and logs the
// figures. Without replication every key of the dead owner admits 50 more.
func TestCrashMidAdmissionAsync(t *testing.T) {
	res := runCrashAt(t, replication(node.ReplicationAsync), 3*time.Second, 0.3)
	t.Logf("async, crash at 30%% admitted: %d keys over the limit, max per key %d, %d extra admissions", res.sum.over, res.sum.maxKey, res.sum.extra)
	checkBound(t, res, crashLimit.Limit+5)
}

// issue 14 (b), the crash while the keys are still admitting: with synchronous
// replication no admitted hit is lost, so no key goes over its limit. A key
// may end a hit short per check that was in flight to the owner when it died:
// the owner took the hit (and its backup has it) but the answer was lost, and
// the sender, which cannot tell, retried the check on the backup. Those are
// logged, not failed: under-admission is the safe side of an ambiguous failure.
func TestCrashMidAdmissionSync(t *testing.T) {
	res := runCrashAt(t, replication(node.ReplicationSync), 3*time.Second, 0.3)
	checkBound(t, res, crashLimit.Limit)
	short := int64(0)
	for _, a := range res.sum.admitted {
		short += crashLimit.Limit - min(a, crashLimit.Limit)
	}
	t.Logf("sync, crash at 30%% admitted: %d keys over the limit, %d keys under it, %d hits short in all (checks in flight to the aborted owner, retried on the backup)", res.sum.over, res.sum.under, short)
}

// issue 14 (b) and (c): with synchronous replication a crash under load loses
// no admitted hit: every key is admitted exactly its limit (less only by calls
// whose answer was lost with the aborted node).
func TestCrashUnderLoadSync(t *testing.T) {
	res := runCrash(t, replication(node.ReplicationSync), 3*time.Second)
	checkBound(t, res, crashLimit.Limit)
	// A call in flight on the aborted node may have taken a hit and lost its
	// answer (ErrStopped, or a forward to it retried on the backup, which
	// then denies what the owner had admitted and replicated): only those may
	// leave a key short of its limit.
	for k, a := range res.sum.admitted {
		if a+res.sum.lost[k] < crashLimit.Limit {
			t.Errorf("key crash:%d admitted %d with %d calls whose answer may have been lost, want %d (%v)", k, a, res.sum.lost[k], crashLimit.Limit, res.sum.underWhy)
		}
	}
	checkThroughput(t, res)
}

// issue 14 (e): with replication off, the same crash resets the dead owner's
// keys. This is the baseline that shows the harness can see a lost state: it
// logs the over-admission and fails only if there is none (the crash went
// unseen, so the tests above would prove nothing).
func TestCrashUnderLoadReplicationOff(t *testing.T) {
	res := runCrash(t, replication(node.ReplicationOff), 3*time.Second)
	t.Logf("replication off: %d of %d keys over the limit (the aborted node owned %d), max per key %d, %d extra admissions; checks/s %.0f before, %.0f after the crash",
		res.sum.over, res.sum.keys, res.victimKeys, res.sum.maxKey, res.sum.extra, res.before, res.after)
	if res.sum.over == 0 {
		t.Errorf("no key over-admitted with replication off after %s (owner of %d keys) crashed: the load did not reach its keys", res.victim, res.victimKeys)
	}
	if res.sum.errs > 0 {
		t.Errorf("%d checks returned an error, first: %v", res.sum.errs, res.sum.firstErrs)
	}
}

// crashSettle is how long every key stays exhausted under load before the
// crash of the full-exhaustion scenarios: 40 times the test profile's
// ReplicationLag (5 ms), room for a replication send delayed by -race on a
// loaded 2-core machine.
const crashSettle = 200 * time.Millisecond

// issue 14 (d): the same name restarted on the same ports 300 ms after a crash,
// before gossip detects it: every key stays within its limit and no call that
// ends after the crash waits more than 200 ms.
func TestFastRestart(t *testing.T) {
	res := runCrash(t, nil, 300*time.Millisecond)
	checkBound(t, res, crashLimit.Limit)
	// Calls that ended after the crash; before it, the cluster's first calls
	// (connections, TLS) and the machine's load set the floor, logged above.
	// The stall this guards against is a wait for the handoff timeout (1 s in
	// the test profile). On a loaded machine (-race, other packages' tests on
	// the same two cores) scheduling alone delays calls: the slowest call
	// before the crash measures that noise, and the bound is half the
	// handoff timeout on top of it, so load is not mistaken for a stall (with
	// 200 ms, a CI run on a slow 2-core VM saw 236 ms against 231 ms allowed)
	// and a wait for the handoff timeout still fails.
	bound := nodetest.TestConfig().HandoffTimeout/2 + res.sum.phaseMax[0]
	for p := 1; p < len(phaseNames); p++ {
		if lat := res.sum.phaseMax[p]; lat > bound {
			t.Errorf("a call that ended %s waited %v, want at most %v (before the crash: at most %v)",
				phaseNames[p], lat.Round(time.Millisecond), bound, res.sum.phaseMax[0].Round(time.Millisecond))
		}
	}
}

// A member crashes and comes back 300 ms later under its name at a new address
// (new ports here; a rescheduled pod gets a new IP): New does not refuse it as
// a duplicate of its dead self (runCrash fails on any error of New), the
// others admit its new address and instance as soon as its old address fails
// their probe, without waiting for gossip to find the old one dead, it takes
// its keys back with their states, and no key goes over its limit.
func TestRestartAtNewAddress(t *testing.T) {
	res := runCrashWith(t, loadSpec{Moved: true}, 300*time.Millisecond, 0)
	checkBound(t, res, crashLimit.Limit)
	var id string
	for _, m := range res.restarted.Members() {
		if m.Self {
			id = m.ID
		}
	}
	for _, o := range res.others {
		for _, m := range o.Members() {
			if m.Name == res.victim && (m.Addr != res.restarted.PeerAddr() || m.ID != id || m.State != node.StateAlive) {
				t.Errorf("%s holds %s at %s, instance %s (%s), want %s, instance %s (alive)", o.Name(), m.Name, m.Addr, m.ID, m.State, res.restarted.PeerAddr(), id)
			}
		}
	}
	// The spec's bound, generous on a loaded machine: the same restart at the
	// old address agrees in well under a second here; without the others
	// taking the new address at once, it waited for gossip to declare the
	// old process dead (seconds, plus DeadNodeReclaimTime).
	if res.settled > 3*time.Second {
		t.Errorf("the ring agreed %v after the crash, want at most 3 s", res.settled.Round(time.Millisecond))
	}
}
