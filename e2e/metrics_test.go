package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/coordinator/client"
)

// metricsYAML is a gateway and coordinator with telemetry off (the default):
// metrics are served anyway.
func metricsYAML(upstream string) string {
	return gatewayYAML(upstream) + "coordinator: {enabled: true, listen: $COORDINATOR}\n"
}

// The counters on /metrics move by exactly what a scenario did.
func TestMetricsScrapeDeltas(t *testing.T) {
	rec, up := newUpstream(t)
	p := startFencegate(t, metricsYAML(up))
	gw, admin := p.URL("gateway"), p.URL("admin")
	before := scrape(t, admin)

	ctx := context.Background()
	a := &client.Client{URL: p.URL("coordinator"), Owner: "A"}
	b := &client.Client{URL: p.URL("coordinator"), Owner: "B"}
	put := func(path string, token int64, want int) {
		t.Helper()
		tok := ""
		if token != 0 {
			tok = fmt.Sprint(token)
		}
		if st, body := write(t, "PUT", gw+path, tok, "v"+tok); st != want {
			t.Fatalf("PUT %s token %q: %d %s; want %d", path, tok, st, body, want)
		}
	}
	la, err := a.AcquireOnce(ctx, "/orders/1", client.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	put("/orders/1", la.Token, 200)
	put("/orders/1", la.Token, 200)
	if again, err := a.AcquireOnce(ctx, "/orders/1", client.Options{TTL: time.Minute}); err != nil || again.Token != la.Token {
		t.Fatalf("A's retried acquire: %v, %v; want token %d", again.Token, err, la.Token)
	}
	var fe *fencegate.Error
	if _, err := b.AcquireOnce(ctx, "/orders/1", client.Options{}); !errors.As(err, &fe) || fe.Code != fencegate.CodeLeaseHeld {
		t.Fatalf("B's acquire: %v; want lease_held", err)
	}
	if _, err := a.Renew(ctx, "/orders/1", la.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.Release(ctx, "/orders/1", la.Token); err != nil || !ok {
		t.Fatalf("release: %v, %v", ok, err)
	}
	lb, err := b.AcquireOnce(ctx, "/orders/1", client.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	put("/orders/1", lb.Token, 200)
	put("/orders/1", la.Token, 409) // A, late: stale
	put("/orders/1", la.Token, 409)
	put("/orders/1", 0, 428)
	if st, body := write(t, "GET", gw+"/orders/1", "", ""); st != 200 {
		t.Fatalf("GET: %d %s", st, body)
	}
	if _, err := b.Renew(ctx, "/orders/1", la.Token, time.Minute); !errors.As(err, &fe) || fe.Code != fencegate.CodeLeaseLost {
		t.Fatalf("B renewing A's old token: %v; want lease_lost", err)
	}
	if got := len(rec.History()); got != 3 {
		t.Fatalf("upstream applied %d writes; want 3", got)
	}

	after := scrape(t, admin)
	for _, c := range []struct {
		series string
		want   float64
	}{
		{`fencegate_requests_total{decision="forwarded",route="orders"}`, 3},
		{`fencegate_requests_total{decision="stale",route="orders"}`, 2},
		{`fencegate_requests_total{decision="missing_fencing_token",route="orders"}`, 1},
		{`fencegate_requests_total{decision="passthrough",route="orders"}`, 1},
		{`fencegate_stale_refusals_total{route="orders"}`, 2},
		{`fencegate_fence_advances_total`, 2}, // one per token: at issuance (fence on issuance) or at its first write
		{`fencegate_fence_check_duration_seconds_count{route="orders"}`, 5},
		{`fencegate_upstream_duration_seconds_count{outcome="response",route="orders"}`, 4},
		{`fencegate_store_errors_total{op="advance"}`, 0},
		{`fencegate_coordinator_tokens_issued_total`, 2},
		{`fencegate_coordinator_acquire_duration_seconds_count{outcome="acquired"}`, 3},
		{`fencegate_coordinator_acquire_duration_seconds_count{outcome="held"}`, 1},
		{`fencegate_coordinator_renewals_total{outcome="renewed"}`, 1},
		{`fencegate_coordinator_renewals_total{outcome="lost"}`, 1},
		{`fencegate_coordinator_leases_lost_total`, 1},
		{`fencegate_coordinator_releases_total{released="true"}`, 1},
	} {
		if got := after[c.series] - before[c.series]; got != c.want {
			t.Errorf("%s moved by %v; want %v", c.series, got, c.want)
		}
	}
	if got := after["fencegate_coordinator_last_token_issued"]; got != float64(lb.Token) {
		t.Errorf("fencegate_coordinator_last_token_issued = %v; want %d", got, lb.Token)
	}
	if got := after["fencegate_fence_highest_token"]; got != float64(lb.Token) {
		t.Errorf("fencegate_fence_highest_token = %v; want %d", got, lb.Token)
	}
}

// scrape reads /metrics into series -> value; histograms contribute their
// _count and _sum.
func scrape(t *testing.T, admin string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := make(map[string]float64)
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := seriesLabels(m.GetLabel())
			switch {
			case m.Counter != nil:
				out[name+labels] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name+labels] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[name+"_count"+labels] = float64(m.GetHistogram().GetSampleCount())
				out[name+"_sum"+labels] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func seriesLabels(lps []*dto.LabelPair) string {
	if len(lps) == 0 {
		return ""
	}
	var parts []string
	for _, lp := range lps {
		parts = append(parts, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}
