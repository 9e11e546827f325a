package algo

import (
	"fmt"
	"time"
)

// CLThrottle maps the arguments of redis-cell's
//
//	CL.THROTTLE <key> <max_burst> <count per period> <period> [<quantity>]
//
// to a GCRA Limit and a hits count: Burst = maxBurst, Limit = count, Period =
// periodSeconds seconds, hits = quantity (redis-cell's default is 1). Applying
// them to a State gives the decision whose CLThrottleReply is redis-cell's reply.
// It returns an error wrapping ErrInvalidLimit that names the redis-cell
// argument for maxBurst < 0, count <= 0, periodSeconds <= 0 or above
// MaxDuration in seconds, quantity < 0 or above MaxHits, and otherwise any error
// of Limit.Validate (an emission interval below 1 ns, tau above MaxDuration).
// redis-cell itself rejects only a zero rate and lets negative values through.
func CLThrottle(maxBurst, count, periodSeconds, quantity int64) (Limit, int64, error) {
	switch {
	case maxBurst < 0:
		return Limit{}, 0, limitError("max_burst", fmt.Sprint(maxBurst), "must be >= 0")
	case count <= 0:
		return Limit{}, 0, limitError("count", fmt.Sprint(count), "must be > 0")
	case periodSeconds <= 0 || periodSeconds > int64(MaxDuration/time.Second):
		return Limit{}, 0, limitError("period", fmt.Sprintf("%d s", periodSeconds), fmt.Sprintf("must be in 1..%d s", int64(MaxDuration/time.Second)))
	case quantity < 0 || quantity > MaxHits:
		return Limit{}, 0, limitError("quantity", fmt.Sprint(quantity), fmt.Sprintf("must be in 0..%d", MaxHits))
	}
	l := Limit{Kind: GCRA, Limit: count, Period: time.Duration(periodSeconds) * time.Second, Burst: maxBurst}
	if err := l.Validate(); err != nil {
		return Limit{}, 0, err
	}
	return l, quantity, nil
}

// CLThrottleReply returns d as redis-cell's CL.THROTTLE reply:
//
//	[limited (0 or 1), limit, remaining, retry_after (s), reset_after (s)]
//
// limit and remaining are d.Limit and d.Remaining. retry_after is -1 when d is
// allowed or can never pass (RetryNever). Durations are whole seconds, truncated
// and then raised by one when their millisecond part is not zero, exactly as
// redis-cell rounds: 2.5 s and 2.001 s reply 3, 2.0009 s replies 2.
func (d Decision) CLThrottleReply() [5]int64 {
	r := [5]int64{0, d.Limit, d.Remaining, -1, ceilSeconds(d.ResetAfter)}
	if !d.Allowed {
		r[0] = 1
		if d.RetryAfter >= 0 {
			r[3] = ceilSeconds(d.RetryAfter)
		}
	}
	return r
}

// ceilSeconds rounds a duration >= 0 to whole seconds as redis-cell does.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if (d%time.Second)/time.Millisecond > 0 {
		s++
	}
	return s
}
