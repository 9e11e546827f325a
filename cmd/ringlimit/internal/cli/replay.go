package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/accesslog"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/inprocess"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/replay"
	"github.com/ringlimit/ringlimit/node"
)

// DefaultLog is the default --log: the bundled log, relative to the repository
// root.
const DefaultLog = "testdata/apache_logs"

// logFlags select and read the access log.
type logFlags struct {
	path string
}

func (f *logFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.path, "log", DefaultLog, "Apache combined-format access log; the default is looked up in the current directory and its parents (the repository root)")
}

// load resolves and reads the log, reporting skipped lines on w.
func (f *logFlags) load(fs *pflag.FlagSet, w io.Writer) (string, *accesslog.Log, error) {
	path, err := resolveLog(f.path, !fs.Changed("log"))
	if err != nil {
		return "", nil, err
	}
	file, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer file.Close()
	l, err := accesslog.Read(file)
	if err != nil {
		return "", nil, err
	}
	if l.Malformed > 0 {
		fmt.Fprintf(w, "%s: skipped %d malformed lines of %d; first: %v\n", path, l.Malformed, l.Lines, l.Errors[0])
	}
	if len(l.Entries) == 0 {
		return "", nil, fmt.Errorf("%s: no requests in %d lines", path, l.Lines)
	}
	return path, l, nil
}

// resolveLog returns path when it exists. When it does not and search is set
// (the default --log), it looks for path under each parent of the working
// directory, so the bundled log is found from anywhere inside the repository.
func resolveLog(path string, search bool) (string, error) {
	_, err := os.Stat(path)
	if err == nil || !search || filepath.IsAbs(path) || !errors.Is(err, fs.ErrNotExist) {
		return path, err
	}
	dir, werr := os.Getwd()
	if werr != nil {
		return path, err
	}
	for {
		p := filepath.Join(dir, path)
		if _, serr := os.Stat(p); serr == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return path, fmt.Errorf("%w (looked in the working directory and its parents; set --log)", err)
		}
		dir = parent
	}
}

