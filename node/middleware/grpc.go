package middleware

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// GRPCKeyFunc returns the rate-limit key of a call to fullMethod
// ("/package.Service/Method"); an error (wrap ErrNoKey) fails the call with
// InvalidArgument without calling the handler.
type GRPCKeyFunc func(ctx context.Context, fullMethod string) (string, error)

// GRPCOption configures the interceptors.
type GRPCOption func(*grpcConfig) error

type grpcConfig struct {
	key        GRPCKeyFunc
	failClosed bool
}

// WithGRPCKeyFunc sets the key function. Default: GRPCKeyFromPeer().
func WithGRPCKeyFunc(f GRPCKeyFunc) GRPCOption {
	return func(c *grpcConfig) error {
		if f == nil {
			return fmt.Errorf("%w: nil GRPCKeyFunc", ErrInvalidOption)
		}
		c.key = f
		return nil
	}
}

// WithGRPCFailClosed fails calls with codes.Unavailable when the Limiter
// returns an error. Default: fail open (the handler runs).
func WithGRPCFailClosed() GRPCOption {
	return func(c *grpcConfig) error { c.failClosed = true; return nil }
}

// GRPCKeyFromMethod keys calls by their full method: one limit per method.
func GRPCKeyFromMethod() GRPCKeyFunc {
	return func(_ context.Context, m string) (string, error) { return m, nil }
}

// GRPCKeyFromPeer keys calls by the IP address of the peer (the port is
// dropped).
func GRPCKeyFromPeer() GRPCKeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: no peer address", ErrNoKey)
		}
		a, err := parseHostAddr(p.Addr.String())
		if err != nil {
			return p.Addr.String(), nil // not IP (a unix socket): the whole address
		}
		return a.String(), nil
	}
}

// GRPCKeyFromMetadata keys calls by the first value of incoming metadata key
// name (lower-case); a call without it has no key.
func GRPCKeyFromMetadata(name string) GRPCKeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(name); len(v) > 0 && v[0] != "" {
			return v[0], nil
		}
		return "", fmt.Errorf("%w: metadata %s is missing", ErrNoKey, name)
	}
}

func newGRPCConfig(l Limiter, opts []GRPCOption) (*grpcConfig, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil Limiter", ErrInvalidOption)
	}
	c := &grpcConfig{key: GRPCKeyFromPeer()}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// UnaryServerInterceptor decides every unary call with l before its handler.
// A denied call fails with codes.ResourceExhausted naming the full method,
// with google.rpc.RetryInfo (the retry delay) and google.rpc.QuotaFailure (the
// key and policy) details. A Limiter error lets the call through (fail open)
// or, with WithGRPCFailClosed, fails it with codes.Unavailable; an error that
// is the call's fault (a key the node refuses) is codes.InvalidArgument. Errors: a nil
// Limiter or a bad option (wrapping ErrInvalidOption).
func UnaryServerInterceptor(l Limiter, opts ...GRPCOption) (grpc.UnaryServerInterceptor, error) {
	c, err := newGRPCConfig(l, opts)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := c.decide(ctx, l, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}, nil
}

// StreamServerInterceptor decides every stream once, when it opens, like
// UnaryServerInterceptor.
func StreamServerInterceptor(l Limiter, opts ...GRPCOption) (grpc.StreamServerInterceptor, error) {
	c, err := newGRPCConfig(l, opts)
	if err != nil {
		return nil, err
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := c.decide(ss.Context(), l, info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}, nil
}

// decide returns nil when the call may proceed, else its status error.
func (c *grpcConfig) decide(ctx context.Context, l Limiter, method string) error {
	key, err := c.key(ctx, method)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%s: rate limit key: %v", method, err)
	}
	v, err := l.Limit(ctx, key)
	if err != nil {
		if invalidInput(err) {
			return status.Errorf(codes.InvalidArgument, "%s: rate limit: %v", method, err)
		}
		if c.failClosed {
			return status.Errorf(codes.Unavailable, "%s: rate limiter unavailable: %v", method, err)
		}
		return nil
	}
	if v.Allowed {
		return nil
	}
	st := status.Newf(codes.ResourceExhausted, "%s: rate limit exceeded", method)
	delay := v.RetryAfter
	if delay < 0 {
		delay = v.Window
	}
	desc := fmt.Sprintf("policy %s: %d requests per %v", v.Policy, v.Limit, v.Window)
	if v.Banned {
		desc += " (banned by its penalty)"
	}
	if d, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: key, Description: desc}}},
	); err == nil {
		st = d
	}
	return st.Err()
}
