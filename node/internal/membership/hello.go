package membership

import (
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
