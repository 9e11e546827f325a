package bench

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// TestEveryKindHasABound: MaxAdmitted bounds every algorithm of algo's name
// table (step 7 of algo's checklist): over one period a fresh key admits at
// least its limit.
func TestEveryKindHasABound(t *testing.T) {
	t.Parallel()
	for _, k := range algo.Kinds() {
		l := algo.Limit{Kind: k, Limit: 10, Period: time.Second, Burst: 10}
		n, err := MaxAdmitted(l, time.Second)
		if err != nil || n < l.Limit {
			t.Errorf("%v: got %d, %v, want a bound >= %d", k, n, err, l.Limit)
		}
	}
	if _, err := MaxAdmitted(algo.Limit{Kind: algo.Kind(200), Limit: 10, Period: time.Second}, time.Second); err == nil {
		t.Error("unknown algorithm: got a bound, want an error")
	}
}
