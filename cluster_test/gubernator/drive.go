package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ringlimit/ringlimit/internal/cputime"
)

// memberResult is what the callers on one member saw.
type memberResult struct {
	name     string
	owner    bool
	callers  int
	checks   int64
	admitted int64
	errors   int64
	firstErr string
	routes   map[string]int64
	lat      *hdrhistogram.Histogram
}

// result is one run: one system, cluster size, load and round.
type result struct {
	system, load string
	size, round  int
	span         time.Duration
	// cpu is the process's CPU time (user+system) over the run: both the
	// cluster's and the callers'; 0 where not measured.
	cpu     time.Duration
	bound   int64 // the most one limiter admits over span; 0 for throughput
	members []memberResult
}

func (r result) checks() (n int64) {
	for _, m := range r.members {
		n += m.checks
	}
	return n
}

func (r result) admitted() (n int64) {
	for _, m := range r.members {
		n += m.admitted
	}
	return n
}

func (r result) errors() (n int64) {
	for _, m := range r.members {
		n += m.errors
	}
	return n
}

func newHist() *hdrhistogram.Histogram {
	// 100 ns .. 60 s in ns, 3 significant digits.
	return hdrhistogram.New(100, int64(time.Minute), 3)
}

// caller is one closed-loop caller's tally.
type caller struct {
	checks, admitted, errors int64
	firstErr                 string
	routes                   map[string]int64
	lat                      *hdrhistogram.Histogram
	last                     time.Time
}

// drive runs callers closed-loop callers, spread round-robin over c's
// members (over those that do not own key with nonOwners), each checking key
// under l one hit at a time until d has passed.
func drive(ctx context.Context, c cluster, key string, l limit, callers int, nonOwners bool, d time.Duration) (result, error) {
	owner, err := c.owner(ctx, key)
	if err != nil {
		return result{}, err
	}
	var placed []int // member index of each caller slot
	for i := range c.members {
		if !nonOwners || i != owner {
			placed = append(placed, i)
		}
	}
	// One check per member of another key first: peer connections are made
	// before the run, not in it.
	for _, m := range c.members {
		if _, err := m.check(ctx, "warm-"+key, l); err != nil {
			return result{}, fmt.Errorf("warm-up on %s: %w", m.name, err)
		}
	}
	tallies := make([]*caller, callers)
	var wg sync.WaitGroup
	cpu0, cpuOK := cputime.Process()
	start := time.Now()
	deadline := start.Add(d)
	for i := range tallies {
		t := &caller{routes: map[string]int64{}, lat: newHist()}
		tallies[i] = t
		m := c.members[placed[i%len(placed)]]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				o, err := m.check(ctx, key, l)
				t1 := time.Now()
				t.last = t1
				t.checks++
				_ = t.lat.RecordValue(int64(t1.Sub(t0)))
				if err != nil {
					t.errors++
					if t.firstErr == "" {
						t.firstErr = err.Error()
					}
					continue
				}
				if o.allowed {
					t.admitted++
				}
				if o.route != "" {
					t.routes[o.route]++
				}
			}
		}()
	}
	wg.Wait()
	cpu1, cpuOK1 := cputime.Process()
	end := start
	for _, t := range tallies {
		if t.last.After(end) {
			end = t.last
		}
	}
	r := result{span: end.Sub(start)}
	if cpuOK && cpuOK1 {
		r.cpu = cpu1 - cpu0
	}
	if l.rate == limitedRate {
		r.bound = bucketBound(l, r.span)
	}
	for i, m := range c.members {
		mr := memberResult{name: m.name, owner: i == owner, routes: map[string]int64{}, lat: newHist()}
		for j, t := range tallies {
			if placed[j%len(placed)] != i {
				continue
			}
			mr.callers++
			mr.checks += t.checks
			mr.admitted += t.admitted
			mr.errors += t.errors
			if mr.firstErr == "" {
				mr.firstErr = t.firstErr
			}
			for k, v := range t.routes {
				mr.routes[k] += v
			}
			mr.lat.Merge(t.lat)
		}
		r.members = append(r.members, mr)
	}
	return r, nil
}

// bucketBound is the most hits a token bucket of capacity l.burst, refilled
// with l.rate hits per l.period, admits to checks decided within an interval
// of span from a full bucket: Burst + floor(span / floor(Period/Rate)), the
// bound of ringlimit's TokenBucket (1,100 for 100/s, burst 100, over 10 s).
// gubernator's LEAKY_BUCKET with the same limit, duration and burst leaks at
// the same rate from the same capacity.
func bucketBound(l limit, span time.Duration) int64 {
	return l.burst + int64(span/(l.period/time.Duration(l.rate)))
}
