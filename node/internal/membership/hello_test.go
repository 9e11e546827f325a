package membership

import (
	"errors"
	"testing"

	"github.com/ringlimit/ringlimit/transport"
)

func TestHelloMismatch(t *testing.T) {
	good := transport.Hello{ClusterLabel: "c", Member: "a", ProtocolVersion: transport.ProtocolVersion, InstanceID: "i1"}
	if r := HelloMismatch("c", "a", "i1", true, good, "a", nil); r != "" {
		t.Fatalf("a matching answer: %q, want none", r)
	}
	wrongID := good
	wrongID.InstanceID = "i2"
	for name, r := range map[string]string{
		"error":       HelloMismatch("c", "a", "i1", true, good, "a", errors.New("boom")),
		"label":       HelloMismatch("other", "a", "i1", true, good, "a", nil),
		"instance id": HelloMismatch("c", "a", "i1", true, wrongID, "a", nil),
		"certificate": HelloMismatch("c", "a", "i1", true, good, "b", nil),
	} {
		if r == "" {
			t.Fatalf("%s mismatch not reported", name)
		}
	}
	if r := HelloMismatch("c", "a", "i1", false, good, "b", nil); r != "" {
		t.Fatalf("the certificate judged though not secure: %q", r)
	}
}

func TestHelloRefusal(t *testing.T) {
	self := transport.Hello{ClusterLabel: "c", Member: "me", ProtocolVersion: transport.ProtocolVersion, InstanceID: "i1"}
	peer := transport.Hello{ClusterLabel: "c", Member: "a", ProtocolVersion: transport.ProtocolVersion, InstanceID: "i9"}
	if r, clash := HelloRefusal(self, true, peer, "a"); r != "" || clash {
		t.Fatalf("a good Hello refused: %q, %v", r, clash)
	}
	if r, _ := HelloRefusal(self, true, peer, "b"); r == "" {
		t.Fatal("a certificate for another member accepted in secure mode")
	}
	if r, _ := HelloRefusal(self, false, peer, "b"); r != "" {
		t.Fatalf("the certificate judged in insecure mode: %q", r)
	}
	mine := peer
	mine.Member = "me"
	if r, clash := HelloRefusal(self, true, mine, "me"); r == "" || !clash {
		t.Fatalf("this node's name under another instance: %q, %v, want a clash", r, clash)
	}
	if r, clash := HelloRefusal(self, true, self, "me"); r != "" || clash {
		t.Fatalf("this node's own Hello refused: %q, %v", r, clash)
	}
}
