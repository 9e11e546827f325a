package httpapi

import (
	"testing"

	"github.com/ringlimit/ringlimit/algo"
)

// TestEveryKindParses: POST /v1/check takes every algorithm of algo's name
// table by its name (step 8 of algo's checklist).
func TestEveryKindParses(t *testing.T) {
	t.Parallel()
	for _, k := range algo.Kinds() {
		req := CheckRequest{Key: "k", Algorithm: k.String(), Limit: 5, Period: "1s"}
		c, err := req.toCheck()
		if err != nil || c.Limit.Kind != k {
			t.Errorf("algorithm %q: got %v, %v, want %v", k, c.Limit.Kind, err, k)
		}
	}
}
