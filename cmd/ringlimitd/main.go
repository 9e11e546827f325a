// Command ringlimitd runs one member of a ringlimit cluster: the gRPC Limiter and
// Peer services, an HTTP/JSON API (POST /v1/check, GET /v1/members), Prometheus
// /metrics, /healthz and /readyz. Run `ringlimitd --help` for the flags; each has
// a RINGLIMIT_* environment variable. `ringlimitd healthcheck` probes /readyz for
// container healthchecks. The logic lives in internal/daemon.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		stop() // a second signal during the graceful stop kills the process
	}()
	os.Exit(daemon.Main(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}
