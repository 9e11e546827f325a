package daemon

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/door"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// rssBytes returns this process's resident set size (VmRSS of /proc/self/status).
func rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status (not Linux): %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// memory is what the flood test bounds: the process's RSS after a collection
// that returns freed pages to the OS, or under the race detector (whose shadow memory is several times the heap) the Go runtime's
// heap and stacks in use.
func memory(t *testing.T) int64 {
	t.Helper()
	// Collect and hand freed pages back, so RSS is what is held, not what an
	// earlier phase left for reuse.
	debug.FreeOSMemory()
	if raceEnabled {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapInuse + ms.StackInuse)
	}
	return rssBytes(t)
}

// fdBudget raises RLIMIT_NOFILE's soft limit to the hard one (the Go runtime
// already does at start) and returns it.
func fdBudget(t *testing.T) int {
	t.Helper()
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Skipf("cannot read the file-descriptor limit the flood is sized by (getrlimit: %v)", err)
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			t.Logf("setrlimit: %v", err)
		}
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r)
	}
	return int(min(r.Cur, 1<<20))
}

// flood opens n TCP connections to addr that send nothing, spread over source
// addresses 127.0.1.1, 127.0.1.2, ... (perIP each), and returns them once the
// daemon has taken them all from its accept queue (a connection made after
// the flood would otherwise wait behind the whole backlog, as on any server
// during the flood's first seconds). A connection the server refuses is still
// counted: the attacker holds it.
func flood(t *testing.T, pool *door.Pool, addr string, n, perIP int) []net.Conn {
	t.Helper()
	want := pool.Accepted() + int64(n)
	defer waitUntil(t, 60*time.Second, "the flood accepted", func() bool { return pool.Accepted() >= want })
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range n {
		ip := net.IPv4(127, 0, byte(1+i/perIP/250), byte(1+(i/perIP)%250))
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("flood connection %d of %d from %v: %v", i, n, ip, err)
		}
		conns = append(conns, c)
	}
	return conns
}

// Environment of TestFloodHelperProcess, set by floodFromProcesses.
const (
	floodEnvAddr   = "RINGLIMIT_TEST_FLOOD_ADDR"
	floodEnvN      = "RINGLIMIT_TEST_FLOOD_N"
	floodEnvPerIP  = "RINGLIMIT_TEST_FLOOD_PER_IP"
	floodEnvSubnet = "RINGLIMIT_TEST_FLOOD_SUBNET"
)

// floodFromProcesses opens n TCP connections to addr that send nothing, as
// flood does, but from child processes holding perProc connections each (the
// test binary re-run as TestFloodHelperProcess), so that the attacker's
// ends do not count against this process's file-descriptor limit: a flood
// of 20,000 then fits under a hard limit of 20,000, as it does for an
// attacker on other machines. Child k dials from 127.0.(subnet+k).1, .2, ...
// (perIP each). It returns once every child holds its connections and the
// daemon has taken them all from its accept queue; the children exit when
// the test ends.
func floodFromProcesses(t *testing.T, pool *door.Pool, addr string, n, perProc, perIP, subnet int) {
	t.Helper()
	want := pool.Accepted() + int64(n)
	for k := 0; n > 0; k++ {
		m := min(n, perProc)
		n -= m
		cmd := exec.Command(os.Args[0], "-test.run=^TestFloodHelperProcess$")
		cmd.Env = append(os.Environ(), floodEnvAddr+"="+addr, floodEnvN+"="+strconv.Itoa(m),
			floodEnvPerIP+"="+strconv.Itoa(perIP), floodEnvSubnet+"="+strconv.Itoa(subnet+k))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("flood process %d: %v", k, err)
		}
		t.Cleanup(func() {
			stdin.Close() // the child closes its connections and exits
			_ = cmd.Wait()
		})
		ready := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if line := sc.Text(); strings.HasPrefix(line, "flood ") {
					ready <- line
					return
				}
			}
			ready <- "flood failed: no answer"
		}()
		select {
		case line := <-ready:
			if line != "flood ready "+strconv.Itoa(m) {
				t.Fatalf("flood process %d: %s", k, line)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("flood process %d: not ready after 2 min", k)
		}
	}
	waitUntil(t, 60*time.Second, "the flood accepted", func() bool { return pool.Accepted() >= want })
}

