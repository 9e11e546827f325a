package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/clustertest"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
)

// startCluster starts an in-process cluster of n nodes (clustertest.Start: one
// that waits for a slow owner instead of failing over) and a RESP server in
// front of each, and returns the servers' addresses and the cluster's count of
// degraded decisions, for failure messages.
func startCluster(t *testing.T, n int, mod func(*Config)) ([]string, *clustertest.Degraded) {
	t.Helper()
	c, deg := clustertest.Start(t, n)
	var addrs []string
	for _, nd := range c.Nodes() {
		addrs = append(addrs, serve(t, Config{Checker: nd}, mod))
	}
	return addrs, deg
}

// client is a go-redis client of addr that never retries a command (a retried
// check is counted twice) and waits up to a minute for a reply, closed at the
// test's cleanup; mod, when not nil, changes the options first.
func client(t *testing.T, addr string, mod func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: time.Minute}
	if mod != nil {
		mod(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// serve starts a Server for cfg (after mod) on a free loopback port.
func serve(t *testing.T, cfg Config, mod func(*Config)) string {
	t.Helper()
	// A check waits for a slow owner as long as the cluster's forwards do: one
	// given up on may still be counted, and the tests compare counts exactly.
	cfg.CheckTimeout = clustertest.ForwardTimeout
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: got %v, want nil after Close", err)
		}
	})
	return ln.Addr().String()
}

