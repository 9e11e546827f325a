package node

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/internal/store"
	"github.com/ringlimit/ringlimit/transport"
)

// AllowPenalized checks hits hits of key against l on the key's owner like
// AllowN, under the ban rule p (the zero Penalty is none, and then it is
// AllowN). The owner keeps the key's ban state next to its algorithm state
// and decides both under one lock: once the key has been denied p.Denials
// times within p.Within, the check that makes it so and every check of the key
// for p.Ban afterwards are denied with Decision.Banned set, RetryAfter the ban's
// remaining time, Remaining 0, whatever the algorithm says; checks denied by
// the ban consume nothing and do not count as denials. The ban state moves
// with the key on a handoff and is replicated to the key's backup (see
// Config.Replication), which applies it while the owner is unreachable. A
// check decided by the OwnerUnreachable fallback applies no penalty (the
// owner's ban state is out of reach). Errors as AllowN, plus an *InputError
// for an invalid p.
func (n *Node) AllowPenalized(ctx context.Context, key string, l algo.Limit, hits int64, p Penalty) (Decision, error) {
	c := Check{Key: key, Limit: l, Hits: hits, Penalty: p}
	return n.decide(ctx, &c)
}

// penalties shards the ban states like a store, by the key's ring hash.
// Its lock is taken before the store shard's lock (never the other way round),
// so a penalized check is atomic with its algorithm decision. Keys checked
// without a penalty never touch it.
type penalties struct {
	shards [store.NumShards]penaltyShard
	// track lists changed ban states for replication (Config.Replication not
	// off).
	track bool
	// dirtyN counts keys listed dirty since the last takeDirty, so that a
	// replication send with no changed ban (the usual case) takes no lock.
	dirtyN atomic.Int64
}

type penaltyShard struct {
	mu        sync.Mutex
	m         map[string]*penaltyState
	nextSweep int
	// dirty holds the keys whose ban state changed since the last
	// replication send (penalties.track only).
	dirty map[string]struct{}
}

// penaltyState is one key's ban state on its owner.
type penaltyState struct {
	banUntil int64   // Unix ns; 0 = no ban
	denials  []int64 // times of the last denied checks, oldest first, <= Denials
	expire   int64   // when the state decides nothing any more
}

func (ps *penaltyState) touch(t int64) {
	if t > ps.expire {
		ps.expire = t
	}
}

// take decides one penalized check of key (ring hash h) at now. decide applies
// hits to the algorithm state (under the store's lock) and reports its
// Decision.
func (p *penalties) take(h uint64, key string, pen Penalty, hits, now int64, decide func(hits int64) (algo.Decision, error)) (algo.Decision, bool, error) {
	sh := &p.shards[store.ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.m[key]
	if st != nil && st.banUntil-now > int64(pen.Ban) {
		// A ban never outlasts the rule that checks it: the rule's ban was
		// shortened since, or the state came from a peer that claimed more
		// (handed-off ban states are untrusted input).
		st.banUntil = now + int64(pen.Ban)
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
			sh.m = make(map[string]*penaltyState)
		}
		if len(sh.m) >= sh.nextSweep {
			sh.sweep(now)
		}
		st = &penaltyState{}
		sh.m[key] = st
	}
	if st.banUntil != 0 { // a ban that has ended: counting starts afresh
		st.banUntil, st.denials = 0, st.denials[:0]
	}
	if int64(len(st.denials)) >= pen.Denials {
		k := int64(len(st.denials)) - pen.Denials + 1
		st.denials = append(st.denials[:0], st.denials[k:]...)
	}
	st.denials = append(st.denials, now)
	st.touch(now + int64(pen.Within))
	p.markDirty(sh, key)
	if int64(len(st.denials)) == pen.Denials && st.denials[0] > now-int64(pen.Within) {
		st.banUntil = now + int64(pen.Ban)
		st.denials = st.denials[:0]
		st.touch(st.banUntil)
		banned(&d, pen.Ban)
		return d, true, nil
	}
	return d, false, nil
}

