package membership

import (
	"context"
	"errors"
	"fmt"

	"github.com/ringlimit/ringlimit/transport"
)

// HelloMismatch returns why resp, the answer (over a connection whose
// certificate names cert, or the call's err) to a Hello sent to member name,
// instance id, does not prove that identity in a cluster labelled label; ""
// when it does. The certificate is judged only when secure.
func HelloMismatch(label, name, id string, secure bool, resp transport.Hello, cert string, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case resp.ClusterLabel != label:
		return fmt.Sprintf("cluster label %q, want %q", resp.ClusterLabel, label)
	case resp.ProtocolVersion != transport.ProtocolVersion:
		return fmt.Sprintf("protocol version %d, want %d", resp.ProtocolVersion, transport.ProtocolVersion)
	case resp.Member != name:
		return fmt.Sprintf("answered as member %q", resp.Member)
	case resp.InstanceID != id:
		return fmt.Sprintf("instance id %q, gossip says %q", resp.InstanceID, id)
	case secure && cert != name:
		return fmt.Sprintf("its certificate names member %q", cert)
	}
	return ""
}

// HelloRefusal returns why a node whose own side of a Hello is self refuses
// the Hello h from a connection whose certificate names certMember, or ""
// when it accepts it: another cluster label or protocol version, in secure
// mode (secure) a certificate naming another member, or self's member name
// under another instance id (clash is then true).
func HelloRefusal(self transport.Hello, secure bool, h transport.Hello, certMember string) (reason string, clash bool) {
	switch {
	case h.ClusterLabel != self.ClusterLabel:
		return fmt.Sprintf("cluster label %q, want %q", h.ClusterLabel, self.ClusterLabel), false
	case h.ProtocolVersion != transport.ProtocolVersion:
		return fmt.Sprintf("protocol version %d, want %d", h.ProtocolVersion, transport.ProtocolVersion), false
	case secure && certMember != h.Member:
		return fmt.Sprintf("member %q presented a certificate for member %q", h.Member, certMember), false
	case h.Member == self.Member && h.InstanceID != self.InstanceID:
		return fmt.Sprintf("member name %q is this node's (instance %s)", h.Member, self.InstanceID), true
	}
	return "", false
}

// helloAttempts bounds the Hellos sayHello sends for one outcome: a
// connection that this node closes again under every new attempt is not
// waited out (the last attempt's failure then stands).
const helloAttempts = 3

// sayHello sends this node's Hello to the peer address addr (Config.Hello),
// bounded by Timeout, and returns the answer, the member the peer's
// certificate names, and the error. A Hello that failed because this node
// closed the connection under it (transport.ErrLocalClose: a Drop of addr
// meanwhile, by a ring rebuild or another handshake's redial) proves nothing
// about the peer, so it is sent again at once, on a new connection, within
// the same Timeout (up to helloAttempts in all): what is returned is what
// the peer did (an answer, a refusal, no connection, a TLS failure, no
// answer in time).
func (t *Table) sayHello(addr string) (transport.Hello, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
	defer cancel()
	for try := 1; ; try++ {
		resp, cert, err := t.cfg.Hello(ctx, addr)
		if try == helloAttempts || !errors.Is(err, transport.ErrLocalClose) || ctx.Err() != nil {
			return resp, cert, err
		}
		t.cfg.Log.Info("this node closed the connection under a Hello; sending it again on a new one", "addr", addr, "err", err)
	}
}
