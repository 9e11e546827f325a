package cluster_test

// Helpers of docker_test.go: building the image, driving docker-compose, and
// talking to the daemons' HTTP APIs. Every name here starts with "docker" or
// "compose" so that it cannot clash with the in-process cluster tests of this
// package.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/transport/pki"
)

// requireDockerEnv names the environment variable that, set to 1, makes
// TestDockerCompose fail instead of skipping when it cannot run (.ci/run sets it).
const requireDockerEnv = "RINGLIMIT_REQUIRE_DOCKER"

// dockerServices returns the services of docker-compose.yml, in order.
func dockerServices() []string { return []string{"ringlimit-1", "ringlimit-2", "ringlimit-3"} }

// composeCluster is one docker-compose project of docker-compose.yml running the
// locally built image.
type composeCluster struct {
	t       *testing.T
	root    string // module root, holding docker-compose.yml
	bin     string // directory of the static binaries
	project string
	image   string
	subnet  string
	env     []string
	http    map[string]string // service -> host:port of its HTTPS client API on 127.0.0.1
	grpc    map[string]string // service -> host:port of its gRPC API on 127.0.0.1
	admin   map[string]string // service -> host:port of its admin API on 127.0.0.1
	redis   map[string]string // service -> host:port of its Redis-protocol port on 127.0.0.1
	certs   string            // directory of the per-node certs directories
	caKey   string            // the CA key (never mounted)
	client  *http.Client      // HTTPS with the client certificate "root"
	uid     int               // user the containers run as (never root)
	gid     int               // its group
}

// on returns a copy of c reporting to t (a subtest); the port maps are shared.
func (c *composeCluster) on(t *testing.T) *composeCluster {
	cc := *c
	cc.t = t
	return &cc
}

// dockerAvailable returns "" when a Docker engine and docker-compose answer,
// else why not.
func dockerAvailable() string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return fmt.Sprintf("no Docker engine answers (`docker info`: %v: %s)", err, firstLine(out))
	}
	if out, err := exec.CommandContext(ctx, "docker-compose", "version", "--short").CombinedOutput(); err != nil {
		return fmt.Sprintf("docker-compose is not usable (`docker-compose version`: %v: %s)", err, firstLine(out))
	}
	return ""
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// dockerModuleRoot returns the directory holding go.mod, from the test's working
// directory (the package directory) upwards.
func dockerModuleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// dockerRun runs a command with a deadline and returns its combined output; it
// fails the test on error.
func dockerRun(t *testing.T, timeout time.Duration, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := dockerTry(timeout, dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// dockerTry runs a command with a deadline and returns its combined output and
// error.
func dockerTry(timeout time.Duration, dir string, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (after %v)", ctx.Err(), timeout)
	}
	return string(out), err
}

// dockerBuildBinaries builds static ringlimitd and ringlimit into dir/bin, as
// `make build` does.
func dockerBuildBinaries(t *testing.T, root, dir string) {
	t.Helper()
	for _, b := range []struct{ out, pkg string }{
		{"ringlimitd", "./cmd/ringlimitd"},
		{"ringlimit", "./cmd/ringlimit"},
	} {
		dockerRun(t, 5*time.Minute, root, []string{"CGO_ENABLED=0"},
			"go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "bin", b.out), b.pkg)
	}
}

// dockerMakeCerts makes the cluster's security material with the built CLI, as
// `make certs` does: a CA (key in caKey), a client certificate "root" and a
// gossip key in certs, and per node certs/<node>/ with ca.crt, gossip.key,
// client.root.* and a node certificate for hosts <node>, localhost,
// 127.0.0.1. It returns an HTTPS client presenting client.root.
func dockerMakeCerts(t *testing.T, bin, certs, caKey string, nodes ...string) *http.Client {
	t.Helper()
	cli := filepath.Join(bin, "ringlimit")
	dockerRun(t, time.Minute, "", nil, cli, "cert", "create-ca", "--certs-dir", certs, "--ca-key", caKey)
	dockerRun(t, time.Minute, "", nil, cli, "cert", "create-client", "root", "--certs-dir", certs, "--ca-key", caKey)
	dockerRun(t, time.Minute, "", nil, cli, "cert", "create-gossip-key", "--certs-dir", certs)
	// The client token of the Redis-protocol port (AUTH) and of bearer callers.
	if err := os.WriteFile(filepath.Join(certs, "tokens"), []byte(dockerToken+",operator\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		dir := filepath.Join(certs, n)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"ca.crt", "gossip.key", "tokens", "client.root.crt", "client.root.key"} {
			b, err := os.ReadFile(filepath.Join(certs, f))
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := os.Stat(filepath.Join(certs, f))
			if err := os.WriteFile(filepath.Join(dir, f), b, fi.Mode().Perm()); err != nil {
				t.Fatal(err)
			}
		}
		dockerRun(t, time.Minute, "", nil, cli, "cert", "create-node", n, "--host", n+",localhost,127.0.0.1", "--certs-dir", dir, "--ca-key", caKey)
	}
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join(certs, f))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cfg, err := pki.ClientTLS(read("ca.crt"), read("client.root.crt"), read("client.root.key"))
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// dockerBuildImage builds the Dockerfile of root on a context holding only the
// binaries in dir/bin, tags it tag, and removes it when the test ends.
func dockerBuildImage(t *testing.T, root, dir, tag string) {
	t.Helper()
	df, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), df, 0o644); err != nil {
		t.Fatal(err)
	}
	dockerRun(t, 3*time.Minute, dir, nil, "docker", "build", "-q", "-t", tag, ".")
	t.Cleanup(func() {
		if out, err := dockerTry(time.Minute, dir, nil, "docker", "rmi", "-f", tag); err != nil {
			t.Logf("docker rmi %s: %v\n%s", tag, err, out)
		}
	})
}

