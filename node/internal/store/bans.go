package store

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// BanRule is a penalty rule (node.Penalty): once a key has been denied
// Denials times (1..algo.MaxPenaltyDenials) within Within (ns), it is banned
// for Ban (ns).
type BanRule struct {
	Denials int64
	Within  time.Duration
	Ban     time.Duration
}

// BanState is one key's ban state as it moves between members (handoff,
// replication): BanUntil the ban's end (Unix ns, 0 = none), Denials the
// times (Unix ns) of its recent denied checks, oldest first, at most
// algo.MaxPenaltyDenials, Expire when it decides nothing any more (Unix ns).
type BanState struct {
	Key      string
	BanUntil int64
	Denials  []int64
	Expire   int64
}

// Bans holds the ban states of penalized keys (node.AllowPenalized), sharded
// like the store by the key's ring hash.
// Its lock is taken before the store shard's lock (never the other way round),
// so a penalized check is atomic with its algorithm decision. Keys checked
// without a penalty never touch it.
type Bans struct {
	shards [NumShards]banShard
	// Track lists changed ban states for replication (set it before use
	// when the node replicates).
	Track bool
	// dirtyN counts keys listed dirty since the last takeDirty, so that a
	// replication send with no changed ban (the usual case) takes no lock.
	dirtyN atomic.Int64
}

type banShard struct {
	mu        sync.Mutex
	m         map[string]*banState
	nextSweep int
	// dirty holds the keys whose ban state changed since the last
	// replication send (Bans.Track only).
	dirty map[string]struct{}
}

// banState is one key's ban state on its owner.
type banState struct {
	banUntil int64   // Unix ns; 0 = no ban
	denials  []int64 // times of the last denied checks, oldest first, <= Denials
	expire   int64   // when the state decides nothing any more
}

func (ps *banState) touch(t int64) {
	if t > ps.expire {
		ps.expire = t
	}
}

// Take decides one penalized check of key (ring hash h) at now. decide applies
// hits to the algorithm state (under the store's lock) and reports its
// Decision.
func (p *Bans) Take(h uint64, key string, rule BanRule, hits, now int64, decide func(hits int64) (algo.Decision, error)) (algo.Decision, bool, error) {
	sh := &p.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.m[key]
	if st != nil && st.banUntil-now > int64(rule.Ban) {
		// A ban never outlasts the rule that checks it: the rule's ban was
		// shortened since, or the state came from a peer that claimed more
		// (handed-off ban states are untrusted input).
		st.banUntil = now + int64(rule.Ban)
		p.markDirty(sh, key)
	}
	if st != nil && now < st.banUntil {
		d, err := decide(0) // the limit's capacity and reset, nothing consumed
		if err != nil {
			return d, false, err
		}
		banned(&d, time.Duration(st.banUntil-now))
		return d, true, nil
	}
	d, err := decide(hits)
	if err != nil || d.Allowed || hits == 0 {
		return d, false, err
	}
	if st == nil {
		if sh.m == nil {
			sh.m = make(map[string]*banState)
		}
		if len(sh.m) >= sh.nextSweep {
			sh.sweep(now)
		}
		st = &banState{}
		sh.m[key] = st
	}
	if st.banUntil != 0 { // a ban that has ended: counting starts afresh
		st.banUntil, st.denials = 0, st.denials[:0]
	}
	if int64(len(st.denials)) >= rule.Denials {
		k := int64(len(st.denials)) - rule.Denials + 1
		st.denials = append(st.denials[:0], st.denials[k:]...)
	}
	st.denials = append(st.denials, now)
	st.touch(now + int64(rule.Within))
	p.markDirty(sh, key)
	if int64(len(st.denials)) == rule.Denials && st.denials[0] > now-int64(rule.Within) {
		st.banUntil = now + int64(rule.Ban)
		st.denials = st.denials[:0]
		st.touch(st.banUntil)
		banned(&d, rule.Ban)
		return d, true, nil
	}
	return d, false, nil
}

// markDirty lists key's ban state as changed (shard lock held).
func (p *Bans) markDirty(sh *banShard, key string) {
	if !p.Track {
		return
	}
	if sh.dirty == nil {
		sh.dirty = make(map[string]struct{})
	}
	if _, ok := sh.dirty[key]; !ok {
		sh.dirty[key] = struct{}{}
		p.dirtyN.Add(1)
	}
}