// redisCLI runs Debian's redis-cli (redis-tools) against addr.
func redisCLI(t *testing.T, addr string, extra []string, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found (.ci/run installs Debian's redis-tools): %v", err)
	}
	host, port, _ := net.SplitHostPort(addr)
	argv := append([]string{"-h", host, "-p", port}, extra...)
	out, err := exec.Command(path, append(argv, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func fields(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestRedisCLIThrottle: the example and redis-cell's README examples,
// through redis-cli, on a 3-node cluster (the key is decided by its owner
// whichever node answers).
func TestRedisCLIThrottle(t *testing.T) {
	t.Parallel()
	addrs, deg := startCluster(t, 3, nil)
	steps := []struct {
		addr string
		args []string
		want string
	}{
		{addrs[0], []string{"CL.THROTTLE", "user123", "0", "1", "2", "1"}, "0 1 0 -1 2"},
		{addrs[1], []string{"CL.THROTTLE", "user123", "0", "1", "2", "1"}, "1 1 0 2 2"},
		// redis-cell README: 15 max burst, 30 per 60 s, fresh key.
		{addrs[2], []string{"cl.throttle", "user:readme", "15", "30", "60"}, "0 16 15 -1 2"},
		{addrs[0], []string{"CL.THROTTLE", "user:readme", "15", "30", "60", "1"}, "0 16 14 -1 4"},
		// quantity 0 peeks.
		{addrs[1], []string{"CL.THROTTLE", "user:readme", "15", "30", "60", "0"}, "0 16 14 -1 4"},
	}
	start := time.Now()
	prev := start
	for _, s := range steps {
		sent := time.Now()
		got := fields(redisCLI(t, s.addr, nil, s.args...))
		// gap is the most time that can have passed between this check's
		// decision and the previous one's.
		gap := time.Since(prev)
		prev = sent
		if got == s.want {
			continue
		}
		// The exact replies assume the steps run within a second (the
		// emission interval of user:readme is 2 s, replies count whole
		// seconds). On a loaded machine (a CI run of every package under
		// -race, or one stalled for seconds) they may not: then time can only
		// have refilled the key and brought its reset closer (see
		// throttleLater).
		if elapsed := time.Since(start); elapsed < 900*time.Millisecond || !throttleLater(got, s.want, gap) {
			t.Errorf("%v on %s after %v: got %q, want %q (cluster: %v)", s.args, s.addr, elapsed, got, s.want, deg)
		}
	}
}

// throttleLater reports whether CL.THROTTLE reply got is what want becomes
// as time passes, when at most gap passed since the key's previous check: the
// same limit; a denial turned into an admission only if gap reaches the
// denial's retry_after (s); otherwise the same allowed and retry fields,
// remaining no lower and reset no later.
func throttleLater(got, want string, gap time.Duration) bool {
	g, w := strings.Fields(got), strings.Fields(want)
	if len(g) != 5 || len(w) != 5 || g[1] != w[1] {
		return false
	}
	if w[0] == "1" && g[0] == "0" && g[3] == "-1" {
		retry, err := strconv.Atoi(w[3])
		return err == nil && gap >= time.Duration(retry)*time.Second
	}
	if g[0] != w[0] || g[3] != w[3] {
		return false
	}
	gr, err1 := strconv.Atoi(g[2])
	wr, err2 := strconv.Atoi(w[2])
	gs, err3 := strconv.Atoi(g[4])
	ws, err4 := strconv.Atoi(w[4])
	return err1 == nil && err2 == nil && err3 == nil && err4 == nil && gr >= wr && gs <= ws
}

// TestThrottleErrors: redis-cell v0.5's error replies, byte for byte where
// redis-cell answers, and the same wrapping where ringlimit refuses more.
func TestThrottleErrors(t *testing.T) {
	t.Parallel()
	addrs, _ := startCluster(t, 1, nil)
	c := client(t, addrs[0], nil)
	ctx := context.Background()
	for _, tt := range []struct {
		args []any
		want string
	}{
		{[]any{"CL.THROTTLE", "k", "1", "2"}, "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"},
		{[]any{"CL.THROTTLE", "k", "1", "2", "3", "4", "5"}, "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"},
		{[]any{"CL.THROTTLE", "k", "x", "2", "3"}, "Cell error: Store error: Couldn't parse as integer: x"},
		{[]any{"CL.THROTTLE", "k", "1", "2", "3.5"}, "Cell error: Store error: Couldn't parse as integer: 3.5"},
		{[]any{"CL.THROTTLE", "k", "1", "99999999999999999999", "3"}, "Cell error: Store error: Couldn't parse as integer: 99999999999999999999"},
		{[]any{"CL.THROTTLE", "k", "1", "0", "3"}, "Cell error: Store error: Zero rates are not supported"},
		{[]any{"CL.THROTTLE", "k", "1", "5", "0"}, "Cell error: Store error: Zero rates are not supported"},
		{[]any{"CL.THROTTLE", "k", "-1", "5", "60"}, "Cell error: Store error: field max_burst value -1: must be >= 0"},
		{[]any{"CL.THROTTLE", "k", "1", "5", "60", "-2"}, "Cell error: Store error: field quantity value -2: must be in 0..2147483648"},
		{[]any{"CL.THROTTLE", strings.Repeat("k", 1025), "1", "5", "60"}, "Cell error: Store error: field key value 1025 bytes: must be 1..1024 bytes"},
		{[]any{"RL.CHECK", "k", "leaky", "5", "1s"}, `ERR field algorithm value "leaky": must be one of ` + algo.KindNames(", ")},
		{[]any{"RL.CHECK", "k", "gcra", "5"}, "ERR Usage: rl.check <key> <algorithm> <limit> <period> [<burst> [<hits>]] [MAXWAIT <max_wait>]"},
		{[]any{"RL.CHECK", "k", "gcra", "5", "soon"}, `ERR period "soon": want a duration such as 1m or 250ms, or an integer of ms`},
		{[]any{"NOSUCH", "a"}, "ERR unknown command 'NOSUCH', with args beginning with: 'a' "},
		{[]any{"SELECT", "1"}, "ERR DB index is out of range"},
		{[]any{"AUTH", "x"}, "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"},
		{[]any{"HELLO", "3"}, "NOPROTO sorry, this protocol version is not supported."},
	} {
		err := c.Do(ctx, tt.args...).Err()
		if err == nil || err.Error() != tt.want {
			t.Errorf("%v: got %v, want error %q", tt.args[:min(len(tt.args), 4)], err, tt.want)
		}
	}
	// And it keeps serving on the same connection.
	if got, err := c.Do(ctx, "CL.THROTTLE", "k", "1", "5", "60").Int64Slice(); err != nil || len(got) != 5 || got[0] != 0 {
		t.Errorf("after the errors: got %v, %v, want an allowed reply", got, err)
	}
}

// TestRLCheck: every algorithm through RL.CHECK, durations in ms.
func TestRLCheck(t *testing.T) {
	t.Parallel()
	addrs, _ := startCluster(t, 1, nil)
	c := client(t, addrs[0], nil)
	ctx := context.Background()
	for _, algoName := range []string{"sliding_window_log", "sliding_window_counter", "fixed_window", "gcra", "token_bucket"} {
		key := "rl:" + algoName
		var allowed int
		for range 5 {
			r, err := c.Do(ctx, "RL.CHECK", key, algoName, "3", "1h", "2").Int64Slice()
			if err != nil || len(r) != 5 {
				t.Fatalf("%s: got %v, %v", algoName, r, err)
			}
			if r[0] == 0 {
				allowed++
			} else if r[3] <= 0 {
				t.Errorf("%s: denied with retry_after_ms %d, want > 0", algoName, r[3])
			}
		}
		want := 3 // windows: limit 3; gcra: burst 2 = capacity 3
		if algoName == "token_bucket" {
			want = 2 // capacity = burst
		}
		if allowed != want {
			t.Errorf("%s: got %d allowed of 5, want %d", algoName, allowed, want)
		}
	}
}

// TestConnectHandshakes: what clients send on connect.
func TestConnectHandshakes(t *testing.T) {
	t.Parallel()
	addrs, _ := startCluster(t, 1, nil)
	// go-redis v9 sends HELLO 3 then falls back to RESP2, and CLIENT SETINFO.
	c := redis.NewClient(&redis.Options{Addr: addrs[0], ClientName: "tester"})
	defer c.Close()
	ctx := context.Background()
	if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING: got %q, %v", got, err)
	}
	if got, err := c.Echo(ctx, "hi").Result(); err != nil || got != "hi" {
		t.Errorf("ECHO: got %q, %v", got, err)
	}
	if got, err := c.ClientGetName(ctx).Result(); err != nil || got != "tester" {
		t.Errorf("CLIENT GETNAME: got %q, %v, want tester", got, err)
	}
	if id, err := c.ClientID(ctx).Result(); err != nil || id <= 0 {
		t.Errorf("CLIENT ID: got %d, %v", id, err)
	}
	if err := c.Do(ctx, "SELECT", "0").Err(); err != nil {
		t.Errorf("SELECT 0: %v", err)
	}
	if info, err := c.Info(ctx, "server").Result(); err != nil || !strings.Contains(info, "redis_version:") {
		t.Errorf("INFO server: got %q, %v", info, err)
	}
	if n, err := c.Do(ctx, "COMMAND", "COUNT").Int64(); err != nil || n < 2 {
		t.Errorf("COMMAND COUNT: got %d, %v", n, err)
	}
	// redis-cli in interactive-like use: COMMAND and INFO work through it too.
	if out := redisCLI(t, addrs[0], nil, "COMMAND"); !strings.Contains(out, "cl.throttle") {
		t.Errorf("redis-cli COMMAND: got %q, want cl.throttle listed", out)
	}
	if out := redisCLI(t, addrs[0], nil, "PING"); out != "PONG" {
		t.Errorf("redis-cli PING: got %q", out)
	}
}

// TestAuth: with client tokens, every command but AUTH/HELLO/QUIT needs AUTH.
func TestAuth(t *testing.T) {
	t.Parallel()
	addrs, _ := startCluster(t, 1, func(c *Config) {
		c.Authenticate = func(_, p string) (string, bool) { return "tester", p == "s3cret-token" }
	})
	ctx := context.Background()
	anon := redis.NewClient(&redis.Options{Addr: addrs[0], DisableIdentity: true})
	defer anon.Close()
	if err := anon.Do(ctx, "CL.THROTTLE", "k", "1", "5", "60").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Errorf("unauthenticated CL.THROTTLE: got %v, want NOAUTH", err)
	}
	wrong := redis.NewClient(&redis.Options{Addr: addrs[0], Password: "nope"})
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("wrong token: got %v, want WRONGPASS", err)
	}
	good := redis.NewClient(&redis.Options{Addr: addrs[0], Password: "s3cret-token"})
	defer good.Close()
	if r, err := good.Do(ctx, "CL.THROTTLE", "k", "1", "5", "60").Int64Slice(); err != nil || r[0] != 0 {
		t.Errorf("with the token: got %v, %v, want allowed", r, err)
	}
	// redis-cli -a
	if out := redisCLI(t, addrs[0], []string{"-a", "s3cret-token", "--no-auth-warning"}, "CL.THROTTLE", "k2", "1", "5", "60"); fields(out) != "0 2 1 -1 12" {
		t.Errorf("redis-cli -a: got %q", fields(out))
	}
	if out := redisCLI(t, addrs[0], nil, "CL.THROTTLE", "k2", "1", "5", "60"); !strings.Contains(out, "NOAUTH") {
		t.Errorf("redis-cli without -a: got %q, want NOAUTH", out)
	}
}

// TestPipelineOrder sends 10,000 CL.THROTTLE in one go-redis pipeline, 100 keys
// of capacity 50 interleaved, through one node of a 3-node cluster: each key's
// first 50 checks are admitted and the rest denied, in request order.
func TestPipelineOrder(t *testing.T) {
	t.Parallel()
	addrs, deg := startCluster(t, 3, nil)
	c := client(t, addrs[1], nil) // no retries: a retried pipeline would take its checks twice
	ctx := context.Background()
	const keys, n = 100, 10000
	p := c.Pipeline()
	cmds := make([]*redis.Cmd, n)
	for i := range n {
		cmds[i] = p.Do(ctx, "CL.THROTTLE", fmt.Sprintf("pipe:%d", i%keys), "49", "1", "3600")
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for i, cmd := range cmds {
		r, err := cmd.Int64Slice()
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		k := i % keys
		seen[k]++
		wantLimited := int64(0)
		if seen[k] > 50 {
			wantLimited = 1
		}
		if r[0] != wantLimited {
			t.Fatalf("reply %d (key %d, check %d): got limited=%d, want %d (cluster: %v)", i, k, seen[k], r[0], wantLimited, deg)
		}
		if wantLimited == 0 && r[2] != int64(50-seen[k]) {
			t.Fatalf("reply %d: got remaining %d, want %d (cluster: %v)", i, r[2], 50-seen[k], deg)
		}
	}
}

// TestConcurrentConnectionsOneKey: 64 go-redis connections over the 3 nodes
// hammer one GCRA key of capacity 100 that cannot refill in the test: exactly
// 100 admitted.
func TestConcurrentConnectionsOneKey(t *testing.T) {
	t.Parallel()
	addrs, deg := startCluster(t, 3, nil)
	ctx := context.Background()
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		c := client(t, addrs[i%3], func(o *redis.Options) { o.PoolSize = 1 })
		wg.Go(func() {
			for range 20 {
				r, err := c.Do(ctx, "CL.THROTTLE", "hot", "99", "1", "86400").Int64Slice()
				if err != nil {
					t.Error(err)
					return
				}
				if r[0] == 0 {
					admitted.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 100 || denied.Load() != 64*20-100 {
		t.Errorf("got %d admitted, %d denied, want exactly 100 admitted of %d (cluster: %v)", admitted.Load(), denied.Load(), 64*20, deg)
	}
}

// rawExchange writes req on a fresh connection and reads one reply line.
func rawExchange(t *testing.T, addr, req string) (string, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the reply to %q: %v", req[:min(len(req), 40)], err)
	}
	return strings.TrimRight(line, "\r\n"), conn
}

// TestLimitsAndMalformedInput: requests over the limits and malformed ones get
// an error reply; the server keeps serving every other connection.
func TestLimitsAndMalformedInput(t *testing.T) {
	t.Parallel()
	addrs, _ := startCluster(t, 1, func(c *Config) { c.MaxConns = 3; c.MaxBulk = 1024; c.MaxArgs = 16; c.MaxInline = 256 })
	addr := addrs[0]
	keep := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer keep.Close()
	ctx := context.Background()
	if err := keep.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ req, want string }{
		{"*1\r\n$100000000\r\n", "-ERR Protocol error: invalid bulk length (100000000 bytes, max 1024)"},
		{"*100\r\n", "-ERR Protocol error: too many arguments (100, max 16)"},
		{strings.Repeat("x", 300) + "\r\n", "-ERR Protocol error: too big inline request (max 256 bytes)"},
		{"*1\r\n$abc\r\n", "-ERR Protocol error: invalid bulk length"},
		{"*2\r\n$4\r\nPING\r\n:1\r\n", "-ERR Protocol error: expected '$', got ':'"},
	} {
		got, conn := rawExchange(t, addr, tt.req)
		conn.Close()
		if got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.req[:min(len(tt.req), 20)], got, tt.want)
		}
	}
	// A valid request before the oversized one on the same connection is
	// answered first.
	got, conn := rawExchange(t, addr, "PING\r\n*1\r\n$5000\r\n")
	if got != "+PONG" {
		t.Errorf("PING before an oversized bulk: got %q, want +PONG", got)
	}
	conn.Close()
	// Connection limit: keep holds one; two more fill it; the next is refused.
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c3, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, conn := rawExchange(t, addr, "PING\r\n")
		conn.Close()
		if got == "-ERR max number of clients reached" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("4th connection: got %q, want max number of clients reached", got)
		}
	}
	// The held connection still works.
	if err := keep.Ping(ctx).Err(); err != nil {
		t.Errorf("existing connection after the refusals: %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{}); !errors.Is(err, ErrConfig) {
		t.Errorf("nil Checker: got %v, want ErrConfig", err)
	}
	if _, err := New(Config{Checker: fakeChecker{}, MaxConns: -1}); !errors.Is(err, ErrConfig) {
		t.Errorf("MaxConns -1: got %v, want ErrConfig", err)
	}
}

type fakeChecker struct{}

func (fakeChecker) Check(context.Context, node.Check) (node.Decision, error) {
	return node.Decision{}, nil
}

// TestRLPolicy: descriptors against the policy file, on a 3-node cluster.
func TestRLPolicy(t *testing.T) {
	t.Parallel()
	cl, deg := clustertest.Start(t, 3)
	p, err := policy.Parse("seed.yaml", []byte(`
domain: api
descriptors:
  - key: api_id
    value: post
    rate_limit: {unit: hour, requests_per_unit: 3, name: post-default}
    descriptors:
      - key: app_id
        value: vip
        rate_limit: {unit: hour, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, n := range cl.Nodes() {
		lim, err := policy.NewLimiter(n, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, serve(t, Config{Checker: n, Policy: lim}, nil))
	}
	bg := context.Background()
	count := func(args ...any) (allowed int, last []any) {
		for i := range 8 {
			r, err := client(t, addrs[i%3], nil).Do(bg, args...).Slice()
			if err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			if r[0].(int64) == 0 {
				allowed++
			}
			last = r
		}
		return allowed, last
	}
	if n, last := count("RL.POLICY", "api", "1", "api_id", "post"); n != 3 || last[5] != "post-default" || last[6] != "denied" {
		t.Errorf("api_id=post: got %d allowed, last %v, want 3 and rule post-default denied (cluster: %v)", n, last, deg)
	}
	if n, last := count("RL.POLICY", "api", "1", "api_id", "post", "app_id", "vip"); n != 5 || last[6] != "denied" {
		t.Errorf("app_id=vip override: got %d allowed, last %v, want 5 (cluster: %v)", n, last, deg)
	}
	if n, last := count("RL.POLICY", "api", "1", "api_id", "get"); n != 8 || last[6] != "no_rule" {
		t.Errorf("no rule: got %d allowed, last %v, want all 8 and no_rule", n, last)
	}
	// Without a policy file the command says so.
	bare := serve(t, Config{Checker: cl.Nodes()[0]}, nil)
	c := redis.NewClient(&redis.Options{Addr: bare})
	defer c.Close()
	if err := c.Do(bg, "RL.POLICY", "api", "1", "api_id", "post").Err(); err == nil || !strings.Contains(err.Error(), "--policy-file") {
		t.Errorf("no policy: got %v, want an error naming --policy-file", err)
	}
}

// TestUnauthenticatedRequestBound: before AUTH a request may hold at most
// MaxUnauthRequest bytes (an unfinished 1,024 x 64 KiB command used to be
// buffered whole); a header line that never ends is bounded too, and AUTH
// lifts the pre-AUTH bound.
func TestUnauthenticatedRequestBound(t *testing.T) {
	t.Parallel()
	var authed []string
	var mu sync.Mutex
	addr := serve(t, Config{Checker: fakeChecker{}}, func(c *Config) {
		c.Authenticate = func(_, p string) (string, bool) { return "tester", p == "s3cret-token" }
		c.MaxUnauthRequest = 1024
		c.OnAuth = func(remote string, ok bool) bool {
			mu.Lock()
			defer mu.Unlock()
			authed = append(authed, fmt.Sprint(ok))
			return false
		}
	})
	big := "*1024\r\n$65536\r\n" + strings.Repeat("x", 2000)
	got, conn := rawExchange(t, addr, big)
	if got != "-ERR Protocol error: request over 1024 bytes before AUTH" {
		t.Errorf("unfinished maximal command before AUTH: got %q, want the pre-AUTH bound", got)
	}
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Errorf("connection over the pre-AUTH bound: still open, want closed")
	}
	conn.Close()
	// A header line that never ends (redcon buffers it whole otherwise).
	got, conn = rawExchange(t, addr, "*1\r\n$"+strings.Repeat("9", 900)+strings.Repeat("x", 200))
	conn.Close()
	if !strings.HasPrefix(got, "-ERR Protocol error:") {
		t.Errorf("endless header line: got %q, want a protocol error", got)
	}
	// After AUTH a 2,000-byte argument is fine.
	c := client(t, addr, func(o *redis.Options) { o.Password = "s3cret-token" })
	if got, err := c.Echo(context.Background(), strings.Repeat("y", 2000)).Result(); err != nil || len(got) != 2000 {
		t.Errorf("ECHO of 2000 bytes after AUTH: got %d bytes, %v", len(got), err)
	}
	wrong := client(t, addr, func(o *redis.Options) { o.Password = "nope" })
	_ = wrong.Ping(context.Background()).Err()
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(authed, "true") || !slices.Contains(authed, "false") {
		t.Errorf("OnAuth: got %v, want a true and a false", authed)
	}
}

// TestRLCheckMaxWait: RL.CHECK ... MAXWAIT waits for the slot instead of
// answering limited, replies with the same five integers, and refuses a
// window algorithm or a bad duration.
func TestRLCheckMaxWait(t *testing.T) {
	t.Parallel()
	addrs, _ := startCluster(t, 1, nil)
	c := client(t, addrs[0], nil)
	ctx := context.Background()
	// gcra 10/s, burst 0: one hit per 100 ms, so three waits take 200 ms.
	start := time.Now()
	for i := range 3 {
		r, err := c.Do(ctx, "RL.CHECK", "rl:wait", "gcra", "10", "1s", "0", "1", "MAXWAIT", "1s").Int64Slice()
		if err != nil || len(r) != 5 || r[0] != 0 {
			t.Fatalf("check %d: got %v, %v, want allowed", i, r, err)
		}
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("three waits took %v, want about 200 ms (each waits for its slot)", took)
	}
	// One hit per 10 s: a wait of 1 s cannot be booked and is limited at once.
	if r, err := c.Do(ctx, "RL.CHECK", "rl:slow", "gcra", "1", "10s", "0", "1").Int64Slice(); err != nil || r[0] != 0 {
		t.Fatalf("first: got %v, %v, want allowed", r, err)
	}
	r, err := c.Do(ctx, "RL.CHECK", "rl:slow", "gcra", "1", "10s", "0", "1", "MAXWAIT", "1000").Int64Slice()
	if err != nil || r[0] != 1 || r[3] <= 0 {
		t.Errorf("MAXWAIT 1000 ms on a 10 s slot: got %v, %v, want limited with a retry_after_ms", r, err)
	}
	for _, args := range [][]any{
		{"RL.CHECK", "rl:w", "fixed_window", "10", "1s", "0", "1", "MAXWAIT", "1s"},
		{"RL.CHECK", "rl:w", "gcra", "10", "1s", "0", "1", "maxwait", "soon"},
		{"RL.CHECK", "rl:w", "gcra", "10", "1s", "0", "1", "MAXWAIT", "-5"},
	} {
		if err := c.Do(ctx, args...).Err(); err == nil || !strings.Contains(err.Error(), "max_wait") {
			t.Errorf("%v: got %v, want an error naming max_wait", args, err)
		}
	}
}

// errChecker answers every check with err.
type errChecker struct{ err error }

func (c errChecker) Check(context.Context, node.Check) (node.Decision, error) {
	return node.Decision{}, c.err
}

// TestErrorClasses: the RESP door answers a check outside the caller's scope
// with Redis's ACL refusal (-NOPERM) and a full key table with Redis's
// refusal at maxmemory (-OOM), each naming why, on every check command
// (CL.THROTTLE included); invalid input stays -ERR.
func TestErrorClasses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&node.PermissionError{Who: `credential "a"`, Forbids: `may only check keys starting with one of its key_prefixes ["a:"]`},
			`NOPERM permission denied: credential "a" may only check keys starting with one of its key_prefixes ["a:"]`},
		{&node.KeyTableFullError{Who: "this node", Text: "holds 3 keys, its MaxKeys, none of them idle", RetryAfter: 5 * time.Second},
			"OOM key table full: this node holds 3 keys, its MaxKeys, none of them idle; the earliest key frees in 5s"},
		{fmt.Errorf("%w: stopping", node.ErrUnavailable), "ERR unavailable: "},
	} {
		rc := client(t, serve(t, Config{Checker: errChecker{tc.err}}, nil), nil)
		for _, args := range [][]any{{"CL.THROTTLE", "k", "5", "10", "60"}, {"RL.CHECK", "k", "gcra", "10", "1m"}} {
			err := rc.Do(context.Background(), args...).Err()
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("%v with %v: got %v, want %q", args[0], tc.err, err, tc.want)
			}
		}
	}
}
