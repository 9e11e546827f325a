package redislimit

import (
	"slices"
	"testing"

	"github.com/ringlimit/ringlimit/algo"
)

// TestEveryKindHasAScriptOrIsUnsupported: every algorithm of algo's name table
// has a Lua script or is listed unsupported above (step 6 of algo's
// checklist).
func TestEveryKindHasAScriptOrIsUnsupported(t *testing.T) {
	t.Parallel()
	// The algorithms with no Lua script, on purpose: the failover limiter
	// sends their checks to the cluster.
	unsupportedKinds := []algo.Kind{algo.BucketedSlidingWindow}
	for _, k := range algo.Kinds() {
		supported, listed := Supported(k), slices.Contains(unsupportedKinds, k)
		switch {
		case supported && listed:
			t.Errorf("%v: has a script and is listed unsupported", k)
		case !supported && !listed:
			t.Errorf("%v: no Lua script and not listed unsupported: write its script or add it to unsupportedKinds", k)
		case supported:
			var l Limiter
			if int(k) >= len(l.scripts) {
				t.Errorf("%v: supported but outside the scripts array", k)
			}
		}
	}
}
