package pki

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestTokenBits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tok    string
		strong bool
	}{
		{"passwordpassword", false},
		{"abcdefghijklmnopqrstuvwxyz", false},
		{strings.Repeat("a", 64), false},
		{"secret-secret-secret-2024", false},
		{"Password1234567890", false},
		{"correcthorsebatterystaple", false},
		{"0123456789abcdef0123456789abcdef", false},
		{"3f9c1e7a5b2d8046c9e1f3a7b5d20864", true},            // openssl rand -hex 16
		{"Kf8xQ2mZ7pLw9rTb4vNc1s", true},                      // 22 base64 characters
		{"q3Xh0vQ8tR9zK2mW7pY4sL6nB1cD5fG8hJ0kA2eU9iO", true}, // 43: NewToken's length
	} {
		got := TokenBits(tc.tok)
		if (got >= MinTokenBits) != tc.strong {
			t.Errorf("TokenBits(%q): got %.1f bits, want strong=%v (MinTokenBits %d)", tc.tok, got, tc.strong, MinTokenBits)
		}
	}
	for _, tc := range []struct {
		tok  string
		want float64
	}{{"passwordpassword", 24}, {"0123456789abcdef0123456789abcdef", 50}, {"aaaa", 3*4 + 1}} {
		if got := TokenBits(tc.tok); got != tc.want {
			t.Errorf("TokenBits(%q): got %.1f, want %.1f", tc.tok, got, tc.want)
		}
	}
}

// TestRandomTokensAreStrong: random tokens of the usual forms pass nearly
// always (the estimate is a lower bound; a random 32-hex token can lose a few
// bits to chance runs).
func TestRandomTokensAreStrong(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	const hexdigits = "0123456789abcdef"
	const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	weak := 0
	for range 1000 {
		var h, b strings.Builder
		for range 32 {
			h.WriteByte(hexdigits[r.IntN(16)])
		}
		for range 22 {
			b.WriteByte(b64[r.IntN(64)])
		}
		if TokenBits(h.String()) < MinTokenBits || TokenBits(b.String()) < MinTokenBits {
			weak++
		}
	}
	if weak > 0 {
		t.Errorf("random 32-hex and 22-base64 tokens judged weak: %d of 1000, want none", weak)
	}
	for range 100 {
		tok, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if len(tok) != 43 || TokenBits(tok) < 200 {
			t.Errorf("NewToken: %d characters, %.0f bits, want 43 and >= 200", len(tok), TokenBits(tok))
		}
	}
}
