package pki

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"math"
)

// MinTokenBits is the least estimated entropy (TokenBits) of a client token,
// in bits. 112 bits put guessing out of reach even at millions of tries per
// second; 32 random hex characters (128 bits) or 22 random base64 characters
// (132 bits) pass, `passwordpassword` (24 bits by TokenBits) does not.
const MinTokenBits = 112

// NewToken returns a client token of 256 random bits: 43 characters of
// unpadded base64url (letters, digits, '-' and '_'), well above MinTokenBits.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("pki: token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// TokenBits estimates the entropy of tok in bits, as an attacker who knows how
// tokens are usually made would count it (a lower bound for random tokens,
// generous for human ones: it knows no dictionary):
//
//   - the alphabet is 16 characters when tok is all hexadecimal digits of one
//     case, else the sum of the classes it uses: 26 lower-case letters, 26
//     upper-case letters, 10 digits, 33 other printable characters;
//   - each character adds log2(alphabet) bits (2 bits when tok is letters of
//     one case only: words, most likely), except one that continues a run of
//     four or more with one step (aaaa, abcd, 9876) or lies inside a repeat
//     of an earlier stretch of four or more characters: those add 1 bit each.
//
// So `passwordpassword` counts 8 × 2 + 8 × 1 = 24 bits,
// `0123456789abcdef0123456789abcdef` 6 × 4 + 26 = 50 bits.
func TokenBits(tok string) float64 {
	if tok == "" {
		return 0
	}
	var lower, upper, digit, other, hexLower, hexUpper bool
	hexLower, hexUpper = true, true
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case c >= 'a' && c <= 'z':
			lower = true
			hexUpper = false
			if c > 'f' {
				hexLower = false
			}
		case c >= 'A' && c <= 'Z':
			upper = true
			hexLower = false
			if c > 'F' {
				hexUpper = false
			}
		case c >= '0' && c <= '9':
			digit = true
		default:
			other = true
			hexLower, hexUpper = false, false
		}
	}
	alphabet := 0
	if hexLower || hexUpper {
		alphabet = 16
	} else {
		for _, class := range []struct {
			used bool
			size int
		}{{lower, 26}, {upper, 26}, {digit, 10}, {other, 33}} {
			if class.used {
				alphabet += class.size
			}
		}
	}
	per := math.Log2(float64(alphabet))
	cheap := make([]bool, len(tok))
	if !digit && !other && lower != upper && alphabet != 16 {
		// Letters of one case only: words, most likely; English text carries
		// about 2 bits per letter.
		per = 2
	}
	// Runs of one step: the fourth character on.
	for i := 3; i < len(tok); i++ {
		step := int(tok[i]) - int(tok[i-1])
		if abs(step) <= 1 && int(tok[i-1])-int(tok[i-2]) == step && int(tok[i-2])-int(tok[i-3]) == step {
			cheap[i] = true
		}
	}
	// Repeats of an earlier stretch of at least four characters.
	const minRepeat = 4
	for i := minRepeat; i+minRepeat <= len(tok); i++ {
		// Longest earlier match of tok[i:].
		best := 0
		for j := 0; j < i; j++ {
			n := 0
			for i+n < len(tok) && tok[j+n] == tok[i+n] {
				n++
			}
			best = max(best, n)
		}
		if best >= minRepeat {
			for k := i; k < i+best; k++ {
				cheap[k] = true
			}
			i += best - 1
		}
	}
	bits := 0.0
	for _, c := range cheap {
		if c {
			bits++
		} else {
			bits += per
		}
	}
	return bits
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
