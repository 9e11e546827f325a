package ring

import "math/bits"

// modulus computes h % d for a fixed d without a division instruction:
// Lemire, Kaser and Kurz, "Faster Remainder by Direct Computation: Applications
// to Compilers and Software Libraries" (Software: Practice and Experience,
// 2019), fastmod_u64. With the 128-bit constant M = floor((2^128-1)/d) + 1,
// h % d = high 64 bits of ((M*h mod 2^128) * d) >> 64, exact for every 64-bit
// h and every d in 1..2^64-1 (their Theorem 1 with F = 128 >= N + log2 d,
// N = 64). Three 64-bit multiplications cost a few ns where a 64-bit DIV
// costs 13-45 cycles: the partition of every check is computed with it.
type modulus struct {
	d        uint64
	mhi, mlo uint64 // M; unused when d == 1
}

// newModulus returns the modulus for d >= 1.
func newModulus(d uint64) modulus {
	if d <= 1 {
		return modulus{d: d}
	}
	// floor((2^128-1)/d), as two 64-bit words, plus one.
	hi := ^uint64(0) / d
	lo, _ := bits.Div64(^uint64(0)%d, ^uint64(0), d)
	lo++
	if lo == 0 {
		hi++
	}
	return modulus{d: d, mhi: hi, mlo: lo}
}

// mod returns h % m.d.
func (m modulus) mod(h uint64) uint64 {
	if m.d <= 1 {
		return 0
	}
	// low = M*h mod 2^128
	lowHi, lowLo := bits.Mul64(m.mlo, h)
	lowHi += m.mhi * h
	// (low * d) >> 128
	bottom, _ := bits.Mul64(lowLo, m.d)
	top, topLo := bits.Mul64(lowHi, m.d)
	_, carry := bits.Add64(topLo, bottom, 0)
	return top + carry
}
