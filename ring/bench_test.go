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

// BenchmarkSetMembers alternates between two sets of n members that differ in one
// name, so every call is a full rebuild; "same names" changes only an Addr.
func BenchmarkSetMembers(b *testing.B) {
	for _, n := range []int{3, 10, 50} {
		a := members("node-%d", n)
		c := members("node-%d", n)
		c[n-1].Name = "other"
		for _, cfg := range []Config{{PartitionCount: 1021, ReplicationFactor: 100, Load: 1.25}, {PartitionCount: 4093, ReplicationFactor: 200, Load: 1.02}, {PartitionCount: 8191, ReplicationFactor: 200, Load: 1.02}} {
			b.Run(fmt.Sprintf("members=%d/parts=%d/repl=%d", n, cfg.PartitionCount, cfg.ReplicationFactor), func(b *testing.B) {
				r := newRing(b, cfg, nil)
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
			})
		}
	}
	for _, n := range []int{3, 10, 50} {
		a := members("node-%d", n)
		c := members("node-%d", n)
		c[n-1].Name = "other"
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			r := newRing(b, DefaultConfig(), nil)
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
		})
	}
	b.Run("members=10/same-names", func(b *testing.B) {
		a := members("node-%d", 10)
		c := members("node-%d", 10)
		c[9].Addr = "elsewhere:7000"
		r := newRing(b, DefaultConfig(), a)
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
	})
}
