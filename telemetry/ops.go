package telemetry

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencegate/fencegate"
)

// OpsMetrics are the collectors dashboards and alerts need from the first
// scrape: what runs (build_info), whether the last configuration reload
// worked, and the writes each route is forwarding now.
type OpsMetrics struct {
	Reloads           *prometheus.CounterVec // result: success, failure
	LastReloadSuccess prometheus.Gauge       // 1 or 0
	LastReloadTime    prometheus.Gauge       // unix seconds of the last successful load
	inflight          atomic.Pointer[func() map[string]int64]
}

func newOpsMetrics(reg prometheus.Registerer, bi BuildInfo) *OpsMetrics {
	m := &OpsMetrics{
		Reloads: counterVec("", "config_reloads_total",
			"Configuration reloads (SIGHUP) by result: success, or failure (the previous configuration keeps serving).",
			"result"),
		LastReloadSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fencegate", Name: "config_last_reload_successful",
			Help: "1 if the last configuration reload succeeded (or none was tried), 0 if it failed.",
		}),
		LastReloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fencegate", Name: "config_last_reload_success_timestamp_seconds",
			Help: "Unix time the running configuration was loaded: at start, then at each successful reload.",
		}),
	}
	m.Reloads.WithLabelValues("success")
	m.Reloads.WithLabelValues("failure")
	m.LastReloadSuccess.Set(1)
	m.LastReloadTime.Set(float64(time.Now().Unix()))
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "fencegate", Name: "build_info",
		Help: "Always 1; the labels say which fencegate runs (version, Go version, VCS commit).",
	}, []string{"version", "goversion", "commit"})
	buildInfo.WithLabelValues(bi.Version, bi.GoVersion, bi.Commit).Set(1)
	reg.MustRegister(m.Reloads, m.LastReloadSuccess, m.LastReloadTime, buildInfo, &inflightCollector{m: m})
	return m
}

// Reloaded records the result of a configuration reload.
func (m *OpsMetrics) Reloaded(err error) {
	if err != nil {
		m.Reloads.WithLabelValues("failure").Inc()
		m.LastReloadSuccess.Set(0)
		return
	}
	m.Reloads.WithLabelValues("success").Inc()
	m.LastReloadSuccess.Set(1)
	m.LastReloadTime.Set(float64(time.Now().Unix()))
}

// SetInFlight sets the source of the in-flight writes gauge: the current
// routes' counts by route name, read at scrape time.
func (m *OpsMetrics) SetInFlight(f func() map[string]int64) { m.inflight.Store(&f) }

var inflightDesc = prometheus.NewDesc("fencegate_inflight_writes",
	"Fenced writes each route is forwarding now (admitted, or waiting in the fence).", []string{"route"}, nil)

// inflightCollector reads the routes' counters at scrape time, so that a
// reload's routes are reported without re-registering anything.
type inflightCollector struct{ m *OpsMetrics }

func (c *inflightCollector) Describe(ch chan<- *prometheus.Desc) { ch <- inflightDesc }

func (c *inflightCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.m.inflight.Load()
	if f == nil {
		return
	}
	for route, n := range (*f)() {
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(n), route)
	}
}

// gatewayDecisions are the decision label values a route can report.
var gatewayDecisions = []string{
	DecisionForwarded, DecisionPassthrough, DecisionStale, DecisionClientClosed,
	fencegate.CodeMissingToken, fencegate.CodeInvalidToken, fencegate.CodeUnknownToken,
	fencegate.CodeFenceUnavailable, fencegate.CodeFenceDraining, fencegate.CodeInvalidResource,
	fencegate.CodeUnauthorized, fencegate.CodeForbidden, fencegate.CodeBodyTooLarge,
	fencegate.CodeUpstreamUnavailable, fencegate.CodeUpstreamTimeout, fencegate.CodeTooManyWrites,
	fencegate.CodePreconditionFailed, fencegate.CodeTokenSourceUnavailable, fencegate.CodeStoreRegressed,
	fencegate.CodeNotLockHolder,
}

