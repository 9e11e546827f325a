package transport

import (
	"fmt"

	"github.com/ringlimit/ringlimit/algo"
)

// TODO(transport): replace with algo.Limit.Validate and algo.ValidateHits once
// they land in algo; these mirror the rules of DESIGN.md so the package builds
// and its tests run in the meantime.

func validateHits(hits int64) error {
	if hits < 0 || hits > algo.MaxHits {
		return fmt.Errorf("%w: hits %d outside 0..%d", algo.ErrInvalidLimit, hits, algo.MaxHits)
	}
	return nil
}

func validateLimit(l algo.Limit) error {
	switch {
	case !l.Kind.Valid():
		return fmt.Errorf("%w: kind %v unknown", algo.ErrInvalidLimit, l.Kind)
	case l.Limit <= 0:
		return fmt.Errorf("%w: limit %d must be > 0", algo.ErrInvalidLimit, l.Limit)
	case l.Period <= 0:
		return fmt.Errorf("%w: period %d ns must be > 0", algo.ErrInvalidLimit, int64(l.Period))
	case l.Burst < 0:
		return fmt.Errorf("%w: burst %d must be >= 0", algo.ErrInvalidLimit, l.Burst)
	case l.Kind == algo.TokenBucket && l.Burst < 1:
		return fmt.Errorf("%w: burst %d must be >= 1 for token_bucket", algo.ErrInvalidLimit, l.Burst)
	case l.Kind == algo.SlidingWindowLog && l.Limit > algo.MaxLogLimit:
		return fmt.Errorf("%w: limit %d above %d for sliding_window_log", algo.ErrInvalidLimit, l.Limit, algo.MaxLogLimit)
	}
	return nil
}