// markDirty lists key's ban state as changed (shard lock held).
func (p *penalties) markDirty(sh *penaltyShard, key string) {
	if !p.track {
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

// markWhere lists as changed the ban states of the keys for which pred is
// true (a ring change gave them a new backup), and markKeys those of keys.
func (p *penalties) markWhere(pred func(key string) bool) {
	if !p.track {
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

// markKeys lists the ban states of the given keys (ring hashes hs) as
// changed again (their send failed).
func (p *penalties) markKeys(keys []string, hs []uint64) {
	for i, k := range keys {
		sh := &p.shards[store.ShardOf(hs[i])]
		sh.mu.Lock()
		if sh.m[k] != nil {
			p.markDirty(sh, k)
		}
		sh.mu.Unlock()
	}
}

// takeDirty returns copies of the ban states changed since the last call
// (those still held) and forgets the changes.
func (p *penalties) takeDirty() []transport.PenaltyState {
	if p.dirtyN.Swap(0) == 0 {
		return nil
	}
	var out []transport.PenaltyState
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for k := range sh.dirty {
			if st := sh.m[k]; st != nil {
				out = append(out, transport.PenaltyState{Key: k, BanUntil: st.banUntil, Denials: slices.Clone(st.denials), Expire: st.expire})
			}
		}
		clear(sh.dirty)
		sh.mu.Unlock()
	}
	return out
}

// replace sets key's ban state to s, a replica from the key's owner (which
// holds the whole truth of it, so nothing is merged: merging would count the
// same denials twice).
func (p *penalties) replace(h uint64, s transport.PenaltyState) {
	sh := &p.shards[store.ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = make(map[string]*penaltyState)
	}
	sh.m[s.Key] = &penaltyState{banUntil: s.BanUntil, denials: slices.Clone(s.Denials), expire: s.Expire}
}

func banned(d *algo.Decision, left time.Duration) {
	d.Allowed = false
	d.Remaining = 0
	d.RetryAfter = left
	d.ResetAfter = max(d.ResetAfter, left)
}

// sweep drops the shard's states that decide nothing any more; the next sweep
// runs when the map has doubled, so sweeping costs O(1) amortized per new key.
func (sh *penaltyShard) sweep(now int64) {
	for k, st := range sh.m {
		if st.expire <= now {
			delete(sh.m, k)
		}
	}
	sh.nextSweep = 2*len(sh.m) + 64
}

// extract applies act(key) to every ban state (see store.MoveAction) and returns
// those to send.
func (p *penalties) extract(act func(key string) store.MoveAction) []transport.PenaltyState {
	var out []transport.PenaltyState
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for k, st := range sh.m {
			a := act(k)
			if a == store.MoveSend || a == store.MoveSendCopy {
				out = append(out, transport.PenaltyState{Key: k, BanUntil: st.banUntil, Denials: slices.Clone(st.denials), Expire: st.expire})
			}
			if a == store.MoveSend || a == store.MoveDrop {
				delete(sh.m, k)
				delete(sh.dirty, k)
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// install merges a handed-off ban state: the later ban wins, and the denial
// times are merged (the newest MaxPenaltyDenials kept, oldest first).
func (p *penalties) install(h uint64, s transport.PenaltyState) {
	sh := &p.shards[store.ShardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = make(map[string]*penaltyState)
	}
	st := sh.m[s.Key]
	if st == nil {
		st = &penaltyState{}
		sh.m[s.Key] = st
	}
	st.banUntil = max(st.banUntil, s.BanUntil)
	st.touch(s.Expire)
	if len(s.Denials) > 0 {
		merged := append(append([]int64(nil), st.denials...), s.Denials...)
		slices.Sort(merged)
		if len(merged) > MaxPenaltyDenials {
			merged = merged[len(merged)-MaxPenaltyDenials:]
		}
		st.denials = merged
	}
}
