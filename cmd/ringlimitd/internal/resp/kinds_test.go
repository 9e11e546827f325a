package resp

import (
	"testing"

	"github.com/ringlimit/ringlimit/algo"
)

// TestEveryKindParses: RL.CHECK takes every algorithm of algo's name table by
// its name (step 8 of algo's checklist).
func TestEveryKindParses(t *testing.T) {
	t.Parallel()
	for _, k := range algo.Kinds() {
		ck, msg := parseRLCheck([][]byte{[]byte("RL.CHECK"), []byte("k"), []byte(k.String()), []byte("5"), []byte("1s"), []byte("1")})
		if msg != "" || ck.limit.Kind != k {
			t.Errorf("RL.CHECK k %s 5 1s 1: got %v, %q, want algorithm %v", k, ck.limit.Kind, msg, k)
		}
	}
}