// MarkWhere lists as changed the ban states of the keys for which pred is
// true (a ring change gave them a new backup), and markKeys those of keys.
func (p *Bans) MarkWhere(pred func(key string) bool) {
	if !p.Track {
		return
	}
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for k := range sh.m {
			if pred(k) {
				p.markDirty(sh, k)
			}
		}
		sh.mu.Unlock()
	}
}

// MarkKeys lists the ban states of the given keys (ring hashes hs) as
// changed again (their send failed).
func (p *Bans) MarkKeys(keys []string, hs []uint64) {
	for i, k := range keys {
		sh := &p.shards[ShardOf(hs[i])]
		sh.mu.Lock()
		if sh.m[k] != nil {
			p.markDirty(sh, k)
		}
		sh.mu.Unlock()
	}
}

// TakeDirty returns copies of the ban states changed since the last call
// (those still held) and forgets the changes.
func (p *Bans) TakeDirty() []BanState {
	if p.dirtyN.Swap(0) == 0 {
		return nil
	}
	var out []BanState
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for k := range sh.dirty {
			if st := sh.m[k]; st != nil {
				out = append(out, BanState{Key: k, BanUntil: st.banUntil, Denials: slices.Clone(st.denials), Expire: st.expire})
			}
		}
		clear(sh.dirty)
		sh.mu.Unlock()
	}
	return out
}

// Replace sets key's ban state to s, a replica from the key's owner (which
// holds the whole truth of it, so nothing is merged: merging would count the
// same denials twice).
func (p *Bans) Replace(h uint64, s BanState) {
	sh := &p.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = make(map[string]*banState)
	}
	sh.m[s.Key] = &banState{banUntil: s.BanUntil, denials: slices.Clone(s.Denials), expire: s.Expire}
}

// banned makes d a denial by a ban with left (ns) to go.
func banned(d *algo.Decision, left time.Duration) {
	d.Allowed = false
	d.Remaining = 0
	d.RetryAfter = left
	d.ResetAfter = max(d.ResetAfter, left)
}

// sweep drops the shard's states that decide nothing any more; the next sweep
// runs when the map has doubled, so sweeping costs O(1) amortized per new key.
func (sh *banShard) sweep(now int64) {
	for k, st := range sh.m {
		if st.expire <= now {
			delete(sh.m, k)
		}
	}
	sh.nextSweep = 2*len(sh.m) + 64
}

// Extract applies act(key) to every ban state (see MoveAction) and returns
// those to send.
func (p *Bans) Extract(act func(key string) MoveAction) []BanState {
	var out []BanState
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for k, st := range sh.m {
			a := act(k)
			if a == MoveSend || a == MoveSendCopy {
				out = append(out, BanState{Key: k, BanUntil: st.banUntil, Denials: slices.Clone(st.denials), Expire: st.expire})
			}
			if a == MoveSend || a == MoveDrop {
				delete(sh.m, k)
				delete(sh.dirty, k)
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// Install merges a handed-off ban state: the later ban wins, and the denial
// times are merged (the newest algo.MaxPenaltyDenials kept, oldest first).
func (p *Bans) Install(h uint64, s BanState) {
	sh := &p.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = make(map[string]*banState)
	}
	st := sh.m[s.Key]
	if st == nil {
		st = &banState{}
		sh.m[s.Key] = st
	}
	st.banUntil = max(st.banUntil, s.BanUntil)
	st.touch(s.Expire)
	if len(s.Denials) > 0 {
		merged := append(append([]int64(nil), st.denials...), s.Denials...)
		slices.Sort(merged)
		if len(merged) > algo.MaxPenaltyDenials {
			merged = merged[len(merged)-algo.MaxPenaltyDenials:]
		}
		st.denials = merged
	}
}

// BanUntil returns the end (Unix ns) of key's ban at now (Unix ns), 0 when none.
func (p *Bans) BanUntil(h uint64, key string, now int64) int64 {
	sh := &p.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if st := sh.m[key]; st != nil && st.banUntil > now {
		return st.banUntil
	}
	return 0
}

// Unban drops key's ban state and reports whether it had one.
func (p *Bans) Unban(h uint64, key string) bool {
	sh := &p.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.m[key]
	delete(sh.m, key)
	if _, d := sh.dirty[key]; d {
		delete(sh.dirty, key)
		p.dirtyN.Add(-1)
	}
	return ok
}

// State returns a copy of key's ban state and whether one is held.
func (p *Bans) State(h uint64, key string) (BanState, bool) {
	sh := &p.shards[ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.m[key]
	if st == nil {
		return BanState{}, false
	}
	return BanState{Key: key, BanUntil: st.banUntil, Denials: slices.Clone(st.denials), Expire: st.expire}, true
}
