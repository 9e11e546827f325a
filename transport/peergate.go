package transport

import (
	"context"
	"crypto/x509"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// PeerGate decides whether the caller of a Peer RPC may make it, from the
// caller's verified certificate (nil on a plaintext connection): nil lets
// the call through, an error refuses it with codes.PermissionDenied and the
// error's text. See ServerConfig.PeerGate.
type PeerGate func(cert *x509.Certificate) error

// peerServicePrefix is the prefix of every Peer method's full name.
var peerServicePrefix = "/" + pb.Peer_ServiceDesc.ServiceName + "/"

// gateOptions returns the interceptors that put every Peer RPC but Hello
// through gate: unary calls once, streams when they open and after every
// message they receive.
func gateOptions(gate PeerGate) []grpc.ServerOption {
	gated := func(method string) bool {
		return strings.HasPrefix(method, peerServicePrefix) && method != pb.Peer_Hello_FullMethodName
	}
	check := func(cert *x509.Certificate) error {
		if err := gate(cert); err != nil {
			return status.Error(codes.PermissionDenied, err.Error())
		}
		return nil
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if gated(info.FullMethod) {
			if err := check(callerCert(ctx)); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !gated(info.FullMethod) {
			return handler(srv, ss)
		}
		// A connection's certificate never changes: looked up once per
		// stream, not per message.
		cert := callerCert(ss.Context())
		if err := check(cert); err != nil {
			return err
		}
		return handler(srv, gatedStream{ServerStream: ss, cert: cert, check: check})
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream)}
}

// gatedStream puts its stream through the gate after each message received.
type gatedStream struct {
	grpc.ServerStream
	cert  *x509.Certificate // the caller's, nil on plaintext
	check func(*x509.Certificate) error
}

func (s gatedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.check(s.cert)
}

// callerCert returns the verified certificate of the caller of the RPC whose
// server-side context is ctx (nil on a plaintext connection).
func callerCert(ctx context.Context) *x509.Certificate {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return nil
	}
	return ti.State.PeerCertificates[0]
}
