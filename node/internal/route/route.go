// Package route holds what of a check's way needs no node: the share of a
// limit each member takes when the ring falls back on local limiters. The
// node resolves owners, forwards and decides.
package route

import "github.com/ringlimit/ringlimit/algo"

// Share returns one member's share of l when the members of the ring fall
// back on local limiters together: Limit (and Burst, or GCRA's capacity
// Burst+1) divided by members, rounded up, so that members nodes admit about
// l in all (at most l plus members-1 hits per period). With members <= 1 it
// returns l.
func Share(l algo.Limit, members int) algo.Limit {
	if members <= 1 {
		return l
	}
	m := int64(members)
	div := func(v int64) int64 { return (v + m - 1) / m }
	s := l
	s.Limit = div(l.Limit)
	switch l.Kind {
	case algo.GCRA:
		s.Burst = div(l.Burst+1) - 1
	case algo.TokenBucket:
		s.Burst = div(l.Burst)
	}
	return s
}
