// Package prometheus checks the alert rules here and the Grafana dashboard
// in ../grafana against the metrics fencegate really exposes: every metric
// and label an expression names must exist, so a renamed metric cannot
// silently turn an alert or a panel into a query that never matches.
package prometheus

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/telemetry"
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// exposed returns metric name -> label names of everything fencegate
// registers (histograms also under _bucket, _count and _sum).
func exposed(t *testing.T) map[string][]string {
	t.Helper()
	tel, err := telemetry.New(context.Background(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Vectors appear once they have a child.
	m, c := tel.Metrics, tel.Coordinator()
	for _, v := range []*prometheus.MetricVec{
		m.Requests.MetricVec, m.StaleRefusals.MetricVec, m.StoreErrors.MetricVec,
		m.FenceCheck.MetricVec, m.Upstream.MetricVec, m.StoreDuration.MetricVec,
		c.Renewals.MetricVec, c.Releases.MetricVec, c.StoreErrors.MetricVec, c.AcquireWait.MetricVec,
	} {
		touch(v)
	}
	mfs, err := tel.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string][]string)
	for _, mf := range mfs {
		var labels []string
		if len(mf.GetMetric()) > 0 {
			for _, lp := range mf.GetMetric()[0].GetLabel() {
				labels = append(labels, lp.GetName())
			}
		}
		name := mf.GetName()
		out[name] = labels
		if mf.GetMetric()[0].Histogram != nil {
			out[name+"_bucket"] = append(slices.Clone(labels), "le")
			out[name+"_count"] = labels
			out[name+"_sum"] = labels
		}
	}
	return out
}

// touch creates one child of a vector whatever its labels are.
func touch(v *prometheus.MetricVec) {
	for n := 1; n <= 3; n++ {
		vals := make([]string, n)
		if _, err := v.GetMetricWithLabelValues(vals...); err == nil {
			return
		}
	}
}

var (
	metricRef = regexp.MustCompile(`\b(fencegate_[a-z_]+)(\{([^}]*)\})?`)
	labelKey  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	byClause  = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
)

// checkExpr reports metrics and labels in expr that fencegate does not
// expose. job and instance come from the scrape.
func checkExpr(t *testing.T, where, expr string, metrics map[string][]string) {
	t.Helper()
	if strings.Count(expr, "(") != strings.Count(expr, ")") || strings.Count(expr, "{") != strings.Count(expr, "}") {
		t.Errorf("%s: unbalanced brackets in %s", where, expr)
	}
	refs := metricRef.FindAllStringSubmatch(expr, -1)
	if len(refs) == 0 {
		t.Errorf("%s: names no fencegate metric: %s", where, expr)
	}
	var usable []string
	for _, r := range refs {
		labels, ok := metrics[r[1]]
		if !ok {
			t.Errorf("%s: metric %s is not exposed", where, r[1])
			continue
		}
		usable = append(usable, labels...)
		for _, k := range labelKey.FindAllStringSubmatch(r[3], -1) {
			if k[1] != "job" && k[1] != "instance" && !slices.Contains(labels, k[1]) {
				t.Errorf("%s: %s has no label %s", where, r[1], k[1])
			}
		}
	}
	for _, by := range byClause.FindAllStringSubmatch(expr, -1) {
		for l := range strings.SplitSeq(by[1], ",") {
			l = strings.TrimSpace(l)
			if l != "job" && l != "instance" && !slices.Contains(usable, l) {
				t.Errorf("%s: groups by %s, a label none of its metrics has", where, l)
			}
		}
	}
}

func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile("fencegate-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalWithOptions(b, &rf, yaml.Strict()); err != nil {
		t.Fatal(err)
	}
	metrics := exposed(t)
	var n int
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || r.For == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %q: needs alert, for, labels.severity and annotations.summary", r.Alert)
			}
			checkExpr(t, "alert "+r.Alert, r.Expr, metrics)
		}
	}
	if n == 0 {
		t.Fatal("no rules")
	}
}

func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../grafana/fencegate-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	metrics := exposed(t)
	var n int
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			n++
			checkExpr(t, "panel "+p.Title, tg.Expr, metrics)
		}
	}
	if n == 0 {
		t.Fatal("no panels")
	}
}
