package telemetry_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/telemetry"
)

// memStore is a Store in memory that can be made to fail.
type memStore struct {
	mu   sync.Mutex
	m    map[string]fencegate.FenceState
	fail error
}

func (s *memStore) LoadFence(ctx context.Context, resource string) (fencegate.FenceState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return fencegate.FenceState{}, s.fail
	}
	return s.m[resource], nil
}

func (s *memStore) AdvanceFence(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return fencegate.FenceState{}, s.fail
	}
	if s.m == nil {
		s.m = make(map[string]fencegate.FenceState)
	}
	st := s.m[resource]
	if token > st.Highest {
		st = fencegate.FenceState{Resource: resource, Highest: token, Owner: owner}
		s.m[resource] = st
	}
	return st, nil
}

// harness is a gateway wired the way server.New wires it, in process.
type harness struct {
	tel      *telemetry.Telemetry
	spans    *tracetest.InMemoryExporter // nil: tracing off
	store    *memStore
	fence    *gateway.LocalFence
	rec      *recorder.Recorder
	url      string // the gateway
	logs     *testenv.LogBuffer
	upstream struct {
		sync.Mutex
		traceparents []string
	}
}

func newHarness(t *testing.T, tracing bool) *harness {
	t.Helper()
	h := &harness{store: &memStore{}, rec: &recorder.Recorder{}, logs: &testenv.LogBuffer{}}
	var opts telemetry.Options
	if tracing {
		h.spans = tracetest.NewInMemoryExporter()
		opts.SpanExporter = keepSpans{h.spans}
	}
	opts.ServiceName = "fencegate-test"
	tel, err := telemetry.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Close() })
	h.tel = tel

	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.upstream.Lock()
		h.upstream.traceparents = append(h.upstream.traceparents, r.Header.Get("Traceparent"))
		h.upstream.Unlock()
		h.rec.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)

	h.fence = gateway.NewLocalFence(tel.Store(h.store), gateway.LocalFenceOptions{OnDrain: tel.Drained})
	gw := gateway.New(tel.TraceFence(h.fence), gateway.Options{
		Logger:     slog.New(slog.NewJSONHandler(h.logs, nil)),
		LogContext: telemetry.LogAttrs,
	})
	hu, err := relay.New(relay.Options{
		URL:       up.URL,
		Transport: telemetry.Transport(relay.NewTransport(nil), "orders"),
	})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := gateway.NewRoute(gateway.RouteOptions{
		Name: "orders", PathPrefix: "/orders/", Resource: "{path}",
		FencedMethods: []string{"PUT", "POST", "PATCH", "DELETE"},
		ForwardToken:  true, // the recorder keeps each write's token
	}, hu)
	if err != nil {
		t.Fatal(err)
	}
	gw.SetRoutes([]*gateway.Route{rt})
	gw.Observer = tel
	srv := httptest.NewServer(tel.InstrumentHandler("gateway", gw))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// put sends a write with a token and, if set, a W3C traceparent.
func (h *harness) put(t *testing.T, path string, token int64, traceparent, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, h.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Fencing-Token", fmt.Sprint(token))
	if traceparent != "" {
		req.Header.Set("Traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// keepSpans keeps the exported spans past Shutdown, which flushes them.
type keepSpans struct{ *tracetest.InMemoryExporter }

func (keepSpans) Shutdown(context.Context) error { return nil }

// ended flushes and returns the spans exported.
func (h *harness) ended(t *testing.T) tracetest.SpanStubs {
	t.Helper()
	if err := h.tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	return h.spans.GetSpans()
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func spansOfTrace(spans tracetest.SpanStubs, id trace.TraceID) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

const (
	staleTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	staleParent = "00f067aa0ba902b7"
)

func TestParseEndpoint(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"},
		{"https://otel.example:4318/", "https://otel.example:4318/v1/traces"},
		{"http://collector:4318/custom/traces", "http://collector:4318/custom/traces"},
		{"127.0.0.1:4318", ""},
		{"grpc://x:4317", ""},
	} {
		got, err := telemetry.ParseEndpoint(c.in)
		if (err != nil) != (c.want == "") || got != c.want {
			t.Errorf("ParseEndpoint(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// `fencegate validate` refuses an endpoint the exporter could not use.
func TestConfigValidatesEndpoint(t *testing.T) {
	for _, c := range []struct {
		endpoint string
		ok       bool
	}{
		{"", true},
		{"http://127.0.0.1:4318", true},
		{"https://otel.example/v1/traces", true},
		{"127.0.0.1:4318", false},
		{"grpc://collector:4317", false},
	} {
		_, err := config.Parse("t.yaml", []byte(fmt.Sprintf("coordinator: {enabled: true}\ntelemetry: {otlp_endpoint: %q}\n", c.endpoint)))
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "telemetry.otlp_endpoint")) {
			t.Errorf("otlp_endpoint %q: %v; want ok=%v", c.endpoint, err, c.ok)
		}
	}
}
