package daemon

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// TestCredentialScopes: one tenant's token may check only its own prefix,
// within its period cap, through every door (HTTP, gRPC, RESP); a
// policy-only credential (the client certificate here) may not send limits
// but checks descriptors; a domain outside a scope is refused; and without a
// scopes file no caller may lock a key for 100 years or touch the policy's
// keys. Every refusal is permission denied (HTTP 403, gRPC PermissionDenied,
// also per item of CheckBatch, RESP -NOPERM), never invalid input.
func TestCredentialScopes(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	dir := t.TempDir()
	policyPath := filepath.Join(dir, "policy.yaml")
	writeAtomic(t, policyPath, policyV1+"---\ndomain: other\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	scopes := p.write("scopes.yaml", []byte(`
clients:
  tester-token:
    key_prefixes: ["tenant-a:"]
    domains: [api]
    max_period: 1h
  tester:
    own_limits: false
`), 0o600)
	d := startDaemon(t, testConfig(t, p, "scoped", "--redis-port", "0", "--policy-file", policyPath, "--client-scopes-file", scopes))
	check := func(key, period string) string {
		return `{"key":"` + key + `","algorithm":"gcra","limit":10,"period":"` + period + `"}`
	}
	url := "https://" + d.HTTPAddr()
	bearer := "Bearer " + testToken
	for _, tc := range []struct {
		name   string
		hc     *http.Client
		authz  string
		path   string
		body   string
		code   int
		inBody string
	}{
		{"token, own prefix", p.anon, bearer, "/v1/check", check("tenant-a:1", "1m"), 200, `"allowed":true`},
		{"token, another tenant's prefix", p.anon, bearer, "/v1/check", check("tenant-b:1", "1m"), 403, `permission denied: credential \"tester-token\" may only check keys starting with one of its key_prefixes`},
		{"token, period over its cap", p.anon, bearer, "/v1/check", check("tenant-a:2", "876000h"), 403, "above its max_period 1h0m0s"},
		{"token, its domain", p.anon, bearer, "/v1/check_descriptors", `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`, 200, `"allowed":true`},
		{"token, another domain", p.anon, bearer, "/v1/check_descriptors", `{"domain":"other","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`, 403, `may not check domain \"other\": outside its domains`},
		{"certificate, own limit", p.certClient, "", "/v1/check", check("tenant-a:1", "1m"), 403, "may only check the policy file's descriptors"},
		{"certificate, descriptors", p.certClient, "", "/v1/check_descriptors", `{"domain":"other","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`, 200, `"allowed":true`},
	} {
		code, body := httpDoWith(t, tc.hc, http.MethodPost, url+tc.path, tc.body, tc.authz)
		if code != tc.code || !strings.Contains(body, tc.inBody) {
			t.Errorf("HTTP %s: got %d %s, want %d with %s", tc.name, code, body, tc.code, tc.inBody)
		}
	}

	// gRPC, the same token.
	conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(p.anonTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", bearer), 10*time.Second)
	defer cancel()
	grpcCheck := func(key string) error {
		_, err := pb.NewLimiterClient(conn).Check(ctx, &pb.CheckRequest{Check: &pb.Check{
			Key: []byte(key), Algorithm: pb.Algorithm_ALGORITHM_GCRA, Limit: 10, PeriodNs: int64(time.Minute), Hits: 1}})
		return err
	}
	if err := grpcCheck("tenant-a:g"); err != nil {
		t.Errorf("gRPC own prefix: %v", err)
	}
	if err := grpcCheck("tenant-b:g"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "one of its key_prefixes") {
		t.Errorf("gRPC another tenant's prefix: got %v, want PermissionDenied naming its key_prefixes", err)
	}
	batch, err := pb.NewLimiterClient(conn).CheckBatch(ctx, &pb.CheckBatchRequest{Checks: []*pb.Check{
		{Key: []byte("tenant-a:b"), Algorithm: pb.Algorithm_ALGORITHM_GCRA, Limit: 10, PeriodNs: int64(time.Minute), Hits: 1},
		{Key: []byte("tenant-b:b"), Algorithm: pb.Algorithm_ALGORITHM_GCRA, Limit: 10, PeriodNs: int64(time.Minute), Hits: 1}}})
	if err != nil || len(batch.GetResults()) != 2 {
		t.Fatalf("gRPC CheckBatch: got %v, %v; want 2 results", batch, err)
	}
	if c := batch.GetResults()[0].GetCode(); c != pb.Code_CODE_OK {
		t.Errorf("gRPC CheckBatch own prefix: got %v, want CODE_OK", c)
	}
	if r := batch.GetResults()[1]; r.GetCode() != pb.Code_CODE_PERMISSION_DENIED || !strings.Contains(r.GetMessage(), "one of its key_prefixes") {
		t.Errorf("gRPC CheckBatch another tenant's prefix: got %v %q, want CODE_PERMISSION_DENIED naming its key_prefixes", r.GetCode(), r.GetMessage())
	}

	// RESP, the same token (its name comes from the token file).
	rc := redis.NewClient(&redis.Options{Addr: d.RedisAddr(), TLSConfig: p.anonTLS, Password: testToken})
	defer rc.Close()
	if _, err := rc.Do(ctx, "CL.THROTTLE", "tenant-a:r", "5", "10", "60").Int64Slice(); err != nil {
		t.Errorf("RESP own prefix: %v", err)
	}
	for _, args := range [][]any{{"CL.THROTTLE", "tenant-b:r", "5", "10", "60"}, {"RL.CHECK", "tenant-b:r", "gcra", "10", "1m"}} {
		if err := rc.Do(ctx, args...).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM permission denied: ") || !strings.Contains(err.Error(), "one of its key_prefixes") {
			t.Errorf("RESP %v another tenant's prefix: got %v, want NOPERM naming the prefixes", args[0], err)
		}
	}
	if err := rc.Do(ctx, "RL.POLICY", "other", "1", "user", "u").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM ") || !strings.Contains(err.Error(), "outside its domains") {
		t.Errorf("RESP RL.POLICY in another domain: got %v, want NOPERM naming the domains", err)
	}

	// Without a scopes file: the default scope.
	plain := startDaemon(t, testConfig(t, p, "unscoped", "--policy-file", policyPath))
	for _, tc := range []struct{ name, body, inBody string }{
		{"100-year lock", check("victim", "876000h"), "above its max_period 744h0m0s"},
		{"a policy key", check("rl:3:api4:user1:u", "1m"), `may not check keys starting \"rl:\": they belong to the policy file`},
	} {
		code, body := httpDoWith(t, p.anon, http.MethodPost, "https://"+plain.HTTPAddr()+"/v1/check", tc.body, bearer)
		if code != 403 || !strings.Contains(body, tc.inBody) {
			t.Errorf("default scope, %s: got %d %s, want 403 with %s", tc.name, code, body, tc.inBody)
		}
	}
}