// TestFloodHelperProcess is not a test: floodFromProcesses runs the test
// binary with it to hold one part of a connection flood in a process of its
// own. It dials, prints "flood ready <n>" (or "flood failed: ..."), and
// holds the connections until its stdin closes.
func TestFloodHelperProcess(t *testing.T) {
	addr := os.Getenv(floodEnvAddr)
	if addr == "" {
		t.Skip("helper process of TestDoorsUnderConnectionFlood: runs only when that test starts it")
	}
	n, _ := strconv.Atoi(os.Getenv(floodEnvN))
	perIP, _ := strconv.Atoi(os.Getenv(floodEnvPerIP))
	subnet, _ := strconv.Atoi(os.Getenv(floodEnvSubnet))
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) == nil && r.Cur < r.Max {
		r.Cur = r.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	}
	conns := make([]net.Conn, 0, n)
	for i := range n {
		ip := net.IPv4(127, 0, byte(subnet), byte(1+i/max(perIP, 1)))
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			fmt.Printf("flood failed: connection %d of %d from %v: %v\n", i, n, ip, err)
			return
		}
		conns = append(conns, c)
	}
	fmt.Printf("flood ready %d\n", len(conns))
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}

// within runs f and fails the test unless it returns nil within 1 s.
func within(t *testing.T, what string, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	if err := f(ctx); err != nil {
		t.Errorf("%s during the flood: %v (after %v), want an answer within 1s", what, err, time.Since(start))
		return
	}
	t.Logf("%s during the flood: answered in %v", what, time.Since(start).Round(100*time.Microsecond))
}

func readyz(d *Daemon) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, "GET", "http://"+d.AdminAddr()+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := (&http.Transport{DisableKeepAlives: true}).RoundTrip(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	}
}

// TestDoorsUnderConnectionFlood: idle connections that never send a byte and
// unfinished maximal RESP commands from unauthenticated sources neither shut
// authenticated clients out (one connected before the flood, one that
// connects during it) nor grow the daemon's memory past 200 MB, and /readyz
// answers throughout; then the same for raw connections on the client gRPC
// port.
//
// The attack counts are 10,000 (RESP) and 20,000 (gRPC). The RESP flood's
// connections are held by this process, so it is capped at what the fd
// limit leaves once the daemon's cap (its default, 6,000, or less under a
// low limit) is counted (the full 10,000 under a hard limit of 20,000); any
// count above that cap exercises the same path (the pool is full and evicts
// the oldest unauthenticated connection). The gRPC flood's 20,000 are held
// by two child processes (floodFromProcesses), as an attacker elsewhere
// would hold them.
func TestDoorsUnderConnectionFlood(t *testing.T) {
	// The daemon's cap: its default (door.DefaultMaxConns), or a third of
	// what the fd limit leaves once the daemon's own files and the test's
	// clients (1500) are set aside.
	nofile := fdBudget(t)
	maxConns := min(door.DefaultMaxConns(uint64(nofile)), (nofile-1500)/3)
	budget := nofile - maxConns - 1500
	if maxConns < 200 {
		t.Skipf("RLIMIT_NOFILE %d is too low for a flood above a meaningful cap (need about 2,100)", nofile)
	}
	p := newTestPKI(t)
	d := startDaemon(t, testConfig(t, p, "flooded", "--redis-port", "0",
		"--max-conns", strconv.Itoa(maxConns), "--auth-timeout", "1m"))
	ctx := context.Background()

	// Connected and authenticated before the flood.
	before := redis.NewClient(&redis.Options{Addr: d.RedisAddr(), TLSConfig: p.anonTLS, Password: testToken, PoolSize: 1, MaxRetries: -1})
	defer before.Close()
	throttle := func(c *redis.Client) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			r, err := c.Do(ctx, "CL.THROTTLE", "flood:key", "1000", "1000", "60").Int64Slice()
			if err == nil && (len(r) != 5 || r[0] != 0) {
				err = fmt.Errorf("CL.THROTTLE: got %v, want allowed", r)
			}
			return err
		}
	}
	if err := throttle(before)(ctx); err != nil {
		t.Fatal(err)
	}
	gconn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(p.anonTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer gconn.Close()
	grpcCheck := func(c *grpc.ClientConn) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+testToken)
			_, err := pb.NewLimiterClient(c).Check(ctx, &pb.CheckRequest{Check: &pb.Check{
				Key: []byte("flood:grpc"), Algorithm: pb.Algorithm_ALGORITHM_GCRA, Limit: 1000, PeriodNs: int64(time.Second), Hits: 1}})
			return err
		}
	}
	if err := grpcCheck(gconn)(ctx); err != nil {
		t.Fatal(err)
	}
	idle := memory(t)

	// RESP: 10 unfinished maximal commands (1,024 arguments of 64 KiB
	// announced; 1 MiB sent each), then the idle connections.
	var wg sync.WaitGroup
	for i := range 10 {
		c, err := tls.DialWithDialer(&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 2, byte(1+i))}}, "tcp", d.RedisAddr(), p.anonTLS)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Go(func() {
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			w := bufio.NewWriter(c)
			fmt.Fprintf(w, "*1024\r\n$65536\r\n")
			chunk := strings.Repeat("x", 64<<10)
			for range 16 {
				if _, err := w.WriteString(chunk); err != nil {
					return // closed by the server: the bound works
				}
			}
			w.Flush()
		})
	}
	wg.Wait()
	nResp := min(10000, budget)
	conns := flood(t, d.ClientPool(), d.RedisAddr(), nResp, 1000)
	t.Logf("RESP: %d idle connections, 10 unfinished commands; open on the client doors: %d (cap %d)", len(conns), d.ClientPool().Open(), maxConns)
	within(t, "CL.THROTTLE on a connection authenticated before", throttle(before))
	during := redis.NewClient(&redis.Options{Addr: d.RedisAddr(), TLSConfig: p.anonTLS, Password: testToken, PoolSize: 1, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second})
	defer during.Close()
	within(t, "CL.THROTTLE on a new authenticated connection", throttle(during))
	within(t, "GET /readyz", readyz(d))
	if grown := memory(t) - idle; grown > 200<<20 {
		t.Errorf("memory grew %d MB under the RESP flood, want under 200 MB (race detector: %v)", grown>>20, raceEnabled)
	} else {
		t.Logf("memory grew %d MB under the RESP flood (race detector: %v)", grown>>20, raceEnabled)
	}
	for _, c := range conns {
		c.Close()
	}

	// gRPC: 20,000 raw connections, no TLS byte, held by two child
	// processes of 10,000 each (this process's fd limit holds the daemon).
	const nGRPC = 20000
	floodFromProcesses(t, d.ClientPool(), d.GRPCAddr(), nGRPC, 10000, 1000, 20)
	t.Logf("gRPC: %d raw connections from 2 processes; open on the client doors: %d (cap %d)", nGRPC, d.ClientPool().Open(), maxConns)
	within(t, "gRPC Check on a connection authenticated before", grpcCheck(gconn))
	gnew, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(p.anonTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer gnew.Close()
	within(t, "gRPC Check on a new connection", grpcCheck(gnew))
	within(t, "GET /readyz", readyz(d))
	if grown := memory(t) - idle; grown > 200<<20 {
		t.Errorf("memory grew %d MB under the gRPC flood, want under 200 MB (race detector: %v)", grown>>20, raceEnabled)
	} else {
		t.Logf("memory grew %d MB under the gRPC flood (race detector: %v)", grown>>20, raceEnabled)
	}
}

