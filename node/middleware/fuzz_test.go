package middleware

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// FuzzClientIP: whatever the forwarding headers say, ClientIP never panics, an
// untrusted peer is always the client, and a forwarded client is an address
// written in the headers.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.2:80", "6.6.6.6, 203.0.113.9", "")
	f.Add("10.0.0.2:80", "", `for=192.0.2.60;proto=http, for="[2001:db8::17]:4711"`)
	f.Add("198.51.100.7:1", "1.1.1.1", "for=_x")
	f.Add("[::1]:1", ",,,", `for="`)
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		if fwd != "" {
			r.Header.Set("Forwarded", fwd)
		}
		got, err := ClientIP(r, trusted)
		if err != nil {
			return
		}
		peer, err := parseHostAddr(remote)
		if err != nil {
			t.Fatalf("ClientIP accepted RemoteAddr %q that does not parse", remote)
		}
		if got == peer {
			return
		}
		trustedPeer := false
		for _, p := range trusted {
			trustedPeer = trustedPeer || p.Contains(peer)
		}
		if !trustedPeer {
			t.Fatalf("untrusted peer %v, got client %v from the headers", peer, got)
		}
		if !containsAddr(xff+" "+fwd, got) {
			t.Fatalf("client %v appears in neither header (%q, %q)", got, xff, fwd)
		}
	})
}

// containsAddr reports whether some token of s parses to a.
func containsAddr(s string, a netip.Addr) bool {
	for _, tok := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == ' ' || r == '=' || r == '"' }) {
		if b, err := parseHostAddr(tok); err == nil && b == a {
			return true
		}
	}
	return false
}
