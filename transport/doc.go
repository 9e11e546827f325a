// Package transport is ringlimit's gRPC layer: the wire protocol
// (proto/ringlimit/v1/ringlimit.proto and the generated package ringlimitv1),
// the servers of the public Limiter and internal Peer services, the peer client
// Pool that micro-batches forwarded checks, the public Client used by the
// daemon's callers, mutual TLS between peers, and the one mapping between wire
// messages, gRPC status codes and the Go types of this package and algo.
//
// Data flow: a node that does not own a key calls Pool.Forward with the owner's
// address; the Pool appends the check to the open batch of that peer and sends
// the batch when it is full, when it has waited long enough, or at once when
// nothing is in flight to that peer. Batches travel as messages of one
// long-lived Peer.ForwardStream per peer connection, each with an id and the
// time its sender still waits; several may be in flight, and answers come back
// by id in any order (ClientConfig.UnaryForward, or a peer without
// ForwardStream, uses one unary Peer.Forward RPC per batch instead). On the
// owner, NewServer's Peer service validates each item, hands the valid ones
// of a batch to the node's PeerHandler in one call (on the stream's receive
// goroutine, or in a goroutine of its own when the handler says the batch may
// wait: ForwardWaitHinter), and answers one Result per check in order; the Pool hands each caller its
// own Result. Callers outside the cluster use Client (or any gRPC stub)
// against the Limiter service, which validates the check and passes it to the
// handler (node.LimiterHandler). Malformed input becomes codes.InvalidArgument (per
// item inside batches), and transport failures (including a broken stream)
// become errors wrapping ErrUnavailable so that node can apply its
// owner-unreachable policy. Replication batches (Pool.Replicate) travel
// likewise on one long-lived Peer.ReplicateStream per peer, one request
// answered before the next; handoffs (Pool.Handoff) are unary Peer.Transfer
// RPCs. Server.GracefulStop ends open ForwardStreams and ReplicateStreams
// before it waits for RPCs, so peers' streams never hold a shutdown.
package transport

// Regenerate ringlimitv1 from the .proto with `go generate ./transport/...`.
// Needs protoc (Debian protobuf-compiler 3.21), protoc-gen-go v1.36.12 and
// protoc-gen-go-grpc v1.5.1 in $(go env GOPATH)/bin or on PATH.
//go:generate sh -c "PATH=\"$(go env GOPATH)/bin:$PATH\" protoc --proto_path=proto --go_out=. --go_opt=module=github.com/ringlimit/ringlimit/transport --go-grpc_out=. --go-grpc_opt=module=github.com/ringlimit/ringlimit/transport ringlimit/v1/ringlimit.proto"
