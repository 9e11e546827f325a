package replay

import "github.com/ringlimit/ringlimit/algo"

// StateReference is the reference limiter: a plain map of algo.State values, fed
// one check at a time, exactly what a single node would compute for one key. Not
// safe for concurrent use (Run gives each worker its own).
type StateReference map[string]*algo.State

// NewStateReference returns an empty StateReference; it is the usual
// Options.NewReference.
func NewStateReference() Reference { return StateReference{} }

// Take applies the check to key's state (created fresh on first use) and
// returns algo's decision or its error (wrapping algo.ErrInvalidLimit).
func (r StateReference) Take(key string, now, hits int64, l algo.Limit) (algo.Decision, error) {
	s := r[key]
	if s == nil {
		s = new(algo.State)
		r[key] = s
	}
	return s.Take(now, hits, l)
}