// TestHTTP401ClosesConnection: an unauthenticated HTTP/1.1 keep-alive
// connection is closed right after its 401 (it used to stay open for the
// 2-minute idle timeout).
func TestHTTP401ClosesConnection(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	d := startDaemon(t, testConfig(t, p, "http401"))
	c, err := tls.Dial("tcp", d.HTTPAddr(), p.anonTLS.Clone())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /v1/members HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status: got %d, want 401", resp.StatusCode)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the 401: got %v, want EOF (connection closed by the server)", err)
	}
}

// TestRESPAuthGuessesThrottled: one connection gets at most
// --max-auth-failures (3) wrong AUTHs, each answered late, then is closed;
// the refusals are counted (it used to answer 230k guesses a second).
func TestRESPAuthGuessesThrottled(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	d := startDaemon(t, testConfig(t, p, "guessed", "--redis-port", "0"))
	c, err := tls.Dial("tcp", d.RedisAddr(), p.anonTLS.Clone())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	var req strings.Builder
	for i := range 10 {
		fmt.Fprintf(&req, "AUTH guess-%d-xxxxxxxxxxxxxxxx\r\n", i)
	}
	if _, err := io.WriteString(c, req.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	answered := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			break // closed by the server
		}
		if strings.HasPrefix(line, "-WRONGPASS") {
			answered++
		}
	}
	if answered > 3 {
		t.Errorf("wrong AUTHs answered on one connection: got %d, want at most 3 before it is closed", answered)
	}
	metrics := func() string {
		resp, err := http.Get("http://" + d.AdminAddr() + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	defer func() {
		if t.Failed() {
			for _, l := range strings.Split(metrics(), "\n") {
				if strings.Contains(l, "auth") || strings.Contains(l, "door") {
					t.Log(l)
				}
			}
		}
	}()
	waitUntil(t, 5*time.Second, "the refusals counted", func() bool {
		m := metrics()
		return strings.Contains(m, `ringlimit_auth_failures_total{listener="redis"} 3`) &&
			strings.Contains(m, `ringlimit_door_closed_total{door="redis",pool="client",reason="auth_failures"} 1`)
	})
}
