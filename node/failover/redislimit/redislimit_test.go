package redislimit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/failover/redislimit"
)

// TestBucketedWindowHasNoScript: the sixth algorithm has no Lua script; it is
// refused with ErrUnsupportedLimit (the failover limiter then decides it on the
// cluster), never a panic.
func TestBucketedWindowHasNoScript(t *testing.T) {
	t.Parallel()
	l := algo.Limit{Kind: algo.BucketedSlidingWindow, Limit: 10, Period: time.Minute}
	if err := redislimit.Validate(l); !errors.Is(err, redislimit.ErrUnsupportedLimit) {
		t.Errorf("Validate(bucketed): got %v, want ErrUnsupportedLimit", err)
	}
	if redislimit.Supported(algo.BucketedSlidingWindow) || !redislimit.Supported(algo.GCRA) {
		t.Errorf("Supported: got bucketed %v, gcra %v; want false, true", redislimit.Supported(algo.BucketedSlidingWindow), redislimit.Supported(algo.GCRA))
	}
}
