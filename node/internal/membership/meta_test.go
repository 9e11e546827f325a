package membership

import "testing"

func TestMetaRoundTrip(t *testing.T) {
	addr, id, ok := DecodeMeta(EncodeMeta("10.0.0.1:7947", "abc"))
	if !ok || addr != "10.0.0.1:7947" || id != "abc" {
		t.Fatalf("DecodeMeta(EncodeMeta) = %q, %q, %v", addr, id, ok)
	}
	for _, bad := range []string{"", "v1|a", "v2|a|b", "v1|a|b|c"} {
		if _, _, ok := DecodeMeta([]byte(bad)); ok {
			t.Fatalf("DecodeMeta(%q) ok, want refused", bad)
		}
	}
}

func TestNewInstanceID(t *testing.T) {
	a, b := NewInstanceID(), NewInstanceID()
	if len(a) != 16 || a == b {
		t.Fatalf("NewInstanceID: %q then %q, want 16 hex digits, distinct", a, b)
	}
}
