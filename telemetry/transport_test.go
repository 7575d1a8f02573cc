package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/telemetry"
)

// TestTransportNamesItsRoute: an upstream call is counted under the route
// whose transport carried it, with nothing about the request in its
// context but the server's Telemetry: two routes over one base transport
// keep their own series, an answer and a failed call each under its
// outcome.
func TestTransportNamesItsRoute(t *testing.T) {
	tel, err := telemetry.New(context.Background(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	gone.Close()
	base := relay.NewTransport(nil)
	defer base.CloseIdleConnections()
	ctx := tel.WithContext(context.Background())
	for _, c := range []struct{ route, url string }{
		{"orders", up.URL}, {"orders", up.URL}, {"invoices", up.URL}, {"invoices", gone.URL},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.url+"/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := telemetry.Transport(base, c.route).RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}

	mfs, err := tel.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "fencegate_upstream_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetHistogram().GetSampleCount() == 0 {
				continue // a route's series, created before its first call
			}
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			got[key] += m.GetHistogram().GetSampleCount()
		}
	}
	want := map[string]uint64{
		"outcome=response route=orders ":   2,
		"outcome=response route=invoices ": 1,
		"outcome=error route=invoices ":    1,
	}
	if len(got) != len(want) {
		t.Fatalf("upstream series %v; want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("upstream series %v; want %v", got, want)
		}
	}
}