// dockerFreeSubnet returns a /24 in 172.30.0.0/16 that no Docker network uses,
// chosen from seed so that concurrent runs usually differ.
func dockerFreeSubnet(t *testing.T, seed int) string {
	t.Helper()
	ids := strings.Fields(dockerRun(t, time.Minute, "", nil, "docker", "network", "ls", "-q"))
	var used []*net.IPNet
	if len(ids) > 0 {
		out := dockerRun(t, time.Minute, "", nil, "docker", append([]string{"network", "inspect", "--format", "{{range .IPAM.Config}}{{.Subnet}} {{end}}"}, ids...)...)
		for _, s := range strings.Fields(out) {
			if _, n, err := net.ParseCIDR(s); err == nil {
				used = append(used, n)
			}
		}
	}
	for i := range 256 {
		cand := fmt.Sprintf("172.30.%d.0/24", (seed+i)%256)
		_, cn, _ := net.ParseCIDR(cand)
		clash := false
		for _, u := range used {
			if u.Contains(cn.IP) || cn.Contains(u.IP) {
				clash = true
				break
			}
		}
		if !clash {
			return cand
		}
	}
	t.Fatal("no free /24 in 172.30.0.0/16 for the compose network")
	return ""
}

// compose runs docker-compose on the project and returns its output.
func (c *composeCluster) compose(timeout time.Duration, args ...string) (string, error) {
	full := append([]string{"-f", filepath.Join(c.root, "docker-compose.yml"), "-p", c.project}, args...)
	return dockerTry(timeout, c.root, c.env, "docker-compose", full...)
}

