package cluster_test

import (
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDockerCompose runs docker-compose.yml's three-node cluster of the daemon,
// built from this tree into a FROM scratch image, secure, with certificates
// made by the built `ringlimit cert` into a temporary directory, and checks it
// end to end:
//
//	(a) the bundled access log replayed through the cluster (`ringlimit replay`
//	    with a client certificate) gives the decisions of a single-node
//	    reference, for every algorithm;
//	(b) `docker kill` of a node under a closed-loop load sent to the survivors
//	    on keys with a known limit, exhausted before the kill, then its restart
//	    under that load: no key is admitted more than 1.05 times its limit
//	    (issue 14, asynchronous replication), no check fails, and the survivors
//	    list two members within a deadline;
//	(c) after a node is cut off the network for 10 s and reconnected, the cluster
//	    re-forms on its own and every node names the same owner for a key;
//	(d) two containers with the gossip key, one without a certificate
//	    (--insecure) and one with a certificate from another CA, join the
//	    gossip but stay out of the ring: listed as refused, owning no key,
//	    every key decided by an owner (no fallback); and a container given
//	    neither certificates nor --insecure refuses to start;
//	(e) `docker-compose down` leaves no container, network or volume behind.
//
// It needs a Docker engine and docker-compose, and is skipped, saying why, when
// `docker info` fails and under -short — unless RINGLIMIT_REQUIRE_DOCKER=1 (as
// .ci/run sets it), which turns either skip into a failure so that CI cannot
// pass without running it. It does not call t.Parallel: its timings (failure
// detection, healing) are those of a real deployment and should not compete
// with the in-process clusters for the CPU.
func TestDockerCompose(t *testing.T) {
	skip := t.Skip
	if os.Getenv(requireDockerEnv) == "1" {
		skip = func(args ...any) { t.Helper(); t.Fatal(append([]any{requireDockerEnv + "=1, but:"}, args...)...) }
	}
	if testing.Short() {
		skip("docker-compose cluster test skipped under -short (it takes about two minutes)")
		return
	}
	if why := dockerAvailable(); why != "" {
		skip("docker-compose cluster test skipped: " + why)
		return
	}
	start := time.Now()
	root := dockerModuleRoot(t)
	tmp := t.TempDir()
	id := fmt.Sprintf("%d%06d", os.Getpid()%100000, time.Now().UnixNano()/1000%1000000)
	c := &composeCluster{
		t:       t,
		root:    root,
		bin:     filepath.Join(tmp, "bin"),
		project: "rltest" + id,
		image:   "ringlimit:test-" + id,
	}

	dockerBuildBinaries(t, root, tmp)
	dockerBuildImage(t, root, tmp, c.image)
	t.Logf("binaries and image %s built in %v", c.image, time.Since(start).Round(time.Millisecond))
	c.certs, c.caKey = filepath.Join(tmp, "certs"), filepath.Join(tmp, "ca", "ca.key")
	c.client = dockerMakeCerts(t, c.bin, c.certs, c.caKey, dockerServices()...)

	c.subnet = dockerFreeSubnet(t, os.Getpid())
	c.uid, c.gid = dockerNonRoot(t, c.certs)
	// Caller timestamps are off in docker-compose.yml; the replay needs them.
	c.env = []string{"RINGLIMIT_IMAGE=" + c.image, "RINGLIMIT_SUBNET=" + c.subnet, "RINGLIMIT_CERTS=" + c.certs,
		fmt.Sprintf("RINGLIMIT_UID=%d", c.uid), fmt.Sprintf("RINGLIMIT_GID=%d", c.gid), "RINGLIMIT_ACCEPT_CALLER_TIMESTAMPS=true"}
	for i := 1; i <= 3; i++ { // empty: Docker picks free host ports
		c.env = append(c.env, fmt.Sprintf("RINGLIMIT_HOST_HTTP_%d=", i), fmt.Sprintf("RINGLIMIT_HOST_GRPC_%d=", i), fmt.Sprintf("RINGLIMIT_HOST_ADMIN_%d=", i),
			fmt.Sprintf("RINGLIMIT_HOST_REDIS_%d=", i))
	}
	t.Cleanup(c.down) // (e), registered before up so a failed up is cleaned too
	c.up()
	all := dockerServices()
	t.Logf("project %s up on %s: http %v grpc %v", c.project, c.subnet, c.http, c.grpc)
	c.waitFor("all three ready", 60*time.Second, c.ready(all...))
	c.waitFor("all three list three members", 60*time.Second, c.membersAre(all, all...))

	t.Run("replay", func(t *testing.T) { dockerReplay(t, c.on(t)) })
	if t.Failed() {
		return
	}
	t.Run("redis-cli", func(t *testing.T) { dockerRedisCLI(t, c.on(t)) })
	if t.Failed() {
		return
	}
	t.Run("kill", func(t *testing.T) { dockerKill(t, c.on(t)) })
	if t.Failed() {
		return
	}
	t.Run("partition", func(t *testing.T) { dockerPartition(t, c.on(t)) })
	if t.Failed() {
		return
	}
	t.Run("intruder", func(t *testing.T) { dockerIntruder(t, c.on(t)) })
	t.Logf("docker test took %v (before down)", time.Since(start).Round(time.Millisecond))
}

// replayMismatches returns the count on the mismatches line of `ringlimit
// replay`'s summary.
func replayMismatches(out string) (string, bool) {
	m := regexp.MustCompile(`(?m)^mismatches\s+(\d+)`).FindStringSubmatch(out)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// dockerReplay replays testdata/apache_logs through the three nodes, once per
// algorithm, with the built CLI, and requires zero mismatches.
func dockerReplay(t *testing.T, c *composeCluster) {
	addrs := []string{c.grpc["ringlimit-1"], c.grpc["ringlimit-2"], c.grpc["ringlimit-3"]}
	logPath := filepath.Join(c.root, "testdata", "apache_logs")
	for _, alg := range []string{"gcra", "token_bucket", "sliding_window_log", "sliding_window_counter", "fixed_window", "bucketed_sliding_window"} {
		began := time.Now()
		out, err := dockerTry(3*time.Minute, c.root, nil, filepath.Join(c.bin, "ringlimit"),
			"replay", "--addr", strings.Join(addrs, ","), "--algorithm", alg, "--limit", "10", "--period", "1m", "--burst", "5", "--log", logPath, "--certs-dir", c.certs)
		n, ok := replayMismatches(out)
		if err != nil || !ok || n != "0" {
			t.Fatalf("replay %s: exit %v, mismatches %q (summary found: %v)\n%s", alg, err, n, ok, out)
		}
		t.Logf("replay %s: 0 mismatches in %v", alg, time.Since(began).Round(time.Millisecond))
		if alg == "gcra" {
			t.Logf("replay gcra summary:\n%s", out)
		}
	}
}

// dockerRedisCLI sends redis-cell's CL.THROTTLE with Debian's redis-cli (TLS,
// AUTH with the client token) to two different nodes: the key is decided by
// its owner whichever node answers, so the second call sees the first.
func dockerRedisCLI(t *testing.T, c *composeCluster) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found (.ci/run installs Debian's redis-tools): %v", err)
	}
	for i, step := range []struct{ node, want string }{{"ringlimit-1", "0 1 0 -1 2"}, {"ringlimit-2", "1 1 0 2 2"}} {
		host, port, _ := net.SplitHostPort(c.redis[step.node])
		out, err := dockerTry(time.Minute, "", nil, cli, "-h", host, "-p", port, "--tls", "--cacert", filepath.Join(c.certs, "ca.crt"),
			"-a", dockerToken, "--no-auth-warning", "CL.THROTTLE", "user123", "0", "1", "2", "1")
		if got := strings.Join(strings.Fields(out), " "); err != nil || got != step.want {
			t.Fatalf("call %d via %s: got %q (%v), want %q", i+1, step.node, got, err, step.want)
		}
	}
}

// dockerKill kills ringlimit-3 (`docker kill`: a crash, no leave, no handoff)
// under a closed-loop load sent to the survivors' client ports on keys with a
// known limit (sliding window log, 50 per 10 minutes), and restarts it with
// `docker-compose start` while the load goes on. The keys are exhausted before
// the kill, so every admission after it is one too many: no key may be
// admitted more than 1.05 times its limit (issue 14, default asynchronous
// replication), no check may fail, and the survivors must drop the victim from
// their member lists within a deadline.
func dockerKill(t *testing.T, c *composeCluster) {
	survivors := []string{"ringlimit-1", "ringlimit-2"}
	const victimName = "ringlimit-3"
	victim := c.container(victimName)
	const limit = 50
	l := startDockerLoad(t, c, []string{c.http[survivors[0]], c.http[survivors[1]]}, 60, limit, 4)
	defer l.stop()

	exhausted := l.waitDenied(l.start, time.Second, 2*time.Minute)
	owned := l.ownedBy(victimName)
	t.Logf("all %d keys exhausted after %v of load; %s owns %d of them", len(l.keys), exhausted.Sub(l.start).Round(time.Millisecond), victimName, len(owned))
	if len(owned) == 0 {
		t.Fatalf("%s owns none of the %d keys: the kill would prove nothing", victimName, len(l.keys))
	}

	dockerRun(t, time.Minute, "", nil, "docker", "kill", victim)
	killed := time.Now()
	detect := c.waitFor("survivors list two members after docker kill", 60*time.Second, c.membersAre(survivors, survivors...))
	converged := time.Now()
	l.waitDenied(converged, 2*time.Second, time.Minute)
	afterKill := l.counts()

	restartAt := time.Now()
	c.mustCompose(2*time.Minute, "start", victimName)
	c.ports(victimName) // Docker may publish new ports
	all := dockerServices()
	c.waitFor("restarted "+victimName+" ready", 60*time.Second, c.ready(victimName))
	c.waitFor("all three list three members after restart", 60*time.Second, c.membersAre(all, all...))
	rejoined := time.Now()
	t.Logf("cluster of three again %v after `docker-compose start`", rejoined.Sub(restartAt).Round(time.Millisecond))
	l.waitDenied(rejoined, 3*time.Second, time.Minute)
	l.stop()

	sum := l.counts()
	t.Logf("docker kill of %s at +%v: survivors listed two members %v later; checks/s through the survivors %.0f in the second before the kill, %.0f in the second after, %.0f in the 5 s after",
		victimName, killed.Sub(l.start).Round(time.Millisecond), detect.Round(time.Millisecond),
		l.rate(killed.Add(-time.Second), killed), l.rate(killed, killed.Add(time.Second)), l.rate(killed, killed.Add(5*time.Second)))
	t.Logf("until the survivors settled: %s", afterKill)
	t.Logf("whole run (through the restart): %s", sum)
	if len(sum.failures) > 0 {
		t.Errorf("%d checks to survivors failed, first: %v", sum.nFailures, sum.failures)
	}
	bound := int64(limit * 105 / 100)
	for _, k := range owned {
		if a := sum.admitted[k]; a > bound {
			t.Errorf("key %s (owned by %s when it was killed): admitted %d, want at most %d", l.keys[k], victimName, a, bound)
		}
	}
	for k, a := range sum.admitted {
		if a > bound && !slices.Contains(owned, k) {
			t.Errorf("key %s (not owned by %s): admitted %d, want at most %d", l.keys[k], victimName, a, bound)
		}
	}
}

// dockerLoad is a closed-loop load on the daemons' HTTPS client APIs: workers
// per address, each checking random keys of a fixed set (sliding window log,
// limit hits per 10 minutes: no refill during a test), counting per key what
// was admitted and when it was last denied by an owner or a backup.
type dockerLoad struct {
	t     *testing.T
	c     *composeCluster
	keys  []string
	limit int64
	start time.Time

	mu         sync.Mutex
	admitted   []int64
	lastDenied []time.Time // zero: never denied by an owner, a forward or a backup
	owner      []string    // the member that last decided each key (not a fallback)
	routes     map[string]int
	failures   []string
	nFailures  int
	series     []int // checks completed per seriesStep since start
	maxLat     time.Duration
	maxLatAt   time.Duration // since start, when the slowest call began

	stopOnce sync.Once
	done     chan struct{}
	wg       sync.WaitGroup
}

// dockerLoadCounts is a copy of a dockerLoad's counters.
type dockerLoadCounts struct {
	limit     int64
	admitted  []int64
	routes    map[string]int
	failures  []string
	nFailures int
	checks    int
	maxLat    time.Duration
	maxLatAt  time.Duration
	over, max int64
	extra     int64
}

func (s dockerLoadCounts) String() string {
	return fmt.Sprintf("%d checks, routes %v, %d failures; %d keys over the limit %d, max per key %d, %d extra admissions; max latency %v (call began at +%v)",
		s.checks, s.routes, s.nFailures, s.over, s.limit, s.max, s.extra, s.maxLat.Round(time.Millisecond), s.maxLatAt.Round(time.Millisecond))
}

// startDockerLoad starts workers goroutines per address in addrs (host:port of
// client APIs) checking keys "bound:<i>" for i < nkeys at limit per 10 minutes.
func startDockerLoad(t *testing.T, c *composeCluster, addrs []string, nkeys int, limit int64, workers int) *dockerLoad {
	tr := c.client.Transport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2 * workers // keep the TLS connections of every worker
	cc := *c
	cc.client = &http.Client{Timeout: c.client.Timeout, Transport: tr}
	l := &dockerLoad{t: t, c: &cc, limit: limit, start: time.Now(), routes: map[string]int{},
		admitted: make([]int64, nkeys), lastDenied: make([]time.Time, nkeys), owner: make([]string, nkeys),
		done: make(chan struct{})}
	for i := range nkeys {
		l.keys = append(l.keys, fmt.Sprintf("bound:%s:%d", c.project, i))
	}
	for ai, addr := range addrs {
		for w := range workers {
			l.wg.Add(1)
			go l.work(addr, rand.New(rand.NewPCG(uint64(ai), uint64(w))))
		}
	}
	t.Cleanup(l.stop)
	return l
}

func (l *dockerLoad) work(addr string, rng *rand.Rand) {
	defer l.wg.Done()
	for {
		select {
		case <-l.done:
			return
		default:
		}
		k := rng.IntN(len(l.keys))
		body := fmt.Sprintf(`{"key":%q,"algorithm":"sliding_window_log","limit":%d,"period":"10m"}`, l.keys[k], l.limit)
		began := time.Now()
		code, d, err := l.c.checkAt(addr, body)
		took := time.Since(began)
		l.mu.Lock()
		if took > l.maxLat {
			l.maxLat, l.maxLatAt = took, began.Sub(l.start)
		}
		if b := int(time.Since(l.start) / seriesStep); b >= 0 {
			for len(l.series) <= b {
				l.series = append(l.series, 0)
			}
			l.series[b]++
		}
		fail := ""
		switch {
		case err != nil:
			fail = fmt.Sprintf("%s %s: %v", addr, l.keys[k], err)
		case code != http.StatusOK:
			fail = fmt.Sprintf("%s %s: status %d: %s", addr, l.keys[k], code, d.Error)
		case !slices.Contains([]string{"owner", "forwarded", "cached_denial", "backup", "fallback"}, d.Route):
			fail = fmt.Sprintf("%s %s: route %q", addr, l.keys[k], d.Route)
		default:
			l.routes[d.Route]++
			if d.Allowed {
				l.admitted[k]++
			}
			if d.Route != "fallback" {
				l.owner[k] = d.Owner
				if !d.Allowed {
					l.lastDenied[k] = time.Now()
				}
			}
		}
		if fail != "" {
			l.nFailures++
			if len(l.failures) < 5 {
				l.failures = append(l.failures, fail)
			}
		}
		l.mu.Unlock()
	}
}

// stop stops the workers and waits for them; safe to call more than once.
func (l *dockerLoad) stop() {
	l.stopOnce.Do(func() { close(l.done) })
	l.wg.Wait()
}

// waitDenied waits until every key has been denied by an owner, a forward or a
// backup after at, and at least minTail has passed since at; it fails the test
// after within. It returns when that happened.
func (l *dockerLoad) waitDenied(at time.Time, minTail, within time.Duration) time.Time {
	l.t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := 0
		l.mu.Lock()
		for _, d := range l.lastDenied {
			if !d.After(at) {
				left++
			}
		}
		l.mu.Unlock()
		if left == 0 && time.Since(at) >= minTail {
			return time.Now()
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("%d of %d keys not denied by an owner or backup within %v (%s)", left, len(l.keys), within, l.counts())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ownedBy returns the indexes of the keys last decided by member (not by a
// fallback).
func (l *dockerLoad) ownedBy(member string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ks []int
	for k, o := range l.owner {
		if o == member {
			ks = append(ks, k)
		}
	}
	return ks
}

// counts returns a copy of the counters so far.
func (l *dockerLoad) counts() dockerLoadCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := dockerLoadCounts{limit: l.limit, admitted: slices.Clone(l.admitted), routes: maps.Clone(l.routes),
		failures: slices.Clone(l.failures), nFailures: l.nFailures, maxLat: l.maxLat, maxLatAt: l.maxLatAt}
	for _, n := range l.routes {
		s.checks += n
	}
	for _, a := range s.admitted {
		s.max = max(s.max, a)
		if a > l.limit {
			s.over++
			s.extra += a - l.limit
		}
	}
	return s
}

// rate returns the checks/s completed in [from, to), rounded to whole
// buckets of the series.
func (l *dockerLoad) rate(from, to time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	b0, b1 := int(from.Sub(l.start)/seriesStep), int(to.Sub(l.start)/seriesStep)
	b0, b1 = max(b0, 0), min(b1, len(l.series))
	if b1 <= b0 {
		return 0
	}
	n := 0
	for _, c := range l.series[b0:b1] {
		n += c
	}
	return float64(n) / (float64(b1-b0) * seriesStep.Seconds())
}

// dockerPartition disconnects ringlimit-2 from the compose network for 10 s
// (longer if the others take longer to notice), reconnects it with its address, and checks that the cluster re-forms by
// itself and that every node names the same owner for the same keys.
func dockerPartition(t *testing.T, c *composeCluster) {
	const cut = "ringlimit-2"
	others := []string{"ringlimit-1", "ringlimit-3"}
	all := dockerServices()
	id := c.container(cut)
	netName := c.network()
	ip := strings.TrimSpace(dockerRun(t, time.Minute, "", nil, "docker", "inspect", "--format",
		`{{(index .NetworkSettings.Networks "`+netName+`").IPAddress}}`, id))
	if ip == "" {
		t.Fatalf("no address of %s on %s", cut, netName)
	}

	dockerRun(t, time.Minute, "", nil, "docker", "network", "disconnect", netName, id)
	cutAt := time.Now()
	reconnected := false
	reconnect := func() {
		if !reconnected {
			reconnected = true
			dockerRun(t, time.Minute, "", nil, "docker", "network", "connect", "--ip", ip, "--alias", cut, netName, id)
		}
	}
	defer reconnect() // never leave it cut off, even on failure

	// The partition lasts 10 s, or until the others have noticed it if failure
	// detection is slower than that on a loaded machine.
	c.waitFor("the others drop the cut-off node", 30*time.Second, c.membersAre(others, others...))
	// Its published ports are gone with its network; ask it from inside.
	c.waitFor("the cut-off node sees itself alone", 30*time.Second, func() error {
		got, err := c.membersInside(id)
		if err != nil {
			return err
		}
		if len(got) != 1 || got[0] != cut {
			return fmt.Errorf("%s lists %v, want [%s]", cut, got, cut)
		}
		return nil
	})
	time.Sleep(time.Until(cutAt.Add(10 * time.Second)))
	reconnect()
	reconnectedAt := time.Now()
	t.Logf("%s reconnected with %s after %v", cut, ip, time.Since(cutAt).Round(time.Millisecond))
	c.waitFor("cluster re-formed: all three list three members (seen from inside)", 90*time.Second, func() error {
		for _, s := range all {
			got, err := c.membersInside(c.container(s))
			if err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
			if strings.Join(got, ",") != strings.Join(all, ",") {
				return fmt.Errorf("%s lists %v, want %v", s, got, all)
			}
		}
		return nil
	})
	t.Logf("re-formed %v after the reconnect", time.Since(reconnectedAt).Round(time.Millisecond))
	// Publishing of the node's ports may come back with new host ports.
	c.ports(cut)
	c.waitFor("all three list three members over HTTP", 30*time.Second, c.membersAre(all, all...))
	keys := make([]string, 32)
	for i := range keys {
		keys[i] = fmt.Sprintf("partition:%d", i)
	}
	c.waitFor("every node names the same owner for every key", 30*time.Second, func() error {
		for _, k := range keys {
			var owners []string
			for _, s := range all {
				code, d, err := c.check(s, k)
				if err != nil {
					return fmt.Errorf("%s %s: %w", s, k, err)
				}
				if code != http.StatusOK {
					return fmt.Errorf("%s %s: status %d: %s", s, k, code, d.Error)
				}
				if d.Route == "fallback" || d.Owner == "" {
					return fmt.Errorf("%s %s: route %q owner %q", s, k, d.Route, d.Owner)
				}
				owners = append(owners, d.Owner)
			}
			if owners[0] != owners[1] || owners[1] != owners[2] {
				return fmt.Errorf("key %s: owners via %v are %v", k, all, owners)
			}
		}
		return nil
	})
}

// dockerIntruder starts two daemons on the cluster's network that have the
// gossip key but no valid certificate: "nocert" runs with --insecure (no
// certificate at all) and "foreign" with a node certificate from another CA.
// Both gossip their way in, and every member refuses them at the admission
// handshake: they are listed as refused with a reason, the ring stays the
// three members, and every key is decided by one of them, never by a
// fallback. A daemon given neither certificates nor --insecure does not start.
func dockerIntruder(t *testing.T, c *composeCluster) {
	all := dockerServices()
	netName := c.network()
	gossipKey := filepath.Join(c.certs, "gossip.key")

	// Neither certificates nor --insecure: refused start, naming what is missing.
	out, err := dockerTry(time.Minute, "", nil, "docker", "run", "--rm", "--network", netName,
		"-e", "RINGLIMIT_NODE_NAME=bare", c.image)
	if err == nil || !strings.Contains(out, "--certs-dir") {
		t.Errorf("daemon without certificates: got %v\n%s\nwant a refused start naming --certs-dir", err, out)
	}

	// "foreign": a certificate from another CA, and the cluster's gossip key.
	other := filepath.Join(filepath.Dir(c.certs), "foreign")
	otherKey := filepath.Join(filepath.Dir(c.certs), "foreign-ca", "ca.key")
	cli := filepath.Join(c.bin, "ringlimit")
	dockerRun(t, time.Minute, "", nil, cli, "cert", "create-ca", "--certs-dir", other, "--ca-key", otherKey)
	dockerRun(t, time.Minute, "", nil, cli, "cert", "create-node", "foreign", "--host", "foreign,localhost,127.0.0.1", "--certs-dir", other, "--ca-key", otherKey)
	gk, err := os.ReadFile(gossipKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "gossip.key"), gk, 0o600); err != nil {
		t.Fatal(err)
	}
	// "nocert": --insecure, only the gossip key.
	nocert := filepath.Join(filepath.Dir(c.certs), "nocert")
	if err := os.MkdirAll(nocert, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nocert, "gossip.key"), gk, 0o600); err != nil {
		t.Fatal(err)
	}
	intruders := []struct {
		name, dir string
		env       []string
	}{
		{"foreign", other, []string{"RINGLIMIT_CERTS_DIR=/certs"}},
		{"nocert", nocert, []string{"RINGLIMIT_INSECURE=true"}},
	}
	for _, in := range intruders {
		dockerNonRoot(t, in.dir)
		container := c.project + "-" + in.name
		args := []string{"run", "-d", "--name", container, "--hostname", in.name, "--network", netName,
			"--user", fmt.Sprintf("%d:%d", c.uid, c.gid), "-v", in.dir + ":/certs:ro",
			"-e", "RINGLIMIT_GOSSIP_KEY_FILE=/certs/gossip.key", "-e", "RINGLIMIT_CLUSTER_LABEL=ringlimit-compose",
			"-e", "RINGLIMIT_NODE_NAME=" + in.name, "-e", "RINGLIMIT_JOIN=ringlimit-1:7946,ringlimit-2:7946",
			"-e", "RINGLIMIT_GOSSIP_PROFILE=fast"}
		for _, e := range in.env {
			args = append(args, "-e", e)
		}
		dockerRun(t, time.Minute, "", nil, "docker", append(args, c.image)...)
		t.Cleanup(func() {
			if t.Failed() {
				if out, err := dockerTry(time.Minute, "", nil, "docker", "logs", "--tail", "30", container); err == nil {
					t.Logf("%s logs:\n%s", in.name, out)
				}
			}
			dockerTry(time.Minute, "", nil, "docker", "rm", "-f", container)
		})
	}

	c.waitFor("every member lists both intruders as refused", 60*time.Second, func() error {
		for _, s := range all {
			ms, err := c.memberList(s)
			if err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
			for _, in := range intruders {
				i := slices.IndexFunc(ms, func(m dockerMember) bool { return m.Name == in.name })
				if i < 0 {
					return fmt.Errorf("%s does not list %s yet", s, in.name)
				}
				if ms[i].State != "refused" || ms[i].Reason == "" {
					return fmt.Errorf("%s lists %s as %q (reason %q), want refused with a reason", s, in.name, ms[i].State, ms[i].Reason)
				}
			}
			if got := aliveNames(ms); strings.Join(got, ",") != strings.Join(all, ",") {
				return fmt.Errorf("%s has %v in its ring, want %v", s, got, all)
			}
		}
		return nil
	})
	ms, _ := c.memberList("ringlimit-1")
	for _, m := range ms {
		if m.State == "refused" {
			t.Logf("ringlimit-1 lists %s: state %s, reason %q", m.Name, m.State, m.Reason)
		}
	}
	owners := map[string]int{}
	for i := range 60 {
		key := fmt.Sprintf("intruder:%d", i)
		for _, s := range all {
			code, d, err := c.check(s, key)
			if err != nil || code != http.StatusOK {
				t.Fatalf("%s %s: %d %v %s", s, key, code, err, d.Error)
			}
			if d.Route == "fallback" || !slices.Contains(all, d.Owner) {
				t.Errorf("%s %s: route %q owner %q, want decided by one of %v", s, key, d.Route, d.Owner, all)
			}
			owners[d.Owner]++
		}
	}
	t.Logf("60 keys x 3 entry points while the intruders gossip: owners %v, none fell back", owners)
	if _, body, err := c.get("ringlimit-1", "/metrics"); err == nil && !strings.Contains(string(body), "\nringlimit_members_refused 2\n") {
		t.Errorf("ringlimit-1 /metrics lacks ringlimit_members_refused 2")
	}
}

// dockerNonRoot returns the user the containers run as, never root: this
// process's, or when it is root the image's user 65532, which is then given
// dirs (the key files in them are 0600), as `make up` does.
func dockerNonRoot(t *testing.T, dirs ...string) (uid, gid int) {
	t.Helper()
	if os.Getuid() != 0 {
		return os.Getuid(), os.Getgid()
	}
	const nonRoot = 65532
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, nonRoot, nonRoot)
		})
		if err != nil {
			t.Fatalf("giving %s to user %d: %v", dir, nonRoot, err)
		}
	}
	return nonRoot, nonRoot
}
