package daemon

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// readyPoll is how often the gRPC health status follows the node's readiness.
const readyPoll = 200 * time.Millisecond

// healthServices are the names the client gRPC port answers grpc.health.v1
// for, all with one status: "" (the server as a whole, what Kubernetes' gRPC
// probes and Envoy's health checks ask by default), the Limiter service and
// Envoy's RateLimitService.
var healthServices = []string{"", pb.Limiter_ServiceDesc.ServiceName, ratelimitv3.RateLimitService_ServiceDesc.ServiceName}

// healthMethodPrefix starts the full method name of every grpc.health.v1 RPC.
var healthMethodPrefix = "/" + healthpb.Health_ServiceDesc.ServiceName + "/"

// startHealth serves grpc.health.v1 on the client gRPC server: NOT_SERVING
// until the node is ready (node.Node.Ready, what the admin port's /readyz
// answers), then following it every readyPoll until stopHealth, which turns
// every service NOT_SERVING for good.
func (d *Daemon) startHealth(srv *grpc.Server) {
	d.health = &healthService{Server: health.NewServer(), end: make(chan struct{})}
	for _, s := range healthServices {
		d.health.SetServingStatus(s, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	healthpb.RegisterHealthServer(srv, d.health)
	d.healthStop = make(chan struct{})
	d.healthDone = make(chan struct{})
	go func() {
		defer close(d.healthDone)
		t := time.NewTicker(readyPoll)
		defer t.Stop()
		last := healthpb.HealthCheckResponse_NOT_SERVING
		for {
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if d.node.Ready() {
				st = healthpb.HealthCheckResponse_SERVING
			}
			if st != last {
				for _, s := range healthServices {
					d.health.SetServingStatus(s, st)
				}
				d.log.Info("grpc health", "status", st.String())
				last = st
			}
			select {
			case <-d.healthStop:
				return
			case <-t.C:
			}
		}
	}()
}

// stopHealth turns every health status NOT_SERVING for good and ends the
// open Watch streams once each has been told (so they do not hold the gRPC
// server's graceful stop). Safe to call twice, and without startHealth.
func (d *Daemon) stopHealth() {
	if d.health == nil {
		return
	}
	d.healthOnce.Do(func() {
		close(d.healthStop)
		<-d.healthDone
		d.health.Shutdown()
		close(d.health.end)
	})
}

// healthService is grpc-go's health server whose Watch streams end when end
// is closed, after the stream has sent a status other than SERVING (at most
// watchEndWait later): a Watch otherwise lasts as long as its client.
type healthService struct {
	*health.Server
	end chan struct{}
}

// watchEndWait bounds how long an ending Watch waits for its NOT_SERVING to
// be sent.
const watchEndWait = time.Second

// Watch implements grpc.health.v1's Watch.
func (h *healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	ws := &watchStream{Health_WatchServer: stream, ctx: ctx, sent: make(chan struct{}, 1)}
	ws.last.Store(int32(healthpb.HealthCheckResponse_SERVING))
	ended := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-h.end:
		}
		deadline := time.NewTimer(watchEndWait)
		defer deadline.Stop()
		for healthpb.HealthCheckResponse_ServingStatus(ws.last.Load()) == healthpb.HealthCheckResponse_SERVING {
			select {
			case <-ws.sent:
			case <-deadline.C:
				close(ended)
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
		close(ended)
		cancel()
	}()
	err := h.Server.Watch(req, ws)
	select {
	case <-ended:
		return status.Error(codes.Unavailable, "ringlimitd: shutting down")
	default:
		return err
	}
}

// watchStream records the last status a Watch sent, and carries the
// context that ends it.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx  context.Context
	last atomic.Int32
	sent chan struct{}
}

func (w *watchStream) Context() context.Context { return w.ctx }

func (w *watchStream) Send(r *healthpb.HealthCheckResponse) error {
	err := w.Health_WatchServer.Send(r)
	w.last.Store(int32(r.GetStatus()))
	select {
	case w.sent <- struct{}{}:
	default:
	}
	return err
}

// unauthenticatedHealth lets grpc.health.v1 calls past the caller
// authentication of the client gRPC port, as the admin port's /readyz answers
// anyone: the answer is readiness only. TLS still applies.
func unauthenticatedHealth(authn grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, healthMethodPrefix) {
			return h(ctx, req)
		}
		return authn(ctx, req, info, h)
	}
}

// unauthenticatedHealthStream is unauthenticatedHealth for streams (Watch).
func unauthenticatedHealthStream(authn grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if strings.HasPrefix(info.FullMethod, healthMethodPrefix) {
			return h(srv, ss)
		}
		return authn(srv, ss, info, h)
	}
}
