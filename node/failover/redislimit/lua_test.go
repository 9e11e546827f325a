package redislimit

import (
	"context"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/node/failover/redistest"
)

// TestLuaArithmetic checks the scripts' exact helpers, muldiv (floor(a*b/m) and
// the remainder) and pmod (a time pair modulo p), against math/big on a real
// Redis, with moduli that are powers of two (where 2r == m happens) and random.
func TestLuaArithmetic(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	mul := redis.NewScript(prelude + `return {muldiv(tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]))}`)
	mod := redis.NewScript(prelude + `return pmod(tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]))`)
	base := []any{1, 0, 0, 0, 1, 1, 0, 0} // ARGV[1..8] the prelude reads
	r := rand.New(rand.NewPCG(7, 8))
	two53 := big.NewInt(1 << 53)
	// Remainders of exactly m/2 on the way (a mod m = m/2, b even), where a
	// comparison off by one leaves r == m unnoticed by random inputs.
	fixed := [][3]int64{{1 << 50, 1<<53 - 2, 1 << 51}, {3 << 50, 1<<52 + 2, 1 << 51}, {1<<50 + 5<<51, 6, 1 << 51}}
	for i := 0; i < 400+len(fixed); i++ {
		m := 1 + r.Int64N(1<<51)
		if i%2 == 0 {
			m = 1 << r.IntN(52)
		}
		a, b := r.Int64N(1<<53), r.Int64N(1<<53)
		if i%3 == 0 {
			a, b = r.Int64N(1<<30), r.Int64N(1<<53)
		}
		if i < len(fixed) {
			a, b, m = fixed[i][0], fixed[i][1], fixed[i][2]
		}
		q, rem := new(big.Int).QuoRem(new(big.Int).Mul(big.NewInt(a), big.NewInt(b)), big.NewInt(m), new(big.Int))
		if q.Cmp(two53) >= 0 {
			continue // outside muldiv's contract
		}
		got, err := mul.Run(ctx, c, []string{"x"}, append(base, a, b, m)...).Int64Slice()
		if err != nil || len(got) != 2 || got[0] != q.Int64() || got[1] != rem.Int64() {
			t.Fatalf("muldiv(%d, %d, %d): got %v %v, want %v %v", a, b, m, got, err, q, rem)
		}
		now := r.Int64N(1<<63-1) - 1<<62
		if i%5 == 0 {
			now = -r.Int64N(1 << 40)
		}
		h, l := split(now)
		want := floorMod(now, m)
		gm, err := mod.Run(ctx, c, []string{"x"}, append(base, h, l, m)...).Int64()
		if err != nil || gm != want {
			t.Fatalf("pmod(%d, %d): got %d %v, want %d", now, m, gm, err, want)
		}
	}
}