func newReplayCmd(deps Deps) *cobra.Command {
	var (
		lf      limitFlags
		tf      targetFlags
		logf    logFlags
		prefix  string
		workers int
		details int
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Replay an access log through a cluster, limited per client IP, and compare with a single-node reference",
		Long: `replay reads an Apache combined-format access log and sends one check per
request, key = --prefix + client IP, stamped with the request's own timestamp
(so the daemons must run with --accept-caller-timestamps; an in-process cluster
is started with it). Requests of one key are sent in log order by one worker;
keys are spread over --workers workers. Every decision is compared field by
field (allowed, limit, remaining, retry_after, reset_after) with an in-process
reference limiter fed the same sequence. Malformed log lines are skipped and
counted.

Exit code 1 if any decision differs or any check fails (a failure counts as a
mismatch), 2 on error.`,
		Example: `  ringlimit replay
  ringlimit replay --algorithm sliding_window_log --limit 20 --period 1m --nodes 5
  ringlimit replay --addr 10.0.0.1:8081,10.0.0.2:8081 --log /var/log/apache2/access.log`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, hits, err := lf.parse(0)
			if err != nil {
				return err
			}
			if err := tf.validate(cmd.Flags()); err != nil {
				return err
			}
			if workers < 0 {
				return fmt.Errorf("--workers %d: must be >= 0", workers)
			}
			path, log, err := logf.load(cmd.Flags(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			targets, stop, err := tf.open(cmd.Context(), cmd.Flags(), deps, true)
			if err != nil {
				return err
			}
			defer stop()
			if prefix == "" {
				prefix = replay.DefaultPrefix(time.Now())
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "replaying %s: %d requests (%d malformed lines skipped) through %d targets\n", path, len(log.Entries), log.Malformed, len(targets))
			r, err := replay.Run(cmd.Context(), log.Entries, replay.Options{
				Limit: l, Hits: hits, Prefix: prefix, Workers: workers, Targets: targets,
				NewReference: replay.NewStateReference, Details: details,
			})
			if err != nil {
				return err
			}
			if err := r.Write(out); err != nil {
				return err
			}
			if r.Errors > 0 && len(tf.addrs) > 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "hint: replays need the daemons to run with --accept-caller-timestamps")
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
	logf.register(fs)
	fs.StringVar(&prefix, "prefix", "", `key prefix (default "replay:<unix ns>:", fresh per run so earlier runs' state is never met)`)
	fs.IntVar(&workers, "workers", 0, "concurrent senders, each owning a share of the keys (0 = 8 per CPU, at least 16)")
	fs.IntVar(&details, "details", replay.DefaultDetails, "mismatches printed in detail (the first ones in log order)")
	return cmd
}

func newDemoCmd(deps Deps) *cobra.Command {
	var (
		lf      limitFlags
		logf    logFlags
		nodes   int
		workers int
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start 3 nodes in this process and replay the bundled log through them with every algorithm",
		Long: `demo starts a cluster of --nodes nodes on loopback inside this process (caller
timestamps accepted), then replays the access log (default: the bundled
testdata/apache_logs, found from anywhere in the repository) once per algorithm
with the same --limit, --period and --burst, each replay under fresh keys. It
prints one summary per replay and a final table. Exit code 1 if any decision of
any replay differs from the single-node reference.`,
		Example: `  go run ./cmd/ringlimit demo
  go run ./cmd/ringlimit demo --limit 20 --period 10s --burst 3 --nodes 5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var limits []algo.Limit
			for _, k := range algo.Kinds() {
				l, _, err := lf.parse(k)
				if err != nil {
					return err
				}
				limits = append(limits, l)
			}
			hits := lf.hits
			if nodes < 1 || nodes > 64 {
				return fmt.Errorf("--nodes %d: want 1..64", nodes)
			}
			if workers < 0 {
				return fmt.Errorf("--workers %d: must be >= 0", workers)
			}
			path, log, err := logf.load(cmd.Flags(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if deps.InProcess == nil {
				return errors.New("in-process clusters are not available in this build")
			}
			out := cmd.OutOrStdout()
			start := time.Now()
			targets, stop, err := deps.InProcess(cmd.Context(), inprocess.Options{Nodes: nodes, AcceptCallerTimestamps: true})
			if err != nil {
				return fmt.Errorf("start cluster: %w", err)
			}
			defer stop()
			fmt.Fprintf(out, "started %d nodes in %v; replaying %s (%d requests, %d malformed lines skipped) once per algorithm\n\n",
				len(targets), time.Since(start).Round(time.Millisecond), path, len(log.Entries), log.Malformed)
			run := strconv.FormatInt(time.Now().UnixNano(), 10)
			var reports []*replay.Report
			for _, l := range limits {
				r, err := replay.Run(cmd.Context(), log.Entries, replay.Options{
					Limit: l, Hits: hits, Prefix: "demo:" + run + ":" + l.Kind.String() + ":",
					Workers: workers, Targets: targets, NewReference: replay.NewStateReference,
				})
				if err != nil {
					return fmt.Errorf("%s: %w", l.Kind, err)
				}
				fmt.Fprintf(out, "== %s\n", l.Kind)
				if err := r.Write(out); err != nil {
					return err
				}
				fmt.Fprintln(out)
				reports = append(reports, r)
			}
			if err := writeDemoTable(out, reports); err != nil {
				return err
			}
			bad := 0
			for _, r := range reports {
				if r.Err() != nil {
					bad++
				}
			}
			if bad > 0 {
				return no(fmt.Errorf("%w: in %d of %d replays", replay.ErrMismatch, bad, len(reports)))
			}
			fmt.Fprintf(out, "\nall %d replays match the single-node reference\n", len(reports))
			return nil
		},
	}
	fs := cmd.Flags()
	lf.register(fs, false, demoBurst)
	logf.register(fs)
	fs.IntVar(&nodes, "nodes", 3, "nodes of the in-process cluster")
	fs.IntVar(&workers, "workers", 0, "concurrent senders per replay (0 = 8 per CPU, at least 16)")
	return cmd
}

func writeDemoTable(w io.Writer, reports []*replay.Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "algorithm\trequests\tadmitted\tdenied\tmismatches\towner\tforwarded\tlease\tbackup\tfallback\treq/s\telapsed\t")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%v\t\n", r.Limit.Kind, r.Requests, r.Admitted, r.Denied, r.Mismatches,
			r.Routes[node.RouteOwner], r.Routes[node.RouteForwarded], r.Routes[node.RouteLease], r.Routes[node.RouteBackup], r.Routes[node.RouteFallback],
			r.Throughput(), r.Elapsed.Round(time.Millisecond))
	}
	return tw.Flush()
}
