package route

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

func TestShare(t *testing.T) {
	for _, c := range []struct {
		l          algo.Limit
		members    int
		limit, brs int64
	}{
		{algo.Limit{Kind: algo.GCRA, Limit: 10, Burst: 4, Period: time.Second}, 3, 4, 1},
		{algo.Limit{Kind: algo.TokenBucket, Limit: 10, Burst: 5, Period: time.Second}, 2, 5, 3},
		{algo.Limit{Kind: algo.FixedWindow, Limit: 10, Period: time.Second}, 1, 10, 0},
	} {
		s := Share(c.l, c.members)
		if s.Limit != c.limit || s.Burst != c.brs || s.Kind != c.l.Kind || s.Period != c.l.Period {
			t.Fatalf("Share(%+v, %d) = %+v, want Limit %d Burst %d", c.l, c.members, s, c.limit, c.brs)
		}
	}
}
