package store

import "github.com/ringlimit/ringlimit/algo"

// Has reports whether the store holds a state of the key with ring hash h
// under algorithm k.
func (s *Store) Has(h uint64, k algo.Kind) bool {
	h = fold(h)
	sh := &s.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.table(k)
	return t != nil && t.has(h)
}

// Remove drops the state of the key with ring hash h under algorithm k (an
// operator's reset: the key is back to full capacity) and reports whether
// there was one. A pending replication mark of the state is dropped with it.
func (s *Store) Remove(h uint64, k algo.Kind) bool {
	h = fold(h)
	sh := &s.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.table(k)
	if t == nil || !t.removeHash(sh, k, h) {
		return false
	}
	s.keys.Add(-1)
	return true
}

func (t *kindTable[W]) removeHash(sh *shard, k algo.Kind, h uint64) bool {
	i := t.find(h)
	if i < 0 {
		return false
	}
	t.removeAt(sh, k, i) // drops its dirty-list entry
	return true
}
