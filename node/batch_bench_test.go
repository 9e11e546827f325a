package node

import (
	"context"
	"math/bits"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/transport"
)

// BenchmarkForwardBatchKeys is the owner's side of forwarded checks: batches
// of 8 GCRA checks (BenchmarkCluster3 forwards about 5 per batch) on keys
// drawn at random from 10k and 1M stored keys, decided by the peer service's
// Forward as a batch from another node would be, without the network. It
// reports ns per check (ns/op is per batch): at 1M keys each check's slot is a
// cache miss.
//
//	go test -run '^$' -bench ForwardBatchKeys ./node/
func BenchmarkForwardBatchKeys(b *testing.B) {
	n := testNode(b, func(c *Config) { c.MaxKeys = 2_000_000; c.IdleScanInterval = time.Hour })
	ctx := context.Background()
	l := algo.Limit{Kind: algo.GCRA, Limit: 1 << 20, Period: time.Hour, Burst: 1 << 20}
	stored := 0
	for _, keys := range []int{10_000, 1_000_000} {
		for ; stored < keys; stored++ {
			if _, err := n.Allow(ctx, "user:"+strconv.Itoa(stored), l); err != nil {
				b.Fatal(err)
			}
		}
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			b.ReportAllocs()
			const batch = 8
			checks := make([]transport.Check, batch)
			out := make([]transport.Result, batch)
			// Each check's key is written into its own reused buffer, hot in
			// the cache as a just-decoded batch's keys are (the node keeps no
			// key string on this path).
			var bufs [batch][]byte
			x := uint64(0x9e3779b97f4a7c15)
			p := peerService{n}
			for b.Loop() {
				for i := range checks {
					x ^= x << 13 // xorshift64: a uniform key each check
					x ^= x >> 7
					x ^= x << 17
					hi, _ := bits.Mul64(x, uint64(keys))
					bufs[i] = strconv.AppendUint(append(bufs[i][:0], "user:"...), hi, 10)
					key := unsafe.String(unsafe.SliceData(bufs[i]), len(bufs[i]))
					checks[i] = transport.Check{Key: key, Limit: l, Hits: 1}
				}
				p.Forward(ctx, checks, out)
				for i := range out {
					if out[i].Code != transport.CodeOK || !out[i].Decision.Allowed {
						b.Fatalf("check %d: %+v", i, out[i])
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/check")
		})
	}
}

// BenchmarkReplicaBatchKeys is a backup's side of replication: batches of 64
// GCRA states, each the replica of a key drawn at random from 10k and 1M
// stored replicas, merged by replication.Replicator.Accept as a replication send from the
// keys' owner would be. Two nodes on the in-memory transport: every key owned
// by one has the other as its backup. It reports ns per state (ns/op is per
// batch).
//
//	go test -run '^$' -bench ReplicaBatchKeys ./node/
func BenchmarkReplicaBatchKeys(b *testing.B) {
	_, nodes := memCluster(b, 2, func(c *Config) { c.MaxKeys = 4_000_000; c.IdleScanInterval = time.Hour })
	owner, backup := nodes[0], nodes[1]
	rs := backup.rs.Load()
	if bk, ok := rs.Backup(0); !ok || bk.Name == "" {
		b.Fatal("the ring has no backups")
	}
	l := algo.Limit{Kind: algo.GCRA, Limit: 1 << 20, Period: time.Hour, Burst: 1 << 20}
	wall := time.Now().UnixNano()
	var st algo.State
	if _, err := st.Take(wall, 1, l); err != nil {
		b.Fatal(err)
	}
	// splitmix64 (Steele, Lea and Flood 2014): uniform 64-bit key hashes,
	// cheap enough not to hide a cache miss. Key i is a replica here when
	// owner owns hashOf(i).
	hashOf := func(i uint64) uint64 {
		z := i*0x9e3779b97f4a7c15 + 0x9e3779b97f4a7c15
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		return z ^ z>>31
	}
	ownedHere := func(h uint64) bool {
		m, ok := rs.Snap.OwnerOfHash(h)
		return ok && m.Name == owner.Name()
	}
	replicas, i := 0, uint64(0)
	for _, keys := range []int{10_000, 1_000_000} {
		for ; replicas < keys; i++ {
			if h := hashOf(i); ownedHere(h) {
				backup.owned.Install(h, l, st, wall, false, wall, false)
				replicas++
			}
		}
		span := i // keys 0..span-1 hold the replicas (and keys the backup owns)
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			b.ReportAllocs()
			const batch = 64
			tb := transport.TransferBatch{From: owner.Name(), Replica: true, States: make([]transport.KeyState, batch)}
			states := make([]algo.State, batch)
			x := uint64(0x9e3779b97f4a7c15)
			for b.Loop() {
				for j := 0; j < batch; {
					x ^= x << 13 // xorshift64
					x ^= x >> 7
					x ^= x << 17
					hi, _ := bits.Mul64(x, span)
					if h := hashOf(hi); ownedHere(h) {
						tb.States[j] = transport.KeyState{KeyHash: h, Limit: l, LastNow: wall}
						states[j] = st
						j++
					}
				}
				if need := backup.repl.Accept(tb, checkedBatch{States: states, Wall: wall}); len(need) != 0 {
					b.Fatalf("%d states refused", len(need))
				}
			}
			if got := backup.owned.Len(); got != keys {
				b.Fatalf("backup holds %d keys, want %d", got, keys)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/state")
		})
	}
}
