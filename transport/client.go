package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"

	"google.golang.org/grpc"

	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// Client calls the public Limiter service of a ringlimit node or daemon. Its
// methods may be called concurrently.
type Client struct {
	addr      string
	conn      *grpc.ClientConn
	lim       pb.LimiterClient
	closeOnce sync.Once
	closeErr  error
}

// Dial returns a Client for the Limiter service at addr (host:port, or any
// gRPC target). tlsCfg nil dials plaintext. Like grpc.NewClient it connects on
// first use, so an unreachable address shows up as an error of the first call;
// Dial itself fails only for a malformed target.
func Dial(addr string, tlsCfg *tls.Config) (*Client, error) {
	conn, err := grpc.NewClient(addr, dialOptions(tlsCfg, nil, DefaultKeepaliveTime, DefaultKeepaliveTimeout, nil)...)
	if err != nil {
		return nil, fmt.Errorf("transport: dial %s: %w", addr, err)
	}
	return &Client{addr: addr, conn: conn, lim: pb.NewLimiterClient(conn)}, nil
}

// Check decides one check on the cluster. A denied check is a Result with
// Decision.Allowed false, not an error. Errors: input the server rejects returns
// an error wrapping ErrInvalidCheck (and algo.ErrInvalidLimit for limit errors)
// with the server's message naming the field; any other failure (unreachable,
// node stopped, ctx done) returns an error wrapping ErrUnavailable. The Result's
// Code is always CodeOK.
func (c *Client) Check(ctx context.Context, chk Check) (Result, error) {
	m := new(pb.Check)
	var keys []byte
	checkToWire(chk, m, &keys)
	resp, err := c.lim.Check(ctx, &pb.CheckRequest{Check: m})
	if err != nil {
		return Result{}, errorFromStatus("check at "+c.addr, err)
	}
	var r Result
	decisionFromWire(resp.GetDecision(), &r)
	return r, nil
}

// CheckBatch decides checks on the cluster and returns one Result per check, in
// order. An invalid item fails only itself (Code CodeInvalidArgument, Message
// naming the field). Errors: more checks than the server's MaxBatch (1000 by
// default) returns an error wrapping ErrInvalidCheck; transport failures return
// an error wrapping ErrUnavailable.
func (c *Client) CheckBatch(ctx context.Context, checks []Check) ([]Result, error) {
	resp, err := c.lim.CheckBatch(ctx, &pb.CheckBatchRequest{Checks: checksToWire(checks)})
	if err != nil {
		return nil, errorFromStatus("check batch at "+c.addr, err)
	}
	if len(resp.GetResults()) != len(checks) {
		return nil, fmt.Errorf("%w: check batch at %s: %d results for %d checks", ErrUnavailable, c.addr, len(resp.GetResults()), len(checks))
	}
	out := make([]Result, len(checks))
	for i, m := range resp.GetResults() {
		resultFromWire(m, &out[i])
	}
	return out, nil
}

// Close closes the connection; calls in flight fail with errors wrapping
// ErrUnavailable. It is safe to call more than once; later calls return the
// first call's result.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.conn.Close() })
	return c.closeErr
}
