package store

import (
	"slices"

	"github.com/ringlimit/ringlimit/algo"
)

// Save calls fn with copies of the states of one shard at a time that are not
// idle at owner time wall (dropping them would change no decision, so they are
// not worth saving), in shard order, skipping shards with none. The shard's
// lock is held only while its states are copied, not while fn runs; fn must
// not keep the slice, which is reused. It stops at fn's first error and
// returns it. For Node's snapshots (Config.StateDir): a key checked while
// Save runs is saved as it was before or after that check.
func (s *Store) Save(wall int64, fn func([]Moved) error) error {
	var buf []Moved
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		buf = buf[:0]
		for _, kt := range sh.tables() {
			buf = kt.t.appendLive(sh, kt.k, wall, buf)
		}
		sh.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		if err := fn(buf); err != nil {
			return err
		}
		clear(buf) // drop the cloned logs and buckets
	}
	return nil
}

// appendLive appends copies of t's states that are not idle at wall.
func (t *kindTable[W]) appendLive(sh *shard, k algo.Kind, wall int64, out []Moved) []Moved {
	for i := range t.slots {
		if sl := &t.slots[i]; sl.h != emptyHash && !t.idle(sh, k, sl, wall) {
			out = append(out, t.copyAt(sh, k, sl, wall))
		}
	}
	return out
}

// Save calls fn with copies of the ban states of one shard at a time that
// still decide something at now (Unix ns: their Expire is later), skipping
// shards with none; the shard's lock is not held while fn runs, and fn must
// not keep the slice. It stops at fn's first error and returns it.
func (p *Bans) Save(now int64, fn func([]BanState) error) error {
	var buf []BanState
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		buf = buf[:0]
		for k, st := range sh.m {
			if st.expire > now {
				buf = append(buf, BanState{Key: k, BanUntil: st.banUntil, Denials: slices.Clone(st.denials), Expire: st.expire})
			}
		}
		sh.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		if err := fn(buf); err != nil {
			return err
		}
	}
	return nil
}
