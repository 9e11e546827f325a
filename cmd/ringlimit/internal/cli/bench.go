package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/bench"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/redistarget"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
)

func newBenchCmd(deps Deps) *cobra.Command {
	var (
		lf     limitFlags
		tf     targetFlags
		o      bench.Options
		dist   string
		prefix string
		quiet  bool
		redisU string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load a cluster (closed or open loop) and check it never admits more than its limits allow",
		Long: `bench sends checks for --duration to an in-process cluster (default: 3 nodes on
loopback), to daemons (--addr) or to the Redis-backed limiter (--redis URL: the
same algorithms as Lua scripts, to compare with Redis on the same machine),
with keys drawn uniformly, from a Zipf distribution or with a few hot keys, and
reports throughput, latency percentiles (HDR histogram) and errors, in total and
per target.

--dist hot sends --hot-share of the checks (0.9) to the first --hot-keys keys (1),
uniformly among them, and the rest uniformly over all --keys keys: one owner
then decides most checks, locally for its own callers and forwarded for the
other nodes' callers. The per-target table (decided checks, checks/s, p50, p99
and the routes of the checks sent to each target) shows the two apart, which the
totals mix.

--replication off|async|sync sets how the in-process cluster's owners copy key
states to their backups (default async, as a node's); not with --addr or --redis.
--leases N turns capacity leases on in the in-process cluster (each node's lease
table size; 0, the default, is off): the route column "lease" counts the checks a
non-owner admitted from capacity its owner lent it.

Closed loop (default): --concurrency callers, each sending its next check when the
previous one is answered. Open loop (--rate R): checks scheduled at R per second,
sent by up to --concurrency callers; latency is measured from the scheduled send
time, so queueing behind a slow cluster counts (no coordinated omission), and
checks still unsent at the end are reported as missed.

Only decided checks (allowed or denied) count as checks and in checks/s; errors
are reported apart, per target. A target that fails --down-after checks in a row
is marked down (a line on stderr says which and why): callers move to the other
targets and probe it with one check every --probe-interval (doubling while it
stays down) instead of spinning on instant errors.

Admission check: for every key the admitted hits are compared with the most its
algorithm can admit over the run's elapsed time E starting from a fresh state
(L = --limit, P = --period, B = --burst): fixed_window and sliding_window_counter
L*(ceil(E/P)+1); sliding_window_log and bucketed_sliding_window L*(floor(E/P)+1);
gcra floor(E/floor(P/L))+B+1;
token_bucket B+floor(E/floor(P/L)). Keys are fresh per run (--prefix). Exit code
1 if any key exceeds its bound or any check fails.

--prefill sends one check for every key before the timed phase (split over the
callers, not timed, not counted in checks/s), so the timed phase measures a
cluster already holding --keys keys rather than one inserting them (at 1M keys
and a few seconds most checks would otherwise be a key's first). Its admissions
count toward each key's bound, and E then starts at the prefill's first check.

The cpu line is this process's CPU time (user+sys) over the timed phase per
decided check: with the in-process target, what a check costs the cluster and
the load generator, which checks/s does not show when a closed loop's callers
wait on the network and leave the CPUs idle (unix only).

A progress bar is drawn on stderr when it is a terminal, unless --quiet.`,
		Example: `  ringlimit bench --duration 10s --concurrency 64
  ringlimit bench --rate 20000 --keys 100000 --dist zipf --zipf-s 1.2 --algorithm token_bucket --limit 100 --period 1s --burst 20
  ringlimit bench --dist hot --hot-keys 1 --hot-share 1 --limit 1000000 --period 1s --burst 1000
  ringlimit bench --replication off --keys 100000
  ringlimit bench --addr 10.0.0.1:8081,10.0.0.2:8081 --duration 30s
  ringlimit bench --redis redis://127.0.0.1:6379/0 --concurrency 64 --keys 100000 --algorithm gcra`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, hits, err := lf.parse(0)
			if err != nil {
				return err
			}
			if err := tf.validate(cmd.Flags()); err != nil {
				return err
			}
			if redisU != "" && (cmd.Flags().Changed("addr") || cmd.Flags().Changed("target") || cmd.Flags().Changed("nodes") || cmd.Flags().Changed("replication") || cmd.Flags().Changed("leases")) {
				return errors.New("--redis sends to Redis: it excludes --addr, --target, --nodes, --replication and --leases")
			}
			d, err := bench.ParseDist(dist)
			if err != nil {
				return fmt.Errorf("--dist: %w", err)
			}
			if d != bench.Hot && (cmd.Flags().Changed("hot-keys") || cmd.Flags().Changed("hot-share")) {
				return fmt.Errorf("--hot-keys and --hot-share apply to --dist hot, not --dist %s", d)
			}
			if d != bench.Zipf && cmd.Flags().Changed("zipf-s") {
				return fmt.Errorf("--zipf-s applies to --dist zipf, not --dist %s", d)
			}
			switch {
			case o.Duration <= 0:
				return fmt.Errorf("--duration %v: must be > 0", o.Duration)
			case o.Concurrency < 1:
				return fmt.Errorf("--concurrency %d: must be >= 1", o.Concurrency)
			case o.Keys < 1 || o.Keys > bench.MaxKeys:
				return fmt.Errorf("--keys %d: want 1..%d", o.Keys, bench.MaxKeys)
			case o.DownAfter < 1:
				return fmt.Errorf("--down-after %d: must be >= 1", o.DownAfter)
			case o.ProbeInterval <= 0:
				return fmt.Errorf("--probe-interval %v: must be > 0", o.ProbeInterval)
			case o.Rate < 0:
				return fmt.Errorf("--rate %v: must be >= 0 (0 = closed loop)", o.Rate)
			case d == bench.Zipf && !(o.ZipfS > 1):
				return fmt.Errorf("--zipf-s %v: must be > 1", o.ZipfS)
			case d == bench.Hot && (o.HotKeys < 1 || o.HotKeys > o.Keys):
				return fmt.Errorf("--hot-keys %d: want 1..%d (--keys)", o.HotKeys, o.Keys)
			case d == bench.Hot && !(o.HotShare > 0 && o.HotShare <= 1):
				return fmt.Errorf("--hot-share %v: want a share in (0, 1]", o.HotShare)
			}
			if _, err := bench.MaxAdmitted(l, o.Duration); err != nil {
				return fmt.Errorf("--limit/--period: %w", err)
			}
			o.Limit, o.Hits, o.Dist, o.Prefix = l, hits, d, prefix
			if o.Seed == 0 {
				o.Seed = bench.DefaultSeed
			}
			open := func() ([]target.Target, func() error, error) { return tf.open(cmd.Context(), cmd.Flags(), deps, false) }
			if redisU != "" {
				open = func() ([]target.Target, func() error, error) {
					return redistarget.Open(cmd.Context(), redisU, o.Concurrency)
				}
			}
			targets, stop, err := open()
			if err != nil {
				return err
			}
			defer stop()
			o.Targets = targets
			stderr := cmd.ErrOrStderr()
			var evMu sync.Mutex
			o.OnTargetEvent = func(e bench.TargetEvent) {
				evMu.Lock()
				defer evMu.Unlock()
				fmt.Fprintf(stderr, "\nbench: target %s %s\n", e.Target, e)
			}
			var bar *progressbar.ProgressBar
			if !quiet && isTerminal(stderr) {
				bar = newBar(stderr, o.Duration)
				o.Progress = func(elapsed time.Duration, checks int64) {
					bar.Describe(fmt.Sprintf("%d checks, %.0f/s", checks, float64(checks)/max(elapsed.Seconds(), 1e-3)))
					bar.Set64(min(elapsed.Milliseconds(), o.Duration.Milliseconds()))
				}
			}
			if o.Prefill && !quiet && isTerminal(stderr) {
				pbar := progressbar.NewOptions64(int64(o.Keys),
					progressbar.OptionSetWriter(stderr),
					progressbar.OptionSetDescription("prefill"),
					progressbar.OptionSetWidth(30),
					progressbar.OptionThrottle(100*time.Millisecond),
					progressbar.OptionClearOnFinish(),
				)
				o.PrefillProgress = func(done int64) {
					pbar.Set64(done)
					if done == int64(o.Keys) {
						pbar.Finish()
					}
				}
			}
			r, runErr := bench.Run(cmd.Context(), o)
			if bar != nil {
				bar.Finish()
				fmt.Fprintln(stderr)
			}
			if r != nil {
				if err := r.Write(cmd.OutOrStdout()); err != nil {
					return err
				}
			}
			if runErr != nil {
				return runErr
			}
			if err := r.Err(); err != nil {
				return no(err)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	lf.register(fs, true, DefaultBurst)
	tf.register(fs)
	fs.DurationVar(&o.Duration, "duration", bench.DefaultDuration, "how long to send checks")
	fs.IntVar(&o.Concurrency, "concurrency", bench.DefaultConcurrency, "callers: checks in flight (closed loop) or most in flight (open loop)")
	fs.Float64Var(&o.Rate, "rate", 0, "open loop: checks per second to offer (0 = closed loop)")
	fs.IntVar(&o.Keys, "keys", bench.DefaultKeys, "distinct keys")
	fs.StringVar(&dist, "dist", "uniform", "key distribution: uniform, zipf or hot")
	fs.Float64Var(&o.ZipfS, "zipf-s", bench.DefaultZipfS, "Zipf exponent (> 1; larger = hotter head)")
	fs.IntVar(&o.HotKeys, "hot-keys", bench.DefaultHotKeys, "--dist hot: how many keys are hot (1..--keys)")
	fs.Float64Var(&o.HotShare, "hot-share", bench.DefaultHotShare, "--dist hot: share of checks sent to the hot keys, in (0, 1]; the rest go uniformly to all keys")
	fs.Uint64Var(&o.Seed, "seed", bench.DefaultSeed, "seed of the key generators (caller i uses PCG(seed, i))")
	fs.StringVar(&prefix, "prefix", "", `key prefix (default "bench:<unix ns>:", fresh per run)`)
	fs.BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	fs.BoolVar(&o.Prefill, "prefill", false, "before the timed phase, send one check for every key (untimed, counted in each key's bound), so the run measures a cluster already holding --keys keys")
	fs.IntVar(&o.DownAfter, "down-after", bench.DefaultDownAfter, "consecutive errors that mark a target down")
	fs.DurationVar(&o.ProbeInterval, "probe-interval", bench.DefaultProbeInterval, "first wait before a down target is probed again (doubles per failed probe)")
	fs.StringVar(&redisU, "redis", "", "redis:// or rediss:// URL: send the same load to the Redis-backed limiter (the algorithms as Lua scripts) instead of ringlimit")
	return cmd
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newBar returns a progress bar over d, counted in milliseconds.
func newBar(w io.Writer, d time.Duration) *progressbar.ProgressBar {
	return progressbar.NewOptions64(d.Milliseconds(),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("bench"),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionClearOnFinish(),
	)
}
