package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/config"
	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/policyfile"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
	"github.com/ringlimit/ringlimit/transport"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// writeAtomic replaces path's content in one rename, as editors and config
// managers do.
func writeAtomic(t *testing.T, path, src string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func counterValue(t *testing.T, reg prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func checkDescriptors(t *testing.T, p *testPKI, d *Daemon, body string) (int, policyfile.CheckResponse) {
	t.Helper()
	code, out := httpDoWith(t, p.certClient, http.MethodPost, "https://"+d.HTTPAddr()+"/v1/check_descriptors", body, "")
	var resp policyfile.CheckResponse
	if code == http.StatusOK {
		if err := json.Unmarshal([]byte(out), &resp); err != nil {
			t.Fatalf("response %q: %v", out, err)
		}
	}
	return code, resp
}

const policyV1 = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2, name: v1}
`

// TestPolicyFileReload: the daemon serves the policy file, reloads it when it
// changes, keeps the old policy (and stays ready) when the new file is invalid,
// and counts both.
func TestPolicyFileReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeAtomic(t, path, policyV1)
	p := newTestPKI(t)
	d := startDaemon(t, testConfig(t, p, "policy-node", "--policy-file", path))
	const body = `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"ann"}]}]}`
	for i, want := range []bool{true, true, false} {
		code, resp := checkDescriptors(t, p, d, body)
		if code != http.StatusOK || resp.Allowed != want || len(resp.Descriptors) != 1 || resp.Descriptors[0].Rule != "v1" || resp.PolicyVersion != 1 {
			t.Fatalf("check %d: got %d %+v, want allowed=%v by v1, version 1", i, code, resp, want)
		}
	}
	reg := d.Metrics().Registry()

	writeAtomic(t, path, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 2}\n")
	waitUntil(t, 10*time.Second, "reload error counted", func() bool {
		return counterValue(t, reg, "ringlimit_policy_reloads_total", "result", "error") >= 1
	})
	if code, _ := httpDo(t, http.MethodGet, "http://"+d.AdminAddr()+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("readyz after a bad reload: got %d, want 200", code)
	}
	if code, resp := checkDescriptors(t, p, d, body); code != http.StatusOK || resp.PolicyVersion != 1 || resp.Allowed {
		t.Fatalf("after a bad reload: got %d %+v, want the old policy (version 1, still denied)", code, resp)
	}
	if err := d.ReloadPolicy(); !errors.Is(err, policy.ErrInvalidPolicy) {
		t.Fatalf("ReloadPolicy on the bad file: got %v, want ErrInvalidPolicy", err)
	}

	writeAtomic(t, path, strings.ReplaceAll(strings.ReplaceAll(policyV1, "v1", "v2"), "requests_per_unit: 2", "requests_per_unit: 5"))
	waitUntil(t, 10*time.Second, "new policy in force", func() bool {
		_, resp := checkDescriptors(t, p, d, `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"bob"}]}],"hits":0}`)
		return resp.PolicyVersion >= 2 && len(resp.Descriptors) == 1 && resp.Descriptors[0].Rule == "v2"
	})
	if code, resp := checkDescriptors(t, p, d, body); code != http.StatusOK || !resp.Allowed || resp.Descriptors[0].Limit != 5 {
		t.Fatalf("under v2: got %d %+v, want allowed with limit 5", code, resp)
	}
	for _, bad := range []string{`{"domain":""}`, `{"domain":"api","descriptors":[]}`, `{"domain":"api","descriptors":[{"entries":[{"key":"","value":"x"}]}]}`, `{"bogus":1}`, `{}{}`} {
		if code, _ := checkDescriptors(t, p, d, bad); code != http.StatusBadRequest {
			t.Errorf("body %s: got %d, want 400", bad, code)
		}
	}
}

// TestPolicyFileInvalidAtStart: a daemon refuses to start on a policy it cannot
// read, naming the line.
func TestPolicyFileInvalidAtStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeAtomic(t, path, "domain: api\ndescriptors:\n  - key: user\n    rate_limt: {}\n")
	_, err := Start(testConfig(t, newTestPKI(t), "bad-policy", "--policy-file", path), nil)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "policy.yaml:4:") {
		t.Fatalf("got %v, want a config error naming policy.yaml:4", err)
	}
}

// TestPolicyReloadLogsLine: a failed reload logs the file's line.
func TestPolicyReloadLogsLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeAtomic(t, path, policyV1)
	var buf syncBuffer
	w, err := policyfile.Start(path, nopChecker{}, prometheus.NewRegistry(), slog.New(slog.NewJSONHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeAtomic(t, path, "domain: api\n\ndescriptors: 7\n")
	if err := w.Reload(); err == nil {
		t.Fatal("Reload of a bad file: got nil")
	}
	if out := buf.String(); !strings.Contains(out, `"line":3`) || !strings.Contains(out, "keeping the previous policy") {
		t.Fatalf("log %q does not name line 3", out)
	}
	if _, v := w.Limiter().Policy(); v != 1 {
		t.Fatalf("version after a failed reload: got %d, want 1", v)
	}
}

type nopChecker struct{}

func (nopChecker) AllowPenalized(context.Context, string, algo.Limit, int64, node.Penalty) (node.Decision, error) {
	return node.Decision{}, nil
}

// TestPolicyFileGRPC: the Limiter service's CheckDescriptors answers from the
// policy file; bad input is InvalidArgument; a daemon without a policy file
// answers Unimplemented.
func TestPolicyFileGRPC(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeAtomic(t, path, policyV1)
	p := newTestPKI(t)
	d := startDaemon(t, testConfig(t, p, "policy-grpc", "--policy-file", path))
	conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(p.clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewLimiterClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &pb.CheckDescriptorsRequest{Domain: "api", Descriptors: []*pb.RateLimitDescriptor{{Entries: []*pb.DescriptorEntry{{Key: "user", Value: "cy"}}}}}
	for i, want := range []bool{true, true, false} {
		resp, err := c.CheckDescriptors(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		r := transport.DescriptorResultFromWire(resp)
		if r.Allowed != want || len(r.Statuses) != 1 || r.Statuses[0].Rule != "v1" || r.Statuses[0].Decision.Limit != 2 || r.PolicyVersion != 1 {
			t.Fatalf("call %d: got %+v, want allowed=%v by v1 (limit 2)", i, r, want)
		}
	}
	if _, err := c.CheckDescriptors(ctx, &pb.CheckDescriptorsRequest{Descriptors: req.Descriptors}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty domain: got %v, want InvalidArgument", err)
	}

	p2 := newTestPKI(t)
	plain := startDaemon(t, testConfig(t, p2, "no-policy-grpc"))
	conn2, err := grpc.NewClient(plain.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(p2.clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if _, err := pb.NewLimiterClient(conn2).CheckDescriptors(ctx, req); status.Code(err) != codes.Unimplemented {
		t.Fatalf("no policy file: got %v, want Unimplemented", err)
	}
}
