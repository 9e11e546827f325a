package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func us(ns int64) string { return fmt.Sprintf("%.1f µs", float64(ns)/1e3) }

// cpuPerCheck is r's process CPU time per decided check, or "-".
func cpuPerCheck(r result) string {
	if r.cpu <= 0 || r.checks() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f µs", float64(r.cpu.Nanoseconds())/float64(r.checks())/1e3)
}

// printResult prints one run: its totals, then a row per member.
func printResult(w io.Writer, r result) {
	fmt.Fprintf(w, "\n== %s, %d members, load %s, round %d: %d checks in %v (%.0f/s), %d admitted",
		r.system, r.size, r.load, r.round, r.checks(), r.span.Round(time.Millisecond), perSec(r.checks(), r.span), r.admitted())
	if r.bound > 0 {
		verdict := "within"
		if r.admitted() > r.bound {
			verdict = fmt.Sprintf("OVER by %d (%.2fx)", r.admitted()-r.bound, float64(r.admitted())/float64(r.bound))
		}
		fmt.Fprintf(w, " of a bound of %d: %s", r.bound, verdict)
	}
	if e := r.errors(); e > 0 {
		fmt.Fprintf(w, ", %d errors", e)
	}
	if r.cpu > 0 && r.checks() > 0 {
		fmt.Fprintf(w, "; cpu %.2f s, %s per check (this process: every member and the callers)", r.cpu.Seconds(), cpuPerCheck(r))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "member\towner\tcallers\tchecks/s\tadmitted\tp50\tp99\tmax\terrors\troutes\t")
	for _, m := range r.members {
		own := ""
		if m.owner {
			own = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%d\t%s\t%s\t%s\t%d\t%s\t\n", m.name, own, m.callers,
			perSec(m.checks, r.span), m.admitted, us(m.lat.ValueAtQuantile(50)), us(m.lat.ValueAtQuantile(99)),
			us(m.lat.Max()), m.errors, routes(m.routes))
	}
	_ = tw.Flush()
	for _, m := range r.members {
		if m.firstErr != "" {
			fmt.Fprintf(w, "   first error on %s: %s\n", m.name, m.firstErr)
		}
	}
}

func routes(m map[string]int64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, ",")
}

// printSummary prints one row per system, size and load over all rounds:
// admitted against the bound (min..max over rounds), total checks/s, the
// owner's and the non-owners' (mean per member) checks/s and p99.
func printSummary(w io.Writer, all []result) {
	type group struct {
		system, load string
		size         int
	}
	var order []group
	by := map[group][]result{}
	for _, r := range all {
		g := group{r.system, r.load, r.size}
		if _, ok := by[g]; !ok {
			order = append(order, g)
		}
		by[g] = append(by[g], r)
	}
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].size != order[j].size {
			return order[i].size < order[j].size
		}
		return order[i].load < order[j].load
	})
	fmt.Fprintln(w, "\n== summary (each cell: the rounds' values, in run order)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "members\tload\tsystem\tadmitted/bound\tchecks/s all\tcpu per check\towner checks/s\tnon-owner checks/s per member\towner p99\tnon-owner p99 (worst)\terrors\t")
	for _, g := range order {
		var adm, total, cpu, own, non, ownP99, nonP99, errs []string
		for _, r := range by[g] {
			if r.bound > 0 {
				adm = append(adm, fmt.Sprintf("%d/%d", r.admitted(), r.bound))
			} else {
				adm = append(adm, fmt.Sprintf("%d", r.admitted()))
			}
			total = append(total, fmt.Sprintf("%.0f", perSec(r.checks(), r.span)))
			cpu = append(cpu, cpuPerCheck(r))
			var nonChecks int64
			var nonN int
			var worst int64
			for _, m := range r.members {
				if m.owner {
					if m.callers == 0 {
						own = append(own, "-")
						ownP99 = append(ownP99, "-")
					} else {
						own = append(own, fmt.Sprintf("%.0f", perSec(m.checks, r.span)))
						ownP99 = append(ownP99, us(m.lat.ValueAtQuantile(99)))
					}
					continue
				}
				nonChecks += m.checks
				nonN++
				if p := m.lat.ValueAtQuantile(99); p > worst {
					worst = p
				}
			}
			if nonN > 0 {
				non = append(non, fmt.Sprintf("%.0f", perSec(nonChecks, r.span)/float64(nonN)))
				nonP99 = append(nonP99, us(worst))
			}
			errs = append(errs, fmt.Sprintf("%d", r.errors()))
		}
		j := func(s []string) string {
			if len(s) == 0 {
				return "-"
			}
			return strings.Join(s, " ")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", g.size, g.load, g.system, j(adm), j(total), j(cpu), j(own), j(non), j(ownP99), j(nonP99), j(errs))
	}
	_ = tw.Flush()
}
