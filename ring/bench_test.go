package ring

import (
	"fmt"
	"testing"
)

func BenchmarkOwner(b *testing.B) {
	r := newRing(b, DefaultConfig(), members("node-%d", 10))
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%d:user-%d", i%17, i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := r.Owner(keys[i&1023]); !ok {
			b.Fatal("Owner: got false, want true")
		}
		i++
	}
}

// alternate calls SetMembers with a and c in turn, b.N times in all.
func alternate(b *testing.B, r *Ring, a, c []Member) {
	b.Helper()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		set := a
		if i%2 == 1 {
			set = c
		}
		if err := r.SetMembers(set); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkSetMembers alternates between two sets of n members that differ in one
// name, so every call is a full rebuild, at the defaults and at other ring
// shapes (the 1021/100/1.25 defaults before BenchmarkBalance chose
// 4093/200/1.02); "same names" changes only an Addr.
func BenchmarkSetMembers(b *testing.B) {
	shapes := []Config{{PartitionCount: 1021, ReplicationFactor: 100, Load: 1.25}, {PartitionCount: 8191, ReplicationFactor: 200, Load: 1.02}}
	for _, n := range []int{3, 10, 50} {
		a := members("node-%d", n)
		c := members("node-%d", n)
		c[n-1].Name = "other"
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) { alternate(b, newRing(b, DefaultConfig(), nil), a, c) })
		for _, cfg := range shapes {
			b.Run(fmt.Sprintf("members=%d/parts=%d/repl=%d", n, cfg.PartitionCount, cfg.ReplicationFactor), func(b *testing.B) {
				alternate(b, newRing(b, cfg, nil), a, c)
			})
		}
	}
	b.Run("members=10/same-names", func(b *testing.B) {
		a := members("node-%d", 10)
		c := members("node-%d", 10)
		c[9].Addr = "elsewhere:7000"
		alternate(b, newRing(b, DefaultConfig(), a), a, c)
	})
}
