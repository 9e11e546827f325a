package ring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// balanceNameSets returns sets of member names as deployments name them: the
// compose cluster's hostnames, numbered pods, and seeded random hostnames.
func balanceNameSets(n, random int) [][]Member {
	sets := [][]Member{members("ringlimit-%d", n), members("node-%d", n), members("10.0.0.%d:7946", n)}
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	for range random {
		ms := make([]Member, n)
		for i := range ms {
			ms[i] = Member{Name: fmt.Sprintf("svc-%08x-%d", rng.Uint32(), i), Addr: "a", ID: "x"}
		}
		sets = append(sets, ms)
	}
	return sets
}

// BenchmarkBalance measures, for candidate ring parameters, the spread of key
// ownership (share of the busiest member over the least loaded one, over 100,000
// keys) and the share of keys that move when a member joins, across 33 name sets
// per cluster size. It exists to choose DefaultConfig from measurements:
//
//	go test -run XXX -bench Balance -benchtime 1x ./ring/
//
// Reported: max/min-worst and max/min-median over name sets and cluster sizes
// 3..10, moved-% median for one join (ideal 100/(n+1)), and the build time.
func BenchmarkBalance(b *testing.B) {
	type cand struct {
		parts, repl int
		load        float64
	}
	cands := []cand{
		{1021, 100, 1.25}, {1021, 100, 1.10}, {1021, 100, 1.05}, {1021, 100, 1.02},
		{4093, 100, 1.25}, {4093, 100, 1.05}, {4093, 200, 1.05}, {4093, 100, 1.02},
		{8191, 100, 1.05}, {8191, 200, 1.02}, {4093, 200, 1.02}, {2039, 200, 1.02}, {8191, 400, 1.02}, {16381, 200, 1.02},
	}
	const keys = 100_000
	keyHashes := make([]uint64, keys)
	for i := range keyHashes {
		keyHashes[i] = xxHasher{}.Sum64String(fmt.Sprintf("user:%d", i))
	}
	for _, c := range cands {
		b.Run(fmt.Sprintf("parts=%d/repl=%d/load=%.2f", c.parts, c.repl, c.load), func(b *testing.B) {
			cfg := Config{PartitionCount: c.parts, ReplicationFactor: c.repl, Load: c.load}
			var ratios, moves []float64
			for b.Loop() {
				ratios, moves = ratios[:0], moves[:0]
				for n := 3; n <= 10; n++ {
					for _, set := range balanceNameSets(n, 30) {
						s := newRing(b, cfg, set).Snapshot()
						count := map[string]int{}
						for _, h := range keyHashes {
							m, _ := s.OwnerOfHash(h)
							count[m.Name]++
						}
						hi, lo := 0, math.MaxInt
						for _, m := range set {
							hi, lo = max(hi, count[m.Name]), min(lo, count[m.Name])
						}
						ratios = append(ratios, float64(hi)/float64(max(lo, 1)))
						// One join: a member named like the others.
						grown := append(slices.Clone(set), Member{Name: set[0].Name + "-new"})
						t := newRing(b, cfg, grown).Snapshot()
						moved := 0
						for _, h := range keyHashes {
							x, _ := s.OwnerOfHash(h)
							y, _ := t.OwnerOfHash(h)
							if x.Name != y.Name {
								moved++
							}
						}
						// Normalised: moved share over the ideal 1/(n+1).
						moves = append(moves, float64(moved)/keys*float64(n+1))
					}
				}
			}
			slices.Sort(ratios)
			slices.Sort(moves)
			b.ReportMetric(ratios[len(ratios)-1], "max/min-worst")
			b.ReportMetric(ratios[len(ratios)/2], "max/min-median")
			b.ReportMetric(ratios[len(ratios)*99/100], "max/min-p99")
			b.ReportMetric(moves[len(moves)/2], "moved/ideal-median")
			b.ReportMetric(moves[len(moves)-1], "moved/ideal-worst")
		})
	}
}

// BenchmarkFleetBalance measures ring shapes at fleet sizes: for 3, 10, 30,
// 100 and 1,000 members (5 name sets each, seeded), the busiest member's keys
// over the least loaded one's (1,000 keys per member, at least 100,000), the
// share of keys that move when one member leaves (ideal 1/n), and the time of
// one rebuild plus every backup (ns/op).
//
//	go test -run XXX -bench FleetBalance -benchtime 1x ./ring/
func BenchmarkFleetBalance(b *testing.B) {
	shapes := []Config{
		DefaultConfig(),
		{PartitionCount: 16381, ReplicationFactor: 200, Load: 1.02},
		{PartitionCount: 16381, ReplicationFactor: 100, Load: 1.02},
		{PartitionCount: 65521, ReplicationFactor: 100, Load: 1.02},
		{PartitionCount: 4093, ReplicationFactor: 200, Load: 1.05},
	}
	for _, n := range []int{3, 10, 30, 100, 1000} {
		keys := max(100_000, 1000*n)
		keyHashes := make([]uint64, keys)
		for i := range keyHashes {
			keyHashes[i] = xxHasher{}.Sum64String(fmt.Sprintf("user:%d", i))
		}
		for _, cfg := range shapes {
			if cfg.PartitionCount < 2*n {
				continue
			}
			b.Run(fmt.Sprintf("members=%d/parts=%d/repl=%d/load=%.2f", n, cfg.PartitionCount, cfg.ReplicationFactor, cfg.Load), func(b *testing.B) {
				var ratios, moves []float64
				var build time.Duration
				builds := 0
				for b.Loop() {
					ratios, moves = ratios[:0], moves[:0]
					for _, set := range balanceNameSets(n, 2) {
						start := time.Now()
						r := newRing(b, cfg, set)
						s := r.Snapshot()
						s.PartitionBackup(0)
						build += time.Since(start)
						builds++
						count := map[string]int{}
						for _, h := range keyHashes {
							m, _ := s.OwnerOfHash(h)
							count[m.Name]++
						}
						hi, lo := 0, math.MaxInt
						for _, m := range set {
							hi, lo = max(hi, count[m.Name]), min(lo, count[m.Name])
						}
						ratios = append(ratios, float64(hi)/float64(max(lo, 1)))
						t := newRing(b, cfg, set[1:]).Snapshot()
						moved := 0
						for _, h := range keyHashes {
							x, _ := s.OwnerOfHash(h)
							y, _ := t.OwnerOfHash(h)
							if x.Name != y.Name {
								moved++
							}
						}
						moves = append(moves, float64(moved)/float64(keys)*float64(n))
					}
				}
				slices.Sort(ratios)
				slices.Sort(moves)
				b.ReportMetric(ratios[len(ratios)-1], "max/min-worst")
				b.ReportMetric(ratios[len(ratios)/2], "max/min-median")
				b.ReportMetric(moves[len(moves)/2], "moved/ideal-median")
				b.ReportMetric(float64(build.Microseconds())/1e3/float64(builds), "build+backups-ms")
			})
		}
	}
}
