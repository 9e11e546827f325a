package failover

import "github.com/prometheus/client_golang/prometheus"

// collector exports a Limiter's Stats; see Limiter.Collector.
type collector struct {
	l                                         *Limiter
	state, switches, timeIn, checks, failures *prometheus.Desc
}

// Collector returns a prometheus.Collector (register it once) that exports the
// breaker at each scrape:
//   - ringlimit_failover_state{state}: 1 for the current state, 0 for the others;
//   - ringlimit_failover_switches_total{from,to}: transitions;
//   - ringlimit_failover_state_seconds_total{state}: time spent in each state (s);
//   - ringlimit_failover_checks_total{side}: checks decided by "redis" and "cluster";
//   - ringlimit_failover_redis_failures_total: Redis calls that failed, timed out
//     or were slower than Config.SlowCall.
func (l *Limiter) Collector() prometheus.Collector {
	const ns = "ringlimit_failover_"
	return &collector{
		l:        l,
		state:    prometheus.NewDesc(ns+"state", "Circuit breaker state: 1 for the current one.", []string{"state"}, nil),
		switches: prometheus.NewDesc(ns+"switches_total", "Circuit breaker transitions.", []string{"from", "to"}, nil),
		timeIn:   prometheus.NewDesc(ns+"state_seconds_total", "Time spent in each breaker state, seconds.", []string{"state"}, nil),
		checks:   prometheus.NewDesc(ns+"checks_total", "Checks decided, by side.", []string{"side"}, nil),
		failures: prometheus.NewDesc(ns+"redis_failures_total", "Redis calls that failed, timed out or were slow.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.state, c.switches, c.timeIn, c.checks, c.failures} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.l.Stats()
	for _, st := range States() {
		v := 0.0
		if st == s.State {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, st.String())
		ch <- prometheus.MustNewConstMetric(c.timeIn, prometheus.CounterValue, s.TimeIn[st].Seconds(), st.String())
		for _, to := range States() {
			if to != st {
				ch <- prometheus.MustNewConstMetric(c.switches, prometheus.CounterValue, float64(s.Switches[st][to]), st.String(), to.String())
			}
		}
	}
	for _, side := range []Side{SideRedis, SideCluster} {
		ch <- prometheus.MustNewConstMetric(c.checks, prometheus.CounterValue, float64(s.Checks[side]), side.String())
	}
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(s.Failures))
}
