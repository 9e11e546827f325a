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
