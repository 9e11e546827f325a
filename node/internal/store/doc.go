// Package store is the owner-side key space of a node: every key's algorithm
// state, kept under the key's 64-bit ring hash in one open-addressing table
// per algorithm and shard (packed in the slot where it fits, boxed where it
// does not), with the shard's table of distinct Limits, the prefetch of a
// batch's slots, idle-key eviction at the key bound, the lists of changed
// keys that replication sends, and the ban states of penalized keys (Bans,
// bans.go). It knows nothing of membership or the
// network: the node decides who owns a hash and passes the owner check
// (Take's owns) and the move of each state at a ring change (Extract's act).
//
// store.go is over 600 lines because a check's whole path under the shard
// lock (find, load, decide, repack, mark) reads best in one file; table.go is
// the hash table alone.
package store
