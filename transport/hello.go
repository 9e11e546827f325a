package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/transport/pki"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// ProtocolVersion is the version of the Peer protocol this build speaks; the
// admission handshake (Hello) refuses a peer that speaks another.
const ProtocolVersion uint32 = 1

// ErrRefused is returned, wrapped with the reason, by a HelloHandler that
// refuses a peer (another cluster label or protocol version, a member name that
// is not its certificate's), and by Pool.Hello when the peer refused us or
// presented a certificate naming another member than expected. On the wire it
// is codes.PermissionDenied.
var ErrRefused = errors.New("transport: peer refused")

// ErrLocalClose is wrapped, with ErrUnavailable, by the error of a Pool.Hello
// that failed because this Pool closed the connection it ran on (Drop,
// RetireAll, Close) while the call was in flight: gRPC ends such a call with
// codes.Canceled ("the client connection is closing"). It says nothing about
// the peer, which may well be up: the same Hello sent again dials a new
// connection, and its outcome is the peer's. A Hello whose own ctx ended, or
// that the peer refused, failed, or did not answer, does not wrap it.
var ErrLocalClose = errors.New("transport: connection closed by this side")

// Hello is one side's identity in the admission handshake (Peer.Hello).
type Hello struct {
	// ClusterLabel is the sender's cluster label.
	ClusterLabel string
	// Member is the sender's member name.
	Member string
	// ProtocolVersion is the sender's ProtocolVersion.
	ProtocolVersion uint32
	// InstanceID is the sender's instance id, new at every start.
	InstanceID string
}

// HelloHandler is an optional interface of a PeerHandler: without it, Peer.Hello
// answers Unimplemented. certMember is the member named by the caller's
// verified TLS certificate, "" on a plaintext connection. It returns this
// node's Hello, or an error (wrapping ErrRefused to refuse the caller).
type HelloHandler interface {
	Hello(ctx context.Context, h Hello, certMember string) (Hello, error)
}

// PeerMember returns the member named by the verified TLS certificate of the
// caller of the RPC whose server-side context is ctx, and true; "" and false on
// a plaintext connection or a certificate that names no member.
func PeerMember(ctx context.Context) (string, bool) {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return "", false
	}
	return memberOfAuth(p.AuthInfo)
}

func memberOfAuth(a credentials.AuthInfo) (string, bool) {
	ti, ok := a.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return "", false
	}
	return pki.MemberName(ti.State.PeerCertificates[0])
}

func (s *peerServer) Hello(ctx context.Context, req *pb.HelloRequest) (*pb.HelloResponse, error) {
	hh, ok := s.h.(HelloHandler)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "transport: Hello is not served")
	}
	cert, _ := PeerMember(ctx)
	out, err := hh.Hello(ctx, Hello{
		ClusterLabel: req.GetClusterLabel(), Member: req.GetMember(),
		ProtocolVersion: req.GetProtocolVersion(), InstanceID: req.GetInstanceId(),
	}, cert)
	if err != nil {
		if errors.Is(err, ErrRefused) {
			return nil, status.Error(codes.PermissionDenied, err.Error())
		}
		return nil, statusFromError(err)
	}
	return &pb.HelloResponse{ClusterLabel: out.ClusterLabel, Member: out.Member, ProtocolVersion: out.ProtocolVersion, InstanceId: out.InstanceID}, nil
}

// Hello runs the admission handshake with the peer at addr: it sends h and
// returns the peer's Hello and the member named by the peer's verified TLS
// certificate ("" over plaintext). Errors: the peer refused us (wrapping
// ErrRefused, with its reason), or a transport failure (wrapping
// ErrUnavailable: unreachable, TLS handshake refused, timeout; also wrapping
// ErrLocalClose when the failure is this Pool closing the connection under
// the call, not the peer's doing).
func (p *Pool) Hello(ctx context.Context, addr string, h Hello) (Hello, string, error) {
	pe, err := p.peer(addr)
	if err != nil {
		return Hello{}, "", err
	}
	var from grpcpeer.Peer
	resp, err := pe.client.Hello(ctx, &pb.HelloRequest{
		ClusterLabel: h.ClusterLabel, Member: h.Member, ProtocolVersion: h.ProtocolVersion, InstanceId: h.InstanceID,
	}, grpc.Peer(&from))
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.PermissionDenied {
			return Hello{}, "", fmt.Errorf("%w: hello to %s: %s", ErrRefused, addr, st.Message())
		}
		if pe.closedUnder(ctx, err) {
			return Hello{}, "", fmt.Errorf("%w: %w: hello to %s: %w", ErrUnavailable, ErrLocalClose, addr, err)
		}
		return Hello{}, "", errorFromStatus("hello to "+addr, err)
	}
	cert, _ := memberOfAuth(from.AuthInfo)
	return Hello{
		ClusterLabel: resp.GetClusterLabel(), Member: resp.GetMember(),
		ProtocolVersion: resp.GetProtocolVersion(), InstanceID: resp.GetInstanceId(),
	}, cert, nil
}

// memberCreds wraps TLS transport credentials so that a connection to an
// address is accepted only when the server's certificate names the member
// ClientConfig.ExpectMember expects at that address: a connection re-dialled
// after the address was taken over by another member fails its handshake.
type memberCreds struct {
	credentials.TransportCredentials
	expect func(addr string) (string, bool)
}

func (c memberCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, auth, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return nil, nil, err
	}
	want, ok := c.expect(authority)
	if !ok {
		return conn, auth, nil // not a known member yet (the handshake decides)
	}
	if got, _ := memberOfAuth(auth); got != want {
		conn.Close()
		return nil, nil, fmt.Errorf("%w: %s presented a certificate for member %q, want %q", pki.ErrNotMember, authority, got, want)
	}
	return conn, auth, nil
}

func (c memberCreds) Clone() credentials.TransportCredentials {
	return memberCreds{TransportCredentials: c.TransportCredentials.Clone(), expect: c.expect}
}

func transportCreds(tlsCfg *tls.Config, expect func(string) (string, bool)) credentials.TransportCredentials {
	creds := credentials.NewTLS(tlsCfg)
	if expect == nil {
		return creds
	}
	return memberCreds{TransportCredentials: creds, expect: expect}
}
