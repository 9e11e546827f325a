package httpapi

import (
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// checkText returns nil when b can be decoded as JSON without encoding/json
// rewriting any byte of it: every byte sequence is valid UTF-8 (RFC 8259 §8.1
// requires JSON text to be UTF-8), and no string holds a \u escape of a lone
// UTF-16 surrogate (half of a pair, or a low half alone). encoding/json turns
// both into U+FFFD, so without this check "utf\xff" and "utf\xfe" would be the
// same key. The error names the byte offset (0-based) of the first offending
// byte or escape. checkText does not otherwise judge the syntax: a malformed
// escape is left for the JSON decoder to report.
func checkText(b []byte) error {
	inString := false
	for i := 0; i < len(b); {
		c := b[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				return fmt.Errorf("body is not valid UTF-8 at byte offset %d (byte 0x%02x): JSON text must be UTF-8; send a key that is not UTF-8 as \"key_base64\"", i, c)
			}
			i += size
			continue
		}
		switch {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			r, ok := hex4(b[i+2:])
			if !ok || !utf16.IsSurrogate(r) {
				i += 2 // the decoder reports a malformed escape; a valid one is plain
				continue
			}
			if r < 0xDC00 && i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, ok := hex4(b[i+8:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 12 // a surrogate pair: one code point
					continue
				}
			}
			return fmt.Errorf("body holds an unpaired UTF-16 surrogate escape \\u%04x at byte offset %d: it is not a character; send a key that is not UTF-8 as \"key_base64\"", r, i)
		case c == '\\' && i+1 < len(b) && b[i+1] < utf8.RuneSelf:
			i += 2 // \" and \\ never end or start a string
			continue
		}
		i++
	}
	return nil
}

// hex4 parses the four hexadecimal digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
