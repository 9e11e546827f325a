package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/internal/duration"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/inprocess"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/target"
	"github.com/ringlimit/ringlimit/node"
)

// limitFlags are the flags that describe an algo.Limit and the hits per check.
type limitFlags struct {
	algorithm string
	limit     int64
	period    time.Duration
	burst     int64
	hits      int64
}

// DefaultBurst is the burst of a check that does not give one, on every front
// door: HTTP (a missing "burst"), gRPC (burst 0, proto3's zero value) and the
// CLI's check, bench and replay (--burst). GCRA with burst 0 admits one hit
// at a time, one per emission interval; a token bucket needs a burst of at
// least 1, so it must be given. demo alone uses its own scenario's burst
// (demoBurst).
const DefaultBurst = 0

// demoBurst is the burst of the demo's scenario (limit 10 per minute, burst 5).
const demoBurst = 5

// register declares the limit flags with burst as --burst's default, and
// --algorithm only when withAlgorithm (demo runs every algorithm and must not
// list a flag it cannot take).
func (f *limitFlags) register(fs *pflag.FlagSet, withAlgorithm bool, burst int64) {
	if withAlgorithm {
		fs.StringVar(&f.algorithm, "algorithm", "gcra", "algorithm: "+algo.KindNames(", "))
	}
	fs.Int64Var(&f.limit, "limit", 10, "hits per period (the rate for gcra and token_bucket)")
	f.period = time.Minute
	fs.Var(duration.Value{D: &f.period}, "period", "window length or refill period, a Go duration (at most 2562047h47m16.854775807s)")
	fs.Int64Var(&f.burst, "burst", burst, "gcra: max_burst (capacity burst+1); token_bucket: capacity (>= 1, so give it); ignored by window algorithms")
	fs.Int64Var(&f.hits, "hits", 1, "hits taken by each check (0 peeks)")
}

// parse returns the Limit, validated by algo, and the hits. kind overrides
// --algorithm when non-zero (demo runs every algorithm). An error names the
// flag, then the input error's node.Message (the same text as every door).
func (f *limitFlags) parse(kind algo.Kind) (algo.Limit, int64, error) {
	if kind == 0 {
		k, err := algo.ParseKind(f.algorithm)
		if err != nil {
			return algo.Limit{}, 0, fmt.Errorf("--algorithm: %s", node.Message(err))
		}
		kind = k
	}
	l := algo.Limit{Kind: kind, Limit: f.limit, Period: f.period, Burst: f.burst}
	if err := l.Validate(); err != nil {
		return algo.Limit{}, 0, fmt.Errorf("--limit/--period/--burst for %s: %s", kind, node.Message(err))
	}
	if err := algo.ValidateHits(f.hits); err != nil {
		return algo.Limit{}, 0, fmt.Errorf("--hits: %s", node.Message(err))
	}
	return l, f.hits, nil
}

// targetFlags choose where checks go: an in-process cluster or daemons.
type targetFlags struct {
	target      string
	nodes       int
	replication string
	leases      int
	addrs       []string
	sec         secFlags

	repl node.Replication // --replication parsed by validate
}

func (f *targetFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.target, "target", "inprocess", "where checks go when --addr is not set: inprocess (a cluster of --nodes nodes started in this process on loopback)")
	fs.IntVar(&f.nodes, "nodes", 3, "nodes of the in-process cluster")
	fs.StringVar(&f.replication, "replication", node.DefaultConfig().Replication.String(), "replication of the in-process cluster: off, async or sync (how owners copy key states to their backups)")
	fs.IntVar(&f.leases, "leases", 0, "capacity leases of the in-process cluster: each node's lease table size (node.Config.Lease.Size; 0 off, 1024 a good start)")
	fs.StringSliceVar(&f.addrs, "addr", nil, "comma-separated gRPC addresses (host:port) of ringlimitd daemons; checks are spread over them")
	f.sec.register(fs)
}

func (f *targetFlags) validate(fs *pflag.FlagSet) error {
	if len(f.addrs) > 0 {
		if fs.Changed("target") || fs.Changed("nodes") || fs.Changed("replication") || fs.Changed("leases") {
			return errors.New("--addr sends to daemons: it excludes --target, --nodes, --replication and --leases (set them on the daemons)")
		}
		for _, a := range f.addrs {
			if strings.TrimSpace(a) == "" {
				return fmt.Errorf("--addr %q: empty address", strings.Join(f.addrs, ","))
			}
		}
		return nil
	}
	if f.target != "inprocess" {
		return fmt.Errorf("--target %q: want inprocess (or set --addr)", f.target)
	}
	if f.nodes < 1 || f.nodes > 64 {
		return fmt.Errorf("--nodes %d: want 1..64", f.nodes)
	}
	if f.leases < 0 || f.leases > 1<<24 {
		return fmt.Errorf("--leases %d: want 0..%d", f.leases, 1<<24)
	}
	r, err := node.ParseReplication(f.replication)
	if err != nil {
		return fmt.Errorf("--replication %q: want off, async or sync", f.replication)
	}
	f.repl = r
	return nil
}

// open starts or dials the targets. stop releases them. fs is the command's
// flag set (which security flags were given). validate must have passed.
func (f *targetFlags) open(ctx context.Context, fs *pflag.FlagSet, deps Deps, acceptCallerTimestamps bool) (targets []target.Target, stop func() error, err error) {
	if len(f.addrs) == 0 {
		if deps.InProcess == nil {
			return nil, nil, errors.New("in-process clusters are not available in this build")
		}
		return deps.InProcess(ctx, inprocess.Options{Nodes: f.nodes, AcceptCallerTimestamps: acceptCallerTimestamps, Replication: f.repl, Leases: f.leases})
	}
	sec, err := f.sec.resolve(fs)
	if err != nil {
		return nil, nil, err
	}
	var closers []func() error
	stop = func() error {
		var errs []error
		for _, c := range closers {
			errs = append(errs, c())
		}
		return errors.Join(errs...)
	}
	for _, a := range f.addrs {
		c, closeFn, err := sec.dial(strings.TrimSpace(a))
		if err != nil {
			stop()
			return nil, nil, err
		}
		closers = append(closers, closeFn)
		targets = append(targets, target.Target{Name: strings.TrimSpace(a), Checker: c})
	}
	return targets, stop, nil
}