// InitLabels creates every counter's label sets for the given routes (and
// the coordinator's, if it is instrumented) at zero, so that dashboards
// and alerts such as rate(...) or increase(...) see a series from the first
// scrape instead of none until the first event. Call it again after a
// reload; series of removed routes stay at their last value.
func (t *Telemetry) InitLabels(routes []string) {
	m := t.Metrics
	for _, r := range routes {
		for _, d := range gatewayDecisions {
			m.Requests.WithLabelValues(r, d)
		}
		m.StaleRefusals.WithLabelValues(r)
		m.FenceCheck.WithLabelValues(r)
		m.Upstream.WithLabelValues(r, "response")
		m.Upstream.WithLabelValues(r, "error")
	}
	// Refused before any route matched.
	m.Requests.WithLabelValues("", fencegate.CodeNoRoute)
	m.Requests.WithLabelValues("", fencegate.CodeInvalidResource)
	for _, op := range []string{"load", "advance"} {
		m.StoreErrors.WithLabelValues(op)
		m.StoreDuration.WithLabelValues(op)
	}
	if c := t.coord; c != nil {
		for _, o := range []string{"renewed", "lost", "error"} {
			c.Renewals.WithLabelValues(o)
		}
		c.Releases.WithLabelValues("true")
		c.Releases.WithLabelValues("false")
		for _, op := range []string{"acquire", "renew", "release", "show"} {
			c.StoreErrors.WithLabelValues(op)
		}
	}
}

// RequestCounts sums requests_total per route: fenced writes forwarded and
// requests refused since start (passthrough and client_closed are
// neither). It reads the counters, so it costs a scrape of one metric.
func (m *Metrics) RequestCounts() map[string]RouteCounts {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		m.Requests.Collect(ch)
		close(ch)
	}()
	out := map[string]RouteCounts{}
	for pm := range ch {
		var d dto.Metric
		if pm.Write(&d) != nil {
			continue
		}
		var route, decision string
		for _, l := range d.GetLabel() {
			switch l.GetName() {
			case "route":
				route = l.GetValue()
			case "decision":
				decision = l.GetValue()
			}
		}
		n := uint64(d.GetCounter().GetValue())
		c := out[route]
		switch {
		case decision == DecisionForwarded:
			c.Forwarded += n
		case Refused(decision) && decision != "unknown":
			c.Refused += n
		}
		switch decision {
		case fencegate.CodeUpstreamUnavailable:
			c.UpstreamUnavailable += n
		case fencegate.CodeUpstreamTimeout:
			c.UpstreamTimeouts += n
		}
		out[route] = c
	}
	return out
}

// RouteCounts are one route's totals since start.
type RouteCounts struct {
	Forwarded, Refused uint64
	// The upstream's failures: 502 upstream_unavailable (no answer) and
	// 504 upstream_timeout (none within the route's timeout).
	UpstreamUnavailable, UpstreamTimeouts uint64
}

// UpstreamLatency is one route's upstream_duration_seconds for answered
// requests (outcome response) since start.
type UpstreamLatency struct {
	Count uint64
	Mean  float64 // seconds
	P95   float64 // seconds: the upper bound of the bucket holding the 95th percentile
}

// UpstreamLatencies reads upstream_duration_seconds{outcome="response"}
// per route (a scrape of one metric, like RequestCounts).
func (m *Metrics) UpstreamLatencies() map[string]UpstreamLatency {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		m.Upstream.Collect(ch)
		close(ch)
	}()
	out := map[string]UpstreamLatency{}
	for pm := range ch {
		var d dto.Metric
		if pm.Write(&d) != nil {
			continue
		}
		var route, outcome string
		for _, l := range d.GetLabel() {
			switch l.GetName() {
			case "route":
				route = l.GetValue()
			case "outcome":
				outcome = l.GetValue()
			}
		}
		h := d.GetHistogram()
		if outcome != "response" || h.GetSampleCount() == 0 {
			continue
		}
		l := UpstreamLatency{Count: h.GetSampleCount(), Mean: h.GetSampleSum() / float64(h.GetSampleCount())}
		rank := 0.95 * float64(l.Count)
		l.P95 = h.GetSampleSum() / float64(l.Count) // above the last bucket: the mean is all that is known
		for _, b := range h.GetBucket() {
			if float64(b.GetCumulativeCount()) >= rank {
				l.P95 = b.GetUpperBound()
				break
			}
		}
		out[route] = l
	}
	return out
}
