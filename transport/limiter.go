package transport

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// This file is the public Limiter service's server (the daemon's client
// gRPC door); the peer service is server.go's.

// limiterServer implements the public Limiter service on top of a LimiterHandler.
type limiterServer struct {
	pb.UnimplementedLimiterServer
	cfg  ServerConfig
	h    LimiterHandler
	desc DescriptorHandler
}

func (s *limiterServer) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	if req.GetCheck() == nil {
		return nil, status.Error(codes.InvalidArgument, "check is missing")
	}
	c, err := checkFromWire(req.GetCheck())
	if err == nil {
		err = ValidateCheck(c, s.cfg.MaxKeyLen)
	}
	if err != nil {
		return nil, clientStatus(fmt.Errorf("%w: %w", ErrInvalidCheck, err))
	}
	r, err := s.h.Check(ctx, c)
	if err != nil {
		return nil, clientStatus(err)
	}
	if r.Code != CodeOK {
		return nil, clientStatus(statusFromResult(r))
	}
	d := &pb.Decision{}
	decisionToWire(r, d)
	return &pb.CheckResponse{Decision: d}, nil
}

func (s *limiterServer) CheckBatch(ctx context.Context, req *pb.CheckBatchRequest) (*pb.CheckBatchResponse, error) {
	in := req.GetChecks()
	if len(in) > s.cfg.MaxBatch {
		return nil, batchTooLarge("checks", len(in), s.cfg.MaxBatch)
	}
	if len(in) == 0 {
		return &pb.CheckBatchResponse{}, nil
	}
	checks, invalid := decodeChecks(in, s.cfg.MaxKeyLen)
	results := make([]Result, len(checks))
	check := func(i int) {
		r, err := s.h.Check(ctx, checks[i])
		if err != nil {
			r = itemResultFromError(err)
		}
		results[i] = r
	}
	workers := min(s.cfg.CheckBatchConcurrency, len(checks))
	if workers <= 1 {
		for i := range checks {
			check(i)
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= len(checks) {
						return
					}
					check(i)
				}
			})
		}
		wg.Wait()
	}
	results = mergeInvalid(results, invalid, len(in))
	return &pb.CheckBatchResponse{Results: resultsToWire(results)}, nil
}
