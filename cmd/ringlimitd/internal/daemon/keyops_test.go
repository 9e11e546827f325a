package daemon

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// TestKeyOpsNeedAdmin: the /v1/keys paths inspect, reset and unban a key for
// a credential whose scope has admin, and refuse (403) one without it; RESP
// DEL resets a key for an admin and is refused (NOPERM) without; gRPC
// OperateKey likewise (PERMISSION_DENIED).
func TestKeyOpsNeedAdmin(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	scopes := p.write("scopes.yaml", []byte(`
clients:
  tester-token:
    admin: true
`), 0o600)
	d := startDaemon(t, testConfig(t, p, "keyops", "--redis-port", "0", "--client-scopes-file", scopes))
	url := "https://" + d.HTTPAddr()
	bearer := "Bearer " + testToken
	lim := `"algorithm":"gcra","limit":1,"period":"1h"`
	for i, want := range []string{`"allowed":true`, `"allowed":false`} {
		if code, body := httpDoWith(t, p.anon, http.MethodPost, url+"/v1/check", `{"key":"k",`+lim+`}`, bearer); code != 200 || !strings.Contains(body, want) {
			t.Fatalf("check %d: %d %s", i, code, body)
		}
	}
	for _, tc := range []struct {
		name   string
		hc     *http.Client
		authz  string
		path   string
		body   string
		code   int
		inBody string
	}{
		{"no admin, inspect", p.certClient, "", "/v1/keys/inspect", `{"key":"k",` + lim + `}`, 403, "no admin permission"},
		{"no admin, reset", p.certClient, "", "/v1/keys/reset", `{"key":"k",` + lim + `}`, 403, "no admin permission"},
		{"no admin, unban", p.certClient, "", "/v1/keys/unban", `{"key":"k"}`, 403, "no admin permission"},
		{"admin, inspect", p.anon, bearer, "/v1/keys/inspect", `{"key":"k",` + lim + `}`, 200, `"found":true`},
		{"admin, reset", p.anon, bearer, "/v1/keys/reset", `{"key":"k",` + lim + `}`, 200, `"found":true`},
		{"admin, check after the reset", p.anon, bearer, "/v1/check", `{"key":"k",` + lim + `}`, 200, `"allowed":true`},
		{"admin, unban", p.anon, bearer, "/v1/keys/unban", `{"key":"k"}`, 200, `"found":false`},
		{"admin, hits refused", p.anon, bearer, "/v1/keys/reset", `{"key":"k","hits":1,` + lim + `}`, 400, "not key operations"},
	} {
		code, body := httpDoWith(t, tc.hc, http.MethodPost, url+tc.path, tc.body, tc.authz)
		if code != tc.code || !strings.Contains(body, tc.inBody) {
			t.Errorf("%s: got %d %s, want %d with %s", tc.name, code, body, tc.code, tc.inBody)
		}
	}

	if code, body := httpDoWith(t, p.certClient, http.MethodGet, url+"/v1/keys/top", "", ""); code != 403 || !strings.Contains(body, "no admin permission") {
		t.Errorf("top without admin: %d %s; want 403", code, body)
	}
	if code, body := httpDoWith(t, p.anon, http.MethodGet, url+"/v1/keys/top?n=5", "", bearer); code != 200 || !strings.Contains(body, `{"key":"k","denials":1,"error":0}`) {
		t.Errorf("top as admin: %d %s; want k with its one denial", code, body)
	}
	// RESP DEL: the admin token resets the key; a daemon without a scopes
	// file (admin off by default) refuses the same token.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: d.RedisAddr(), TLSConfig: p.anonTLS, Password: testToken})
	defer rc.Close()
	if n, err := rc.Del(ctx, "k", "never-seen").Result(); err != nil || n != 1 {
		t.Errorf("RESP DEL as admin: %d, %v; want 1 (the checked key)", n, err)
	}
	if code, body := httpDoWith(t, p.anon, http.MethodPost, url+"/v1/check", `{"key":"k",`+lim+`}`, bearer); code != 200 || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("check after DEL: %d %s; want admitted", code, body)
	}
	// gRPC OperateKey: the admin token inspects and resets; the client
	// certificate (no admin) is refused.
	grpcOp := func(tlsCfg *tls.Config, authz string, op pb.KeyOp) (*pb.KeyOpResponse, error) {
		conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := ctx
		if authz != "" {
			c = metadata.AppendToOutgoingContext(ctx, "authorization", authz)
		}
		return pb.NewLimiterClient(conn).OperateKey(c, &pb.KeyOpRequest{Op: op, Key: []byte("g"), Algorithm: pb.Algorithm_ALGORITHM_GCRA, Limit: 1, PeriodNs: int64(time.Hour)})
	}
	for range 2 {
		_, _ = httpDoWith(t, p.anon, http.MethodPost, url+"/v1/check", `{"key":"g",`+lim+`}`, bearer)
	}
	if r, err := grpcOp(p.anonTLS, bearer, pb.KeyOp_KEY_OP_INSPECT); err != nil || !r.GetFound() || r.GetDecision().GetRemaining() != 0 || r.GetOwner() == "" {
		t.Errorf("gRPC inspect as admin: %v, %v", r, err)
	}
	if r, err := grpcOp(p.anonTLS, bearer, pb.KeyOp_KEY_OP_RESET); err != nil || !r.GetFound() {
		t.Errorf("gRPC reset as admin: %v, %v", r, err)
	}
	if _, err := grpcOp(p.clientTLS, "", pb.KeyOp_KEY_OP_RESET); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "no admin permission") {
		t.Errorf("gRPC reset without admin: %v; want PermissionDenied", err)
	}
	if _, err := grpcOp(p.anonTLS, bearer, pb.KeyOp_KEY_OP_INVALIDATE); status.Code(err) != codes.InvalidArgument {
		t.Errorf("gRPC invalidate from a client: %v; want InvalidArgument", err)
	}
	plain := startDaemon(t, testConfig(t, p, "keyops-noadmin", "--redis-port", "0"))
	rc2 := redis.NewClient(&redis.Options{Addr: plain.RedisAddr(), TLSConfig: p.anonTLS, Password: testToken})
	defer rc2.Close()
	if err := rc2.Del(ctx, "k").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "no admin permission") {
		t.Errorf("RESP DEL without admin: %v; want NOPERM naming the admin permission", err)
	}
	if code, body := httpDoWith(t, p.anon, http.MethodPost, "https://"+plain.HTTPAddr()+"/v1/keys/reset", `{"key":"k",`+lim+`}`, bearer); code != 403 {
		t.Errorf("HTTP reset with the default scope: %d %s; want 403", code, body)
	}
}
