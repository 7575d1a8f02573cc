package telemetry

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate"
)

// Metrics are fencegate's Prometheus collectors. No label has unbounded
// cardinality: route names come from the configuration, decisions and
// operations from fixed sets; resources, owners and tokens never become
// labels (they are in spans and logs).
type Metrics struct {
	// Gateway.
	Requests      *prometheus.CounterVec   // route, decision
	StaleRefusals *prometheus.CounterVec   // route
	ClientClosed  *prometheus.CounterVec   // route
	FenceCheck    *prometheus.HistogramVec // route
	DrainWait     prometheus.Histogram
	Upstream      *prometheus.HistogramVec // route, outcome
	StoreDuration *prometheus.HistogramVec // op
	StoreErrors   *prometheus.CounterVec   // op
	Advances      prometheus.Counter
	highest       atomic.Int64
}

// Latency buckets from 100µs (a fence check without I/O) to 30s (the
// default upstream and drain timeouts).
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: counterVec("", "requests_total",
			"Gateway requests by route and fencing decision (forwarded, passthrough, stale, or the refusal's error code).",
			"route", "decision"),
		StaleRefusals: counterVec("", "stale_refusals_total",
			"Writes refused because their fencing token is older than the highest accepted for the resource.",
			"route"),
		ClientClosed: counterVec("", "client_closed_writes_total",
			"Admitted writes whose client went away before their answer was delivered. Each still counted as in flight (held off newer tokens) until the upstream was done with it: its answer read, its connection closed, or the route's timeout passed.",
			"route"),
		FenceCheck: histogramVec("", "fence_check_duration_seconds",
			"Time a fenced request spent in the fence: the check, a durable advance, and any drain wait.",
			latencyBuckets, "route"),
		DrainWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "fencegate", Name: "fence_drain_wait_seconds",
			Help:    "Time a write with a newer token waited for older in-flight writes to the same resource to end (one observation per wait).",
			Buckets: latencyBuckets,
		}),
		Upstream: histogramVec("", "upstream_duration_seconds",
			"Time from sending a request upstream to its response headers (outcome: response or error).",
			latencyBuckets, "route", "outcome"),
		StoreDuration: histogramVec("", "store_duration_seconds",
			"Fence store calls (load, advance) including the durable commit.",
			latencyBuckets, "op"),
		StoreErrors: counterVec("", "store_errors_total",
			"Fence store calls that failed; each fails its write closed (503 fence_unavailable).",
			"op"),
		Advances: counter("", "fence_advances_total",
			"Durable advances of a resource's highest accepted token."),
	}
	reg.MustRegister(m.Requests, m.StaleRefusals, m.ClientClosed, m.FenceCheck, m.DrainWait, m.Upstream,
		m.StoreDuration, m.StoreErrors, m.Advances,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "fencegate", Name: "fence_highest_token",
			Help: "The highest fencing token this process has durably accepted for any resource since it started (per-resource values: the admin API /v1/fences).",
		}, func() float64 { return float64(m.highest.Load()) }),
	)
	return m
}

// The constructors of fencegate's collectors: the one place their
// namespace is set. subsystem may be empty.

func counterVec(subsystem, name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fencegate", Subsystem: subsystem, Name: name, Help: help}, labels)
}

func counter(subsystem, name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "fencegate", Subsystem: subsystem, Name: name, Help: help})
}

func histogramVec(subsystem, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "fencegate", Subsystem: subsystem, Name: name, Help: help, Buckets: buckets}, labels)
}

// observeHighest raises the fence_highest_token gauge to token.
func (m *Metrics) observeHighest(token int64) {
	for {
		cur := m.highest.Load()
		if token <= cur || m.highest.CompareAndSwap(cur, token) {
			return
		}
	}
}

// Decision values of the fencing.decision attribute and the decision label.
// Refusals other than stale use their error code (fence_unavailable, ...).
const (
	DecisionForwarded   = "forwarded"
	DecisionPassthrough = "passthrough"
	DecisionStale       = "stale"
)

// Decision maps a gateway.Outcome decision to its attribute and label
// value: stale_fencing_token becomes "stale", the form operators search for.
func Decision(outcome string) string {
	switch outcome {
	case fencegate.CodeStaleToken:
		return DecisionStale
	case "":
		return "unknown"
	}
	return outcome
}

// StoreCommits exports the embedded store's group-commit counters (read at
// scrape time from stats): fencegate_store_commits_total and
// fencegate_store_commit_changes_total, whose ratio is the changes
// (advances, ETag marks, lease changes) per commit; fsyncs are
// fencegate_store_fsyncs_total (StoreSyncs).
func (t *Telemetry) StoreCommits(stats func() (commits, changes uint64)) {
	t.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "fencegate", Name: "store_commits_total",
			Help: "Group commits of the embedded store: advance log batches (one fdatasync each) and bbolt transactions (two each).",
		}, func() float64 { c, _ := stats(); return float64(c) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "fencegate", Name: "store_commit_changes_total",
			Help: "Changes carried by those commits; divided by fencegate_store_commits_total, the changes per commit.",
		}, func() float64 { _, n := stats(); return float64(n) }),
	)
}
