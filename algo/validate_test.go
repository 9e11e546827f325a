package algo

import (
	"math"
	"math/big"
	"testing"
	"time"
)

// refValid is Validate's rule for GCRA written the slow, obvious way, in
// arbitrary precision: T = floor(Period/Limit) >= 1 and T*(Burst+1) <=
// MaxDuration.
func refValidGCRA(l Limit) bool {
	if l.Limit <= 0 || l.Period <= 0 || l.Period > MaxDuration || l.Burst < 0 {
		return false
	}
	t := int64(l.Period) / l.Limit
	if t < 1 {
		return false
	}
	tau := new(big.Int).Mul(big.NewInt(t), new(big.Int).Add(big.NewInt(l.Burst), big.NewInt(1)))
	return tau.Cmp(big.NewInt(int64(MaxDuration))) <= 0
}

// Validate skips GCRA's division when Period*(Burst+1) fits; it must still
// accept exactly what the division-first rule accepts, and what fast (the
// hot path of Take) accepts, with or without a correct hint.
func checkValidateGCRA(t *testing.T, l Limit) {
	t.Helper()
	want := refValidGCRA(l)
	if got := l.Validate() == nil; got != want {
		t.Fatalf("Validate(%+v) accepts %v, the division-first rule %v", l, got, want)
	}
	for _, hint := range []int64{0, 1, int64(l.Period) / max(l.Limit, 1)} {
		if _, ok := l.fast(hint); ok != want {
			t.Fatalf("fast(%+v, hint %d) accepts %v, Validate %v", l, hint, ok, want)
		}
	}
}

func TestValidateGCRAWithoutDivision(t *testing.T) {
	t.Parallel()
	for _, l := range []Limit{
		{Kind: GCRA, Limit: 10, Period: time.Minute},
		{Kind: GCRA, Limit: 1, Period: 1},
		{Kind: GCRA, Limit: 2, Period: 1},                     // T = 0
		{Kind: GCRA, Limit: 1, Period: MaxDuration},           // tau = MaxDuration
		{Kind: GCRA, Limit: 1, Period: MaxDuration, Burst: 1}, // tau overflows
		{Kind: GCRA, Limit: 2, Period: MaxDuration, Burst: 1}, // Period*(Burst+1) overflows, tau fits
		{Kind: GCRA, Limit: 3, Period: MaxDuration, Burst: 2}, // tau = floor(Max/3)*3 fits
		{Kind: GCRA, Limit: 1000, Period: time.Hour, Burst: math.MaxInt64},
		{Kind: GCRA, Limit: 1 << 40, Period: MaxDuration, Burst: 1 << 39},
	} {
		checkValidateGCRA(t, l)
	}
}

func FuzzValidateGCRA(f *testing.F) {
	f.Add(int64(10), int64(time.Minute), int64(0))
	f.Add(int64(2), int64(MaxDuration), int64(1))
	f.Add(int64(3), int64(MaxDuration), int64(2))
	f.Fuzz(func(t *testing.T, limit, period, burst int64) {
		checkValidateGCRA(t, Limit{Kind: GCRA, Limit: limit, Period: time.Duration(period), Burst: burst})
	})
}
