package telemetry_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/telemetry"
)

// The coordinator's calls are counted by outcome, its acquire joins the
// worker's trace with the lease on the server span, and each lease change
// is logged once with the trace id.
func TestCoordinatorInstrumented(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tel, err := telemetry.New(context.Background(), telemetry.Options{SpanExporter: keepSpans{spans}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := bolt.Open(filepath.Join(t.TempDir(), "fg.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	logs := &testenv.LogBuffer{}
	svc := &coordinator.Service{Backend: tel.LeaseBackend(bolt.NewLeases(st), slog.New(slog.NewJSONHandler(logs, nil)))}
	srv := httptest.NewServer(tel.InstrumentCoordinator(svc.Handler()))
	t.Cleanup(srv.Close)

	const workerTrace = "5bf92f3577b34da6a3ce929d0e0e4736"
	call := func(path, traceparent, body string, want int) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		if traceparent != "" {
			req.Header.Set("Traceparent", traceparent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("POST %s %s: %d %s; want %d", path, body, resp.StatusCode, b, want)
		}
		var out map[string]any
		json.Unmarshal(b, &out)
		return out
	}
	got := call("/v1/leases/acquire", "00-"+workerTrace+"-00f067aa0ba902b7-01", `{"resource":"/orders/7","owner":"A","ttl":"1m"}`, 200)
	token := int64(got["token"].(float64))
	h := &harness{tel: tel}
	if n := gauge(t, h, "fencegate_coordinator_active_leases"); n != 1 {
		t.Errorf("active leases with A's held = %v; want 1", n)
	}
	call("/v1/leases/acquire", "", `{"resource":"/orders/7","owner":"B"}`, 409)
	call("/v1/leases/renew", "", `{"resource":"/orders/7","owner":"A","token":`+itoa(token)+`}`, 200)
	call("/v1/leases/renew", "", `{"resource":"/orders/7","owner":"B","token":`+itoa(token+1)+`}`, 409)
	call("/v1/leases/release", "", `{"resource":"/orders/7","owner":"A","token":`+itoa(token)+`}`, 200)
	call("/v1/leases/release", "", `{"resource":"/orders/7","owner":"A","token":`+itoa(token)+`}`, 200)

	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"tokens issued", counter(t, h, "fencegate_coordinator_tokens_issued_total", nil), 1},
		{"active leases after the release", gauge(t, h, "fencegate_coordinator_active_leases"), 0},
		{"renewed", counter(t, h, "fencegate_coordinator_renewals_total", map[string]string{"outcome": "renewed"}), 1},
		{"renew lost", counter(t, h, "fencegate_coordinator_renewals_total", map[string]string{"outcome": "lost"}), 1},
		{"leases lost", counter(t, h, "fencegate_coordinator_leases_lost_total", nil), 1},
		{"released", counter(t, h, "fencegate_coordinator_releases_total", map[string]string{"released": "true"}), 1},
		{"release no-op", counter(t, h, "fencegate_coordinator_releases_total", map[string]string{"released": "false"}), 1},
		{"last token", gauge(t, h, "fencegate_coordinator_last_token_issued"), float64(token)},
		{"acquire calls", float64(histCount(t, h, "fencegate_coordinator_acquire_duration_seconds")), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v; want %v", c.name, c.got, c.want)
		}
	}

	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex(workerTrace)
	var acquire *tracetest.SpanStub
	all := spans.GetSpans()
	for i := range all {
		if s := &all[i]; s.SpanContext.TraceID() == tid && s.SpanKind == trace.SpanKindServer {
			acquire = s
		}
	}
	if acquire == nil || acquire.Name != "POST /v1/leases/acquire" {
		t.Fatalf("no acquire server span in the worker's trace: %v", names(all))
	}
	a := attrs(acquire.Attributes)
	if a[telemetry.AttrResource].AsString() != "/orders/7" || a[telemetry.AttrOwner].AsString() != "A" ||
		a[telemetry.AttrToken].AsInt64() != token || !a[telemetry.AttrLeaseFresh].AsBool() {
		t.Errorf("acquire span attributes %v", acquire.Attributes)
	}
	var held bool
	for _, s := range all {
		for _, e := range s.Events {
			if e.Name == "lease.held" && attrs(e.Attributes)[telemetry.AttrLeaseHolder].AsString() == "A" {
				held = true
			}
		}
	}
	if !held {
		t.Error("no lease.held event naming holder A on B's acquire")
	}

	var acquired, lost, released int
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var line struct {
			Msg     string `json:"msg"`
			TraceID string `json:"trace_id"`
		}
		json.Unmarshal([]byte(l), &line)
		switch line.Msg {
		case "lease acquired":
			acquired++
			if line.TraceID != workerTrace {
				t.Errorf("lease acquired log trace_id %q; want %s", line.TraceID, workerTrace)
			}
		case "lease lost":
			lost++
		case "lease released":
			released++
		}
	}
	if acquired != 1 || lost != 1 || released != 1 {
		t.Errorf("lease change logs: acquired %d, lost %d, released %d; want 1 each\n%s", acquired, lost, released, logs)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// counter sums the counter samples of name whose labels include want.
func counter(t *testing.T, h *harness, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := h.tel.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
