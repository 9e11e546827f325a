// Package membership is a node's view of the gossip members and their
// admission: a Table of the members memberlist reports (through Delegate),
// the Hello handshake each must pass before it enters the ring, the doubt
// of gossip that contradicts an admitted member (doubt.go), and the
// membership loop (Table.Run) that runs them and calls the node's rebuild.
// It also holds the metadata a member carries in gossip, the judgement of a
// Hello and of its answer, the members restarted under their name between
// two rings, the host a member advertises and a new instance id.
//
// Data flows one way: memberlist's callbacks copy a member into the Table
// and signal the loop; the loop runs the handshakes (Config.Hello, over the
// node's peer pool) and probes, then asks the node to rebuild its ring from
// RingMembers. The node starts memberlist and owns the ring.
package membership

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// EncodeMeta returns the node metadata carried in gossip:
// "v1|<grpcAddr>|<id>", id being the member's instance id.
func EncodeMeta(grpcAddr, id string) []byte { return []byte("v1|" + grpcAddr + "|" + id) }

// DecodeMeta returns the peer address and instance id in b (see EncodeMeta);
// ok is false when b is not of that form.
func DecodeMeta(b []byte) (grpcAddr, id string, ok bool) {
	parts := strings.Split(string(b), "|")
	if len(parts) != 3 || parts[0] != "v1" {
		return "", "", false
	}
	return parts[1], parts[2], true
}

// NewInstanceID returns a random instance id (16 hex digits): it tells a
// process from an earlier one under the same member name.
func NewInstanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
