package node

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/ringlimit/ringlimit/ring"
)

// BenchmarkMembershipChange measures what one membership change costs a node
// in CPU, without the network: the ring rebuild (Ring.SetMembers) and the
// backup table (computeBackups), alternating between a set of n members and
// the same set without its last member (a leave, then a join). Reported:
// ns/op (wall), cpu-ns/op (the process's user+system CPU, which counts the
// garbage collector's work on other cores) and alloc-bytes/op.
//
//	go test -run XXX -bench MembershipChange -benchtime 10x ./node/
func BenchmarkMembershipChange(b *testing.B) {
	for _, n := range []int{3, 10, 30, 100, 1000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			full := make([]ring.Member, n)
			for i := range full {
				full[i] = ring.Member{Name: fmt.Sprintf("svc-%04d", i), Addr: fmt.Sprintf("10.0.%d.%d:7000", i/250, i%250), ID: "x"}
			}
			sets := [][]ring.Member{full, full[:n-1]}
			nd := &Node{cfg: Config{Name: full[0].Name, Ring: ring.DefaultConfig(), Replication: ReplicationAsync},
				log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			r, err := ring.New(nd.cfg.Ring)
			if err != nil {
				b.Fatal(err)
			}
			change := func(i int) {
				if err := r.SetMembers(sets[i%2]); err != nil {
					b.Fatal(err)
				}
				if nd.computeBackups(r.Snapshot()) == nil {
					b.Fatal("no backup table")
				}
			}
			change(1) // the first build is not a change
			b.ReportAllocs()
			cpu0 := processCPU()
			i := 0
			for b.Loop() {
				change(i)
				i++
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(i), "cpu-ns/op")
		})
	}
}