// TestFullKeyTableDoors: a credential at its max_keys and a node at its
// --max-keys answer a new key as a full key table on every door, naming the
// bound and when the earliest key frees: HTTP 503 with Retry-After, gRPC
// ResourceExhausted with RetryInfo, RESP -OOM; keys already held still pass.
func TestFullKeyTableDoors(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	scopes := p.write("scopes.yaml", []byte("clients:\n  tester-token:\n    max_keys: 1\n"), 0o600)
	d := startDaemon(t, testConfig(t, p, "full", "--redis-port", "0", "--max-keys", "2", "--client-scopes-file", scopes))
	url := "https://" + d.HTTPAddr() + "/v1/check"
	bearer := "Bearer " + testToken
	post := func(c *http.Client, authz, key string) (int, string, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"key":"`+key+`","algorithm":"gcra","limit":10,"period":"1m"}`))
		if err != nil {
			t.Fatal(err)
		}
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
	}
	retryIn := func(s string, lo, hi int) bool {
		n, err := strconv.Atoi(s)
		return err == nil && n >= lo && n <= hi
	}

	// The token's cap: one key, held as long as the node may keep its state
	// (GCRA 10 per minute: one hit drains in 6 s).
	if code, _, body := post(p.anon, bearer, "a"); code != 200 {
		t.Fatalf("token, first key: got %d %s, want 200", code, body)
	}
	if code, retry, body := post(p.anon, bearer, "b"); code != 503 || !retryIn(retry, 1, 6) ||
		!strings.Contains(body, `key table full: credential \"tester-token\" holds 1 keys through this node, its max_keys; the earliest key frees in `) {
		t.Errorf("HTTP token, second key: got %d Retry-After %q %s, want 503 naming its max_keys with Retry-After 1..6", code, retry, body)
	}
	if code, _, body := post(p.anon, bearer, "a"); code != 200 {
		t.Errorf("token, its held key again: got %d %s, want 200", code, body)
	}
	conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(p.anonTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", bearer), 10*time.Second)
	defer cancel()
	_, err = pb.NewLimiterClient(conn).Check(ctx, &pb.CheckRequest{Check: &pb.Check{
		Key: []byte("g"), Algorithm: pb.Algorithm_ALGORITHM_GCRA, Limit: 10, PeriodNs: int64(time.Minute), Hits: 1}})
	st, _ := status.FromError(err)
	var retry time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri.GetRetryDelay().AsDuration()
		}
	}
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "its max_keys") || retry < time.Second || retry > 6*time.Second {
		t.Errorf("gRPC token, new key: got %v %q RetryInfo %v, want ResourceExhausted naming its max_keys, RetryInfo 1..6 s", st.Code(), st.Message(), retry)
	}
	rc := redis.NewClient(&redis.Options{Addr: d.RedisAddr(), TLSConfig: p.anonTLS, Password: testToken, MaxRetries: -1})
	defer rc.Close()
	if err := rc.Do(ctx, "CL.THROTTLE", "r", "5", "10", "60").Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM key table full: credential") {
		t.Errorf("RESP token, new key: got %v, want OOM naming its max_keys", err)
	}

	// The node's cap: 2 keys ("a" and one of the certificate's).
	if code, _, body := post(p.certClient, "", "c"); code != 200 {
		t.Fatalf("certificate, first key: got %d %s, want 200", code, body)
	}
	if code, retry, body := post(p.certClient, "", "d"); code != 503 || !retryIn(retry, 1, 6) ||
		!strings.Contains(body, "key table full: this node holds 2 keys, its MaxKeys, none of them idle; the earliest key frees in ") {
		t.Errorf("HTTP certificate, key over --max-keys: got %d Retry-After %q %s, want 503 naming MaxKeys with Retry-After 1..6", code, retry, body)
	}
}
