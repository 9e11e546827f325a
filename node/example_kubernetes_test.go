package node_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
)

// A Go service that embeds a node on Kubernetes, as the StatefulSet of
// docs/kubernetes/embedded-app.yaml runs it: the member name is the pod name
// (the name its cert-manager csi-driver certificate carries), the seed is the
// headless Service's DNS name (resolved again at every rejoin), readiness
// follows Node.Ready, and SIGTERM drains HTTP, then leaves and hands the keys
// off, within terminationGracePeriodSeconds. Compiled by the tests, not run.
func Example_kubernetes() {
	run := func() error {
		cfg := node.DefaultConfig()
		cfg.Name = os.Getenv("NODE_NAME")                  // metadata.name: quota-api-0, -1, ...
		cfg.AdvertiseAddr = os.Getenv("POD_IP")            // status.podIP
		cfg.Join = []string{os.Getenv("RINGLIMIT_SEEDS")}  // quota-api-peers:7946
		cfg.TLSCertFile = "/var/run/ringlimit/tls/tls.crt" // csi-driver, this pod's own
		cfg.TLSKeyFile = "/var/run/ringlimit/tls/tls.key"
		cfg.TLSCAFile = "/var/run/ringlimit/trust/ca.crt" // Secret: the CA bundle
		b, err := os.ReadFile("/var/run/ringlimit/gossip/gossip.key")
		if err != nil {
			return err
		}
		if cfg.SecretKey, err = base64.StdEncoding.DecodeString(strings.TrimSpace(string(b))); err != nil {
			return err
		}
		n, err := node.New(cfg)
		if err != nil {
			return err
		}

		limit := algo.Limit{Kind: algo.GCRA, Burst: 20, Limit: 100, Period: time.Second}
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {})
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !n.Ready() { // ring built, a peer joined, owned keys handed over
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		mux.HandleFunc("/quota", func(w http.ResponseWriter, r *http.Request) {
			d, err := n.Allow(r.Context(), "tenant:"+r.Header.Get("X-Tenant"), limit)
			switch {
			case err != nil:
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
			case !d.Allowed:
				w.WriteHeader(http.StatusTooManyRequests)
			}
		})
		srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}

		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		go func() {
			<-ctx.Done()
			// After the preStop sleep: 5 s to drain HTTP, then Close (leave,
			// hand off; at most CloseTimeout, 10 s by default).
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(dctx)
		}()
		err = srv.ListenAndServe()
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return errors.Join(err, n.Close())
	}
	_ = run
}