// mustCompose is compose failing the test on error.
func (c *composeCluster) mustCompose(timeout time.Duration, args ...string) string {
	c.t.Helper()
	out, err := c.compose(timeout, args...)
	if err != nil {
		c.t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// up starts the project and records the published ports.
func (c *composeCluster) up() {
	c.t.Helper()
	c.mustCompose(3*time.Minute, "up", "-d", "--no-build")
	c.http = map[string]string{}
	c.grpc = map[string]string{}
	c.admin = map[string]string{}
	c.redis = map[string]string{}
	for _, s := range dockerServices() {
		c.ports(s)
	}
}

// ports records the published ports of service (Docker may publish new ones
// after a restart or a reconnect).
func (c *composeCluster) ports(service string) {
	c.t.Helper()
	c.http[service] = c.port(service, 8080)
	c.grpc[service] = c.port(service, 8081)
	c.admin[service] = c.port(service, 8082)
	c.redis[service] = c.port(service, 6379)
}

// dockerToken is the client token the docker test writes into certs/tokens.
const dockerToken = "dkr-Pw3Nq8Zx5Lt2Rk7Vm9Bc4Hj"

// port returns the 127.0.0.1 host address published for a container port.
func (c *composeCluster) port(service string, port int) string {
	c.t.Helper()
	out := strings.TrimSpace(c.mustCompose(time.Minute, "port", service, strconv.Itoa(port)))
	if _, _, err := net.SplitHostPort(out); err != nil {
		c.t.Fatalf("docker-compose port %s %d: got %q, want host:port", service, port, out)
	}
	return out
}

// container returns the id of a service's container.
func (c *composeCluster) container(service string) string {
	c.t.Helper()
	id := strings.TrimSpace(c.mustCompose(time.Minute, "ps", "-q", service))
	if id == "" {
		c.t.Fatalf("no container for %s", service)
	}
	return id
}

// network returns the name Docker gave the compose network.
func (c *composeCluster) network() string { return c.project + "_ringlimit" }

// down removes the project and checks that none of its containers, networks
// or volumes remain.
func (c *composeCluster) down() {
	t := c.t
	if t.Failed() {
		if out, err := c.compose(time.Minute, "logs", "--no-color", "--tail", "60"); err == nil {
			t.Logf("cluster logs (last 60 lines per node):\n%s", out)
		}
	}
	if out, err := c.compose(3*time.Minute, "down", "-v", "--remove-orphans", "-t", "15"); err != nil {
		t.Errorf("docker-compose down: %v\n%s", err, out)
	}
	label := "label=com.docker.compose.project=" + c.project
	for _, kind := range []struct{ what, args string }{
		{"containers", "ps -a -q --filter " + label},
		{"networks", "network ls -q --filter " + label},
		{"volumes", "volume ls -q --filter " + label},
	} {
		out, err := dockerTry(time.Minute, "", nil, "docker", strings.Fields(kind.args)...)
		if err != nil {
			t.Errorf("docker %s: %v\n%s", kind.args, err, out)
			continue
		}
		if left := strings.Fields(out); len(left) > 0 {
			t.Errorf("after docker-compose down, %d %s of project %s remain: %v", len(left), kind.what, c.project, left)
		}
	}
	if out, _ := dockerTry(time.Minute, "", nil, "docker", "network", "ls", "-q", "--filter", "name="+c.network()); strings.TrimSpace(out) != "" {
		t.Errorf("after docker-compose down, network %s remains", c.network())
	}
}

// dockerMember is one entry of GET /v1/members.
type dockerMember struct {
	Name   string `json:"name"`
	Addr   string `json:"addr"`
	Self   bool   `json:"self"`
	State  string `json:"state"`
	Reason string `json:"reason"`
}

// dockerDecision is the answer of POST /v1/check.
type dockerDecision struct {
	Allowed   bool   `json:"allowed"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	Route     string `json:"route"`
	Owner     string `json:"owner"`
	Error     string `json:"error"`
}

// get GETs path on service's HTTPS client API (or, for /readyz, /healthz and
// /metrics, its plaintext admin API) and returns the status and body.
func (c *composeCluster) get(service, path string) (int, []byte, error) {
	url := "https://" + c.http[service] + path
	if path == "/readyz" || path == "/healthz" || path == "/metrics" {
		url = "http://" + c.admin[service] + path
	}
	resp, err := c.client.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// members returns the sorted names of the members service lists as alive
// (admitted to its ring).
func (c *composeCluster) members(service string) ([]string, error) {
	ms, err := c.memberList(service)
	if err != nil {
		return nil, err
	}
	return aliveNames(ms), nil
}

// memberList returns every member service lists, refused ones included.
func (c *composeCluster) memberList(service string) ([]dockerMember, error) {
	code, body, err := c.get(service, "/v1/members")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/v1/members: %d %s", code, body)
	}
	var ms []dockerMember
	if err := json.Unmarshal(body, &ms); err != nil {
		return nil, fmt.Errorf("/v1/members %s: %w", body, err)
	}
	return ms, nil
}

// aliveNames returns the sorted names of the alive members of ms.
func aliveNames(ms []dockerMember) []string {
	var names []string
	for _, m := range ms {
		if m.State == "alive" {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	return names
}

// membersInside returns the sorted member names the daemon in container id
// lists, asked from inside the container with the image's ringlimit CLI: it
// works while the container is cut off the network.
func (c *composeCluster) membersInside(id string) ([]string, error) {
	out, err := dockerTry(30*time.Second, "", nil, "docker", "exec", id, "/usr/local/bin/ringlimit", "members", "--json", "--addr", "127.0.0.1:8080", "--certs-dir", "/certs")
	if err != nil {
		return nil, fmt.Errorf("docker exec ringlimit members: %w: %s", err, firstLine([]byte(out)))
	}
	var ms []dockerMember
	if err := json.Unmarshal([]byte(out), &ms); err != nil {
		return nil, fmt.Errorf("ringlimit members --json: %w: %s", err, firstLine([]byte(out)))
	}
	return aliveNames(ms), nil
}

// check POSTs one check of key (GCRA, 100 per second, burst 100) to service
// and returns the status and decision.
func (c *composeCluster) check(service, key string) (int, dockerDecision, error) {
	return c.checkAt(c.http[service], fmt.Sprintf(`{"key":%q,"algorithm":"gcra","limit":100,"period":"1s","burst":100}`, key))
}

// checkAt POSTs the JSON check body to the /v1/check of the HTTPS client API
// at addr (a value of c.http, read by the caller: the map changes when a
// service is restarted) and returns the status and decision.
func (c *composeCluster) checkAt(addr, body string) (int, dockerDecision, error) {
	resp, err := c.client.Post("https://"+addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, dockerDecision{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, dockerDecision{}, err
	}
	var d dockerDecision
	if err := json.Unmarshal(b, &d); err != nil {
		return resp.StatusCode, d, fmt.Errorf("decode %s: %w", b, err)
	}
	return resp.StatusCode, d, nil
}

// waitFor polls cond every 200 ms until it returns nil or within has passed,
// then fails the test with the last error. It returns the time it took.
func (c *composeCluster) waitFor(what string, within time.Duration, cond func() error) time.Duration {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		err := cond()
		if err == nil {
			took := time.Since(start)
			c.t.Logf("%s: after %v", what, took.Round(10*time.Millisecond))
			return took
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within %v: %v", what, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// membersAre returns a condition: every service in on lists exactly want.
func (c *composeCluster) membersAre(want []string, on ...string) func() error {
	return func() error {
		for _, s := range on {
			got, err := c.members(s)
			if err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				return fmt.Errorf("%s lists %v, want %v", s, got, want)
			}
		}
		return nil
	}
}

// ready returns a condition: every service in on answers /readyz with 200.
func (c *composeCluster) ready(on ...string) func() error {
	return func() error {
		for _, s := range on {
			code, body, err := c.get(s, "/readyz")
			if err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
			if code != http.StatusOK {
				return fmt.Errorf("%s /readyz: %d %s", s, code, bytes.TrimSpace(body))
			}
		}
		return nil
	}
}
