package store

import (
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// This file is what capacity leases (node's lease.go) need of the store:
// checks decided with hits held back for lent slices, and probes of what a
// key's state could take.

// Probe returns, under the key's shard lock, the Decision a check of hits
// (> 0) of the key whose hash is h would get under l at now (owner clock),
// and a copy of the key's state with the hits taken when allowed (a fresh
// state for a key this store does not hold), without changing anything.
// Errors: ErrNotOwner when owns says no, algo's validation errors.
func (s *Store) Probe(h uint64, l algo.Limit, hits, now int64, owns func() bool) (algo.Decision, Moved, error) {
	h = fold(h)
	sh := &s.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if owns != nil && !owns() {
		return algo.Decision{}, Moved{}, ErrNotOwner
	}
	st := s.stateCopy(sh, h, l.Kind)
	d, err := st.Take(now, hits, l)
	return d, Moved{H: h, Limit: l, St: st, LastNow: now}, err
}

// TakeHeldInto is TakeInto for a key with held hits lent out (> 0): the
// check is admitted only if the state could take its hits plus held, and
// only its hits are taken. A denial is the Decision of hits plus held
// (RetryAfter as long as the state needs for both, never RetryNever when
// the hits alone fit the capacity: then RetryAfter is retry, the caller's
// bound on how long the slices are held); an admission reports Remaining
// less held.
func (s *Store) TakeHeldInto(out *algo.Decision, h uint64, l algo.Limit, hits, held, retry, now, wall int64, owns func() bool) error {
	hf := fold(h)
	sh := &s.shards[ShardOf(hf)]
	sh.mu.Lock()
	if owns != nil && !owns() {
		sh.mu.Unlock()
		return ErrNotOwner
	}
	st := s.stateCopy(sh, hf, l.Kind)
	d, err := st.Take(now, min(hits+held, algo.MaxHits), l)
	sh.mu.Unlock()
	if err != nil {
		return err
	}
	if !d.Allowed && hits > 0 {
		if d.RetryAfter < 0 {
			d.RetryAfter = time.Duration(retry)
		}
		*out = d
		return nil
	}
	// The state could take both: take the check's hits (the state may have
	// changed since the probe only by other checks, which the caller's hold
	// lock keeps out for this key).
	if err := s.TakeInto(out, h, l, hits, now, wall, owns); err != nil {
		return err
	}
	out.Remaining = max(0, out.Remaining-held)
	return nil
}

// stateCopy returns a copy of the state of the key with folded hash h under
// k, or a fresh state; the shard lock is held.
func (s *Store) stateCopy(sh *shard, h uint64, k algo.Kind) algo.State {
	switch k {
	case algo.GCRA:
		return copyOf(sh, &sh.gcra, h, k)
	case algo.TokenBucket:
		return copyOf(sh, &sh.tb, h, k)
	case algo.FixedWindow:
		return copyOf(sh, &sh.fw, h, k)
	}
	var fresh algo.State
	return fresh
}

func copyOf[W words](sh *shard, t *kindTable[W], h uint64, k algo.Kind) algo.State {
	i := t.find(h)
	if i < 0 {
		var fresh algo.State
		return fresh
	}
	var scratch algo.State
	st, _ := sh.load(k, t.slots[i].words(), &scratch, 0)
	return st.Clone()
}
