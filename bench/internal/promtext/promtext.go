// Package promtext reads a Prometheus text exposition page (etcd's
// /metrics) for the benchmarks with the library made for it, expfmt's
// TextParser, rather than a line scanner of each benchmark's own: the
// page's samples as the text writes them, and sums over those whose
// labels match.
package promtext

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Label is one label of a sample.
type Label struct{ Name, Value string }

// Sample is one line of a page: a histogram gives one per bucket (label
// le), its name_sum and its name_count; a summary one per quantile (label
// quantile), its name_sum and name_count.
type Sample struct {
	Name string
	// Labels in the page's order (le or quantile last).
	Labels []Label
	Value  float64
}

// Label is the value of the sample's label name; "" if it has none.
func (s Sample) Label(name string) string {
	for _, l := range s.Labels {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// Key is the sample's line without its value, as the text format writes
// it: name{a="x",b="y"}.
func (s Sample) Key() string {
	if len(s.Labels) == 0 {
		return s.Name
	}
	var sb strings.Builder
	sb.WriteString(s.Name)
	sep := byte('{')
	for _, l := range s.Labels {
		sb.WriteByte(sep)
		sep = ','
		sb.WriteString(l.Name)
		sb.WriteString(`="`)
		labelEscaper.WriteString(&sb, l.Value)
		sb.WriteByte('"')
	}
	sb.WriteByte('}')
	return sb.String()
}

// labelEscaper escapes a label value as the text format does.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// Page is a parsed page.
type Page struct {
	samples []Sample
}

// Get fetches url (a /metrics page) with client (nil: http.DefaultClient)
// and parses it.
func Get(ctx context.Context, client *http.Client, url string) (*Page, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p, err := Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return p, nil
}

// Parse reads a page in the text format.
func Parse(r io.Reader) (*Page, error) {
	// Metric names as any exposition may write them. This expfmt has no
	// default scheme: a zero TextParser panics at the first name.
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	slices.Sort(names)
	p := &Page{}
	for _, n := range names {
		for _, m := range fams[n].GetMetric() {
			p.samples = appendSamples(p.samples, n, m)
		}
	}
	return p, nil
}

// appendSamples appends the lines metric m of family name was parsed from.
func appendSamples(out []Sample, name string, m *dto.Metric) []Sample {
	labels := make([]Label, 0, len(m.GetLabel())+1)
	for _, l := range m.GetLabel() {
		labels = append(labels, Label{l.GetName(), l.GetValue()})
	}
	// with is labels and one more (a bucket's le, a quantile), on a copy.
	with := func(name, value string) []Label {
		return append(slices.Clip(labels), Label{name, value})
	}
	switch {
	case m.Counter != nil:
		return append(out, Sample{name, labels, m.GetCounter().GetValue()})
	case m.Gauge != nil:
		return append(out, Sample{name, labels, m.GetGauge().GetValue()})
	case m.Untyped != nil:
		return append(out, Sample{name, labels, m.GetUntyped().GetValue()})
	case m.Histogram != nil:
		h := m.GetHistogram()
		for _, b := range h.GetBucket() {
			out = append(out, Sample{name + "_bucket", with(model.BucketLabel, formatFloat(b.GetUpperBound())), float64(b.GetCumulativeCount())})
		}
		return append(out, Sample{name + "_sum", labels, h.GetSampleSum()}, Sample{name + "_count", labels, float64(h.GetSampleCount())})
	case m.Summary != nil:
		s := m.GetSummary()
		for _, q := range s.GetQuantile() {
			out = append(out, Sample{name, with(model.QuantileLabel, formatFloat(q.GetQuantile())), q.GetValue()})
		}
		return append(out, Sample{name + "_sum", labels, s.GetSampleSum()}, Sample{name + "_count", labels, float64(s.GetSampleCount())})
	}
	return out
}

// formatFloat writes a bucket's bound or a quantile as expfmt's text
// writer does (+Inf for the last bucket).
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, +1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// Samples are the page's samples, by metric name, then in the page's order.
func (p *Page) Samples() []Sample { return p.samples }

// Sum adds the samples named name (a histogram's name_count, name_sum:
// the text's names) whose labels include each pair of match: label name,
// value, ... It is false if none matched. An odd match is a mistake of the
// caller's and panics.
func (p *Page) Sum(name string, match ...string) (float64, bool) {
	if len(match)%2 != 0 {
		panic(fmt.Sprintf("promtext: Sum(%q, %q): labels and values come in pairs", name, match))
	}
	var sum float64
	found := false
	for _, s := range p.samples {
		if s.Name == name && matches(s, match) {
			sum += s.Value
			found = true
		}
	}
	return sum, found
}

// matches is whether s has each label of match (name, value pairs).
func matches(s Sample, match []string) bool {
	for i := 0; i < len(match); i += 2 {
		if !slices.Contains(s.Labels, Label{match[i], match[i+1]}) {
			return false
		}
	}
	return true
}
