package store

import "github.com/ringlimit/ringlimit/algo"

// Cancel gives back, on the owner, what the booking r of the key whose hash
// is h booked under l and has not used (algo.State.Cancel), under the
// key's shard lock, at now (owner clock). A key this store does not hold
// has nothing to give back. It returns ErrNotOwner when owns says no, or
// algo's error (algo.ErrReserveUnsupported for the window algorithms).
func (s *Store) Cancel(h uint64, l algo.Limit, r algo.Reservation, now int64, owns func() bool) error {
	h = fold(h)
	sh := &s.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if owns != nil && !owns() {
		return ErrNotOwner
	}
	switch l.Kind {
	case algo.GCRA:
		return cancelIn(s, sh, &sh.gcra, h, l, r, now)
	case algo.TokenBucket:
		return cancelIn(s, sh, &sh.tb, h, l, r, now)
	}
	var st algo.State
	_, err := st.Cancel(now, r, l)
	return err
}

// cancelIn is Cancel on the table of l.Kind; the shard lock is held.
func cancelIn[W words](s *Store, sh *shard, t *kindTable[W], h uint64, l algo.Limit, r algo.Reservation, now int64) error {
	i := t.find(h)
	if i < 0 {
		return nil
	}
	sl := &t.slots[i]
	var scratch algo.State
	st, boxed := sh.load(l.Kind, sl.words(), &scratch, sh.limits.ls[sl.lim].t)
	gave, err := st.Cancel(now, r, l)
	if err != nil || gave == 0 {
		return err
	}
	if !boxed {
		sh.repack(l.Kind, st, sl.words())
	}
	if s.Track && s.Live.Load() {
		markSlot(sh, l.Kind, sl) // the backup learns of the refund
	} else if sl.flags&flagDirty != 0 {
		touchSlot(sh, l.Kind, sl)
	}
	return nil
}
