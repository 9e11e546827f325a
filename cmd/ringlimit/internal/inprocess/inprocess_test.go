package inprocess

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/accesslog"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/bench"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/replay"
	"github.com/ringlimit/ringlimit/node"
)

// TestReplayBundledLog replays the real log through a 3-node cluster and wants
// every decision equal to the single-node reference. Under -race on a loaded
// 2-core machine forwards have passed TestConfig's ForwardTimeout (Start raises
// it to ForwardTimeout): the backup or the fallback then decides, and the
// failure message counts the checks decided by each route.
func TestReplayBundledLog(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../../../../testdata/apache_logs")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log, err := accesslog.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	targets, stop, err := Start(ctx, Options{Nodes: 3, AcceptCallerTimestamps: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	r, err := replay.Run(ctx, log.Entries, replay.Options{
		Limit:   algo.Limit{Kind: algo.SlidingWindowCounter, Limit: 10, Period: time.Minute},
		Targets: targets, NewReference: replay.NewStateReference,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 10000 || r.Keys != 1753 {
		t.Errorf("got %d requests over %d keys, want 10000 over 1753", r.Requests, r.Keys)
	}
	if r.Mismatches != 0 {
		t.Errorf("got %d mismatches (%d errors, routes %v), want 0; first: %v", r.Mismatches, r.Errors, r.Routes, r.First)
	}
	if len(r.ByOwner) != 3 || r.Routes[1] == 0 || r.Routes[2] == 0 {
		t.Errorf("got owners %v routes %v, want all 3 nodes deciding, owner-local and forwarded", r.ByOwner, r.Routes)
	}
}

// TestBenchWithinBounds loads a 3-node cluster with every algorithm and wants no
// key admitted beyond bench.MaxAdmitted: a check of the bounds against the real
// algorithms and of the cluster's per-key atomicity.
func TestBenchWithinBounds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	targets, stop, err := Start(ctx, Options{Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, k := range algo.Kinds() {
		r, err := bench.Run(ctx, bench.Options{
			Targets: targets, Limit: algo.Limit{Kind: k, Limit: 4, Period: 10 * time.Second, Burst: 2},
			Keys: 8, Dist: bench.Zipf, Duration: 300 * time.Millisecond, Concurrency: 16, Seed: 7,
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.Err() != nil || r.DeniedChecks == 0 {
			t.Errorf("%v: got %v with %d denied, want within bounds and some denials", k, r.Err(), r.DeniedChecks)
		}
	}
}

// The in-process demo runs the secure profile: mutual TLS between its nodes
// and encrypted gossip, with certificates made in memory.
func TestDemoRunsSecure(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	targets, stop, err := Start(ctx, Options{Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, tg := range targets {
		n, ok := tg.Checker.(*node.Node)
		if !ok {
			t.Fatalf("target %s is a %T, want *node.Node", tg.Name, tg.Checker)
		}
		if n.Insecure() {
			t.Errorf("demo node %s runs insecure", tg.Name)
		}
	}
}

// TestStartReplication: Options.Replication reaches the nodes. With
// replication off each key is held once in the cluster; with sync, whose
// decisions return once the backup holds the new state, twice.
func TestStartReplication(t *testing.T) {
	t.Parallel()
	const keys = 20
	for _, tt := range []struct {
		r    node.Replication
		want int
	}{{node.ReplicationOff, keys}, {node.ReplicationSync, 2 * keys}} {
		t.Run(tt.r.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			targets, stop, err := Start(ctx, Options{Nodes: 2, Replication: tt.r})
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Minute, Burst: 5}
			for k := range keys {
				if _, err := targets[k%2].Checker.Check(ctx, node.Check{Key: "repl:" + strconv.Itoa(k), Limit: l, Hits: 1}); err != nil {
					t.Fatal(err)
				}
			}
			held := 0
			for _, tg := range targets {
				held += tg.Checker.(*node.Node).Stats().Keys
			}
			if held != tt.want {
				t.Errorf("got %d key states in the cluster, want %d", held, tt.want)
			}
		})
	}
}

// Each target tells the forward messages it received as an owner: checks
// of keys one node owns, sent through the other, reach the owner's count
// and not the sender's.
func TestTargetsCountReceivedForwards(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	targets, stop, err := Start(ctx, Options{Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	a, b := targets[0], targets[1]
	owner := b.Checker.(*node.Node)
	l := algo.Limit{Kind: algo.GCRA, Limit: 1000, Period: time.Second, Burst: 999}
	sent := 0
	for i := 0; sent < 10; i++ {
		k := fmt.Sprint("fwd-", i)
		if m, ok := owner.Owner(k); !ok || m.Name != owner.Name() {
			continue
		}
		if d, err := a.Checker.Check(ctx, node.Check{Key: k, Limit: l, Hits: 1}); err != nil || d.Route != node.RouteForwarded {
			t.Fatalf("check of %s through %s: %+v, %v; want forwarded", k, a.Name, d, err)
		}
		sent++
	}
	if got := b.Received(); got < 1 || got > 10 {
		t.Errorf("the owner received %d forward messages for 10 checks sent one at a time, want 1..10", got)
	}
	if got := a.Received(); got != 0 {
		t.Errorf("the sender received %d forward messages, want 0", got)
	}
}
