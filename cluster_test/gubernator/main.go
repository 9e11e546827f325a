// Command gubernator-bench runs ringlimit and gubernator side by side on the
// same hot-key load, in this process, on loopback: an in-process cluster of
// each system with the same number of members, closed-loop callers spread over
// every member, all checking one key.
//
// Two loads per cluster size:
//
//   - limited: one key at 100 hits/s with a burst of 100 (ringlimit's
//     TokenBucket; gubernator's LEAKY_BUCKET, the same continuous refill with
//     the same capacity) for -duration. It reports the admitted hits against
//     the most one limiter can admit over the run's span (Burst +
//     floor(span / (Period/Limit)): 1,100 for 10 s).
//   - throughput: one key with a limit high enough that every check is
//     admitted; it reports checks/s per member.
//
// Systems: ringlimit (forward to the key's owner, with its local denials),
// ringlimit-leases (the same with capacity leases on: a member that checks a
// key often admits from a slice of its capacity the owner lent it),
// gubernator with Behavior GLOBAL (each member answers from its local copy and
// sends the hits to the owner asynchronously) and gubernator's default
// behaviour (forward to the owner, batched).
//
// It lives in a module of its own so that ringlimit's module never depends on
// gubernator; run it with `make bench-gubernator` from the repository root.
// Each system's cluster is started for its runs and stopped before the next
// system's, so one idles no cluster while the other is measured; -rounds
// repeats the whole sequence (A/B/A/B).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// config is the command line.
type config struct {
	sizes    []int
	callers  int
	duration time.Duration
	rounds   int
	systems  []string
	loads    []string
	repl     string
	// leaseSize is node.Config.Lease.Size of the ringlimit-leases system.
	leaseSize int
	// nonOwners places the callers on the members that do not own the
	// key only.
	nonOwners bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("gubernator-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("members", "3,10", "cluster sizes to run, comma-separated (each >= 1)")
	callers := fs.Int("callers", 64, "closed-loop callers in all, spread round-robin over the members")
	duration := fs.Duration("duration", 10*time.Second, "length of each run")
	rounds := fs.Int("rounds", 2, "times the whole sequence of systems is repeated (A/B/A/B)")
	systems := fs.String("systems", "ringlimit,ringlimit-leases,gubernator-global,gubernator-forward", "systems to run, comma-separated: ringlimit (capacity leases off, its default), ringlimit-leases (on), gubernator-global, gubernator-forward")
	leaseSize := fs.Int("lease-size", 1024, "ringlimit-leases: each member's capacity lease table size (node.Config.Lease.Size, 1..16777216; the other lease settings are node.DefaultConfig's)")
	loads := fs.String("loads", "limited,throughput", "loads to run, comma-separated: limited (100/s, burst 100) and throughput (all admitted)")
	repl := fs.String("replication", "async", "ringlimit's replication: off, async or sync")
	nonOwners := fs.Bool("non-owners", false, "place the callers on the members that do not own the key only (not with -members 1): in one process, the owner's own callers never wait on the network and take the CPUs from the others'")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	c := config{callers: *callers, duration: *duration, rounds: *rounds, repl: *repl, leaseSize: *leaseSize, nonOwners: *nonOwners}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return config{}, fmt.Errorf("-members: %q is not a size >= 1", s)
		}
		if n < 2 && *nonOwners {
			return config{}, fmt.Errorf("-members: -non-owners needs a size >= 2, not %d", n)
		}
		c.sizes = append(c.sizes, n)
	}
	for _, s := range strings.Split(*systems, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case sysRinglimit, sysRinglimitLeases, sysGuberGlobal, sysGuberForward:
			c.systems = append(c.systems, s)
		default:
			return config{}, fmt.Errorf("-systems: unknown system %q", s)
		}
	}
	for _, s := range strings.Split(*loads, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case loadLimited, loadThroughput:
			c.loads = append(c.loads, s)
		default:
			return config{}, fmt.Errorf("-loads: unknown load %q", s)
		}
	}
	switch {
	case c.callers < 1:
		return config{}, errors.New("-callers must be >= 1")
	case c.duration <= 0:
		return config{}, errors.New("-duration must be > 0")
	case c.rounds < 1:
		return config{}, errors.New("-rounds must be >= 1")
	case c.leaseSize < 1 || c.leaseSize > 1<<24:
		return config{}, errors.New("-lease-size must be in 1..16777216")
	}
	return c, nil
}

const (
	sysRinglimit       = "ringlimit"
	sysRinglimitLeases = "ringlimit-leases"
	sysGuberGlobal     = "gubernator-global"
	sysGuberForward    = "gubernator-forward"

	loadLimited    = "limited"
	loadThroughput = "throughput"
)

// The limited load: 100 hits per second, burst 100.
const (
	limitedRate   = 100
	limitedPeriod = time.Second
	limitedBurst  = 100
	// highRate is the throughput load's limit per second (and burst): no
	// check of a run can be denied.
	highRate = 10_000_000
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gubernator-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	fmt.Fprintf(w, "# GOMAXPROCS=%d callers=%d non-owners=%v duration=%v rounds=%d ringlimit replication=%s lease size=%d\n",
		runtime.GOMAXPROCS(0), cfg.callers, cfg.nonOwners, cfg.duration, cfg.rounds, cfg.repl, cfg.leaseSize)
	var all []result
	for _, size := range cfg.sizes {
		for round := 1; round <= cfg.rounds; round++ {
			for _, sys := range cfg.systems {
				rs, err := runSystem(ctx, cfg, sys, size, round, w)
				if err != nil {
					return fmt.Errorf("%s, %d members, round %d: %w", sys, size, round, err)
				}
				all = append(all, rs...)
			}
		}
	}
	printSummary(w, all)
	return nil
}

// runSystem starts sys's cluster of size members, runs every load once on a
// key of its own, and stops the cluster.
func runSystem(ctx context.Context, cfg config, sys string, size, round int, w io.Writer) ([]result, error) {
	var (
		c   cluster
		err error
	)
	switch sys {
	case sysRinglimit:
		c, err = startRinglimit(ctx, size, cfg.repl, 0)
	case sysRinglimitLeases:
		c, err = startRinglimit(ctx, size, cfg.repl, cfg.leaseSize)
	case sysGuberGlobal:
		c, err = startGubernator(ctx, size, true)
	case sysGuberForward:
		c, err = startGubernator(ctx, size, false)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := c.close(); cerr != nil {
			fmt.Fprintf(w, "# %s: close: %v\n", sys, cerr)
		}
	}()
	var out []result
	for _, load := range cfg.loads {
		key := fmt.Sprintf("hot-%s-%d-%d-%d", load, size, round, time.Now().UnixNano())
		lim := limit{rate: limitedRate, period: limitedPeriod, burst: limitedBurst}
		if load == loadThroughput {
			lim = limit{rate: highRate, period: time.Second, burst: highRate}
		}
		r, err := drive(ctx, c, key, lim, cfg.callers, cfg.nonOwners, cfg.duration)
		if err != nil {
			return nil, err
		}
		r.system, r.load, r.size, r.round = sys, load, size, round
		printResult(w, r)
		out = append(out, r)
	}
	return out, nil
}
