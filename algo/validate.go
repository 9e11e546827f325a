package algo

import (
	"fmt"
	"math"
	"math/bits"
)

// Validate reports whether l can be applied exactly, without overflow, by the
// algorithm l.Kind selects. It returns nil or an error wrapping ErrInvalidLimit
// that names the field and its value, for:
//   - Kind not one of the six algorithms;
//   - Limit <= 0; for SlidingWindowLog, Limit > MaxLogLimit;
//   - Period <= 0 or Period > MaxDuration;
//   - Burst < 0; for TokenBucket, Burst < 1 (an empty bucket admits nothing);
//   - GCRA: an emission interval T = Period/Limit (integer ns, rounded down as
//     redis-cell does) below 1 ns, or tau = T*(Burst+1) above MaxDuration;
//   - TokenBucket: Burst*Period above MaxDuration (the bucket is kept in
//     token*ns units, so this product must fit).
//
// Validate allocates only when it returns an error.
func (l Limit) Validate() error {
	return l.check()
}

// check is Validate. It divides only when it must: GCRA's T = Period/Limit is
// computed only when Period*(Burst+1) (an upper bound of tau) overflows.
func (l Limit) check() error {
	if !l.Kind.Valid() {
		return limitError("algorithm", fmt.Sprint(uint8(l.Kind)), "must be one of "+kindList())
	}
	if l.Limit <= 0 {
		return limitError("limit", fmt.Sprint(l.Limit), "must be > 0")
	}
	if l.Period <= 0 || l.Period > MaxDuration {
		return limitError("period", fmt.Sprintf("%d ns", int64(l.Period)), fmt.Sprintf("must be in 1..%d ns", int64(MaxDuration)))
	}
	if l.Burst < 0 {
		return limitError("burst", fmt.Sprint(l.Burst), "must be >= 0")
	}
	switch l.Kind {
	case SlidingWindowLog:
		if l.Limit > MaxLogLimit {
			return limitError("limit", fmt.Sprint(l.Limit), fmt.Sprintf("sliding_window_log stores one timestamp per hit, must be <= MaxLogLimit (%d)", MaxLogLimit))
		}
	case GCRA:
		if int64(l.Period) < l.Limit { // T = Period/Limit < 1
			return limitError("limit", fmt.Sprint(l.Limit), fmt.Sprintf("emission interval Period/Limit = %d ns / %d is below 1 ns", int64(l.Period), l.Limit))
		}
		// tau = T*(Burst+1) <= Period*(Burst+1): when that fits, so does tau,
		// and the division is skipped.
		if !mulFits(int64(l.Period), l.Burst, 1) {
			if t := int64(l.Period) / l.Limit; !mulFits(t, l.Burst, 1) {
				return limitError("burst", fmt.Sprint(l.Burst), fmt.Sprintf("tau = T*(Burst+1) = %d ns * %d overflows MaxDuration", t, uint64(l.Burst)+1))
			}
		}
	case TokenBucket:
		if l.Burst < 1 {
			return limitError("burst", fmt.Sprint(l.Burst), "token_bucket needs a capacity >= 1")
		}
		if !mulFits(int64(l.Period), l.Burst, 0) {
			return limitError("burst", fmt.Sprint(l.Burst), fmt.Sprintf("Burst*Period = %d * %d ns overflows MaxDuration", l.Burst, int64(l.Period)))
		}
	}
	return nil
}

// fast is the allocation-free form of check for the hot path: GCRA's T and
// whether l is valid. It must accept exactly what check accepts. hint is a
// previous T of the key: if it is Period/Limit, fast skips the division.
func (l Limit) fast(hint int64) (t int64, ok bool) {
	if !l.Kind.Valid() || l.Limit <= 0 || l.Period <= 0 || l.Period > MaxDuration || l.Burst < 0 {
		return 0, false
	}
	switch l.Kind {
	case SlidingWindowLog:
		return 0, l.Limit <= MaxLogLimit
	case GCRA:
		if t = hint; !l.isInterval(t) {
			t = int64(l.Period) / l.Limit
		}
		return t, t >= 1 && mulFits(t, l.Burst, 1)
	case TokenBucket:
		return 0, l.Burst >= 1 && mulFits(int64(l.Period), l.Burst, 0)
	}
	return 0, true
}

// isInterval reports whether t == Period/Limit (rounded down), by
// multiplication: t*Limit <= Period < (t+1)*Limit.
func (l Limit) isInterval(t int64) bool {
	if t < 1 {
		return false
	}
	hi, lo := bits.Mul64(uint64(t), uint64(l.Limit))
	return hi == 0 && lo <= uint64(l.Period) && uint64(l.Period)-lo < uint64(l.Limit)
}

// ValidateHits reports whether hits is a valid hit count for one check:
// 0 (a peek) to MaxHits. Otherwise it returns an error wrapping ErrInvalidLimit
// that names the field and value.
func ValidateHits(hits int64) error {
	if hits < 0 || hits > MaxHits {
		return hitsError(hits)
	}
	return nil
}

// hitsError is ValidateHits' error, apart so that ValidateHits is inlined.
func hitsError(hits int64) error {
	return limitError("hits", fmt.Sprint(hits), fmt.Sprintf("must be in 0..%d", MaxHits))
}

// validateNow reports whether now lies in [MinTime, MaxTime].
func validateNow(now int64) error {
	if now < MinTime || now > MaxTime {
		return limitError("now", fmt.Sprintf("%d ns", now), fmt.Sprintf("must be in %d..%d (MinTime..MaxTime)", MinTime, MaxTime))
	}
	return nil
}

// mulFits reports whether a*(b+plus) <= MaxDuration, for a, b >= 0 and plus in
// {0, 1}, without overflowing.
func mulFits(a, b, plus int64) bool {
	if b > math.MaxInt64-plus {
		return false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b+plus))
	return hi == 0 && lo <= uint64(MaxDuration)
}
