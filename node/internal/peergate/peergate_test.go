package peergate

import (
	"strings"
	"testing"
)

// A deny list is "serial:<hex>" or "member:<name>" per line, serials in any
// case, with colons or 0x; anything else fails with its file and line.
func TestParse(t *testing.T) {
	t.Parallel()
	dl, err := Parse("deny", []byte("# revoked\n\nserial:0A:1b:FF\nserial: 0x2c\nmember:node-7\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !dl.serials["a1bff"] || !dl.serials["2c"] || !dl.members["node-7"] || len(dl.serials) != 2 || len(dl.members) != 1 {
		t.Errorf("parsed %+v, want serials a1bff and 2c, member node-7", dl)
	}
	if !dl.Revoked("node-7", "") || !dl.Revoked("x", "2c") || dl.Revoked("node-8", "2d") {
		t.Errorf("Revoked: got %v %v %v, want true true false", dl.Revoked("node-7", ""), dl.Revoked("x", "2c"), dl.Revoked("node-8", "2d"))
	}
	if s, m := dl.Len(); s != 2 || m != 1 {
		t.Errorf("Len: got %d, %d, want 2, 1", s, m)
	}
	var none *DenyList
	if none.Revoked("node-7", "2c") {
		t.Error("a nil list revokes, want nothing revoked")
	}
	for _, bad := range []string{"node-7\n", "serial:xyz\n", "member:\n", "cert:1\n"} {
		if _, err := Parse("deny", []byte("# ok\n"+bad)); err == nil || !strings.Contains(err.Error(), "deny:2") {
			t.Errorf("%q: got %v, want an error naming deny:2", bad, err)
		}
	}
}
