package telemetry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate"
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
	tel, err := telemetry.New(context.Background(), config.Telemetry{ServiceName: "fencegate-test"}, opts)
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
	hu, err := gateway.NewHTTPUpstream(&config.Upstream{URL: up.URL}, gateway.HTTPUpstreamOptions{
		Transport: telemetry.Transport(gateway.NewTransport(nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := gateway.NewRoute(config.Route{
		Name: "orders", Match: config.Match{PathPrefix: "/orders/"}, Resource: "{path}",
		FencedMethods: []string{"PUT", "POST", "PATCH", "DELETE"},
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

// A stale write is found by its attributes on the server span, which
// continues the worker's trace, keeps an unset status (a 4xx is not a
// server error) and carries the refusal event; the fence decision is a
// child span. The admitted write's trace context reaches the upstream.
func TestStaleRefusalSpan(t *testing.T) {
	h := newHarness(t, true)
	if got := h.put(t, "/orders/7", 42, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "new"); got != http.StatusOK {
		t.Fatalf("token 42: status %d; want 200", got)
	}
	if got := h.put(t, "/orders/7", 41, "00-"+staleTrace+"-"+staleParent+"-01", "zombie"); got != http.StatusConflict {
		t.Fatalf("token 41: status %d; want 409", got)
	}
	// The durable state: only the newer write was applied.
	if hist := h.rec.HistoryOf("/orders/7"); len(hist) != 1 || hist[0].Token != "42" {
		t.Fatalf("upstream history %s; want only token 42", recorder.Summary(hist))
	}

	spans := h.ended(t)
	tid, _ := trace.TraceIDFromHex(staleTrace)
	stale := spansOfTrace(spans, tid)
	var server, fence *tracetest.SpanStub
	for i := range stale {
		switch s := &stale[i]; {
		case s.SpanKind == trace.SpanKindServer:
			server = s
		case s.Name == "fence.admit":
			fence = s
		case s.SpanKind == trace.SpanKindClient && s.Name != "fence.store.load":
			t.Errorf("stale write has an upstream client span %q", s.Name)
		}
	}
	if server == nil || fence == nil {
		t.Fatalf("stale trace spans %v; want a server span and a fence.admit child", names(stale))
	}
	if got := server.Parent.SpanID().String(); got != staleParent {
		t.Errorf("server span parent %s; want the worker's span %s", got, staleParent)
	}
	want := map[attribute.Key]attribute.Value{
		telemetry.AttrDecision: attribute.StringValue("stale"),
		telemetry.AttrResource: attribute.StringValue("/orders/7"),
		telemetry.AttrRoute:    attribute.StringValue("orders"),
		telemetry.AttrToken:    attribute.Int64Value(41),
		telemetry.AttrHighest:  attribute.Int64Value(42),
	}
	got := attrs(server.Attributes)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("server span %s = %v; want %v", k, got[k].String(), v.String())
		}
	}
	if got["http.response.status_code"].AsInt64() != http.StatusConflict {
		t.Errorf("server span http.response.status_code = %v; want 409", got["http.response.status_code"].String())
	}
	if server.Status.Code != codes.Unset {
		t.Errorf("server span status %v; want Unset for a 4xx refusal", server.Status.Code)
	}
	var ev *sdktrace.Event
	for i := range server.Events {
		if server.Events[i].Name == telemetry.EventRefused {
			ev = &server.Events[i]
		}
	}
	if ev == nil {
		t.Fatalf("server span events %v; want %s", server.Events, telemetry.EventRefused)
	}
	if got := attrs(ev.Attributes)[telemetry.AttrError].AsString(); got != fencegate.CodeStaleToken {
		t.Errorf("refusal event %s = %q; want %q", telemetry.AttrError, got, fencegate.CodeStaleToken)
	}
	if fence.Parent.SpanID() != server.SpanContext.SpanID() {
		t.Errorf("fence.admit parent %s; want the server span %s", fence.Parent.SpanID(), server.SpanContext.SpanID())
	}
	if got := attrs(fence.Attributes)[telemetry.AttrDecision].AsString(); got != "stale" {
		t.Errorf("fence.admit decision %q; want stale", got)
	}

	// The admitted write: a client span under the server span, whose
	// context is what the upstream received.
	fid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	var client *tracetest.SpanStub
	fwd := spansOfTrace(spans, fid)
	for i := range fwd {
		if s := &fwd[i]; s.SpanKind == trace.SpanKindClient && strings.HasSuffix(s.Name, "PUT") {
			client = s
		}
	}
	if client == nil {
		t.Fatalf("forwarded trace spans %v; want an upstream client span", names(fwd))
	}
	h.upstream.Lock()
	tps := h.upstream.traceparents
	h.upstream.Unlock()
	wantTP := fmt.Sprintf("00-%s-%s-01", fid, client.SpanContext.SpanID())
	if len(tps) != 1 || tps[0] != wantTP {
		t.Errorf("upstream traceparent %q; want [%s]", tps, wantTP)
	}
	if got := attrs(fwd[len(fwd)-1].Attributes); got[telemetry.AttrDecision].AsString() != "forwarded" {
		// The server span ends last.
		t.Errorf("last span of the forwarded trace %q decision %v; want forwarded", fwd[len(fwd)-1].Name, got[telemetry.AttrDecision].String())
	}

	// The refusal's log line carries the server span's ids.
	var line struct {
		Msg     string `json:"msg"`
		TraceID string `json:"trace_id"`
		SpanID  string `json:"span_id"`
		Token   int64  `json:"token"`
		Highest int64  `json:"highest"`
	}
	for _, l := range strings.Split(strings.TrimSpace(h.logs.String()), "\n") {
		if strings.Contains(l, fencegate.CodeStaleToken) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line.TraceID != staleTrace || line.SpanID != server.SpanContext.SpanID().String() || line.Token != 41 || line.Highest != 42 {
		t.Errorf("refusal log %+v; want trace_id %s span_id %s token 41 highest 42\n%s", line, staleTrace, server.SpanContext.SpanID(), h.logs)
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// The counters move by exactly one per request, by route and decision.
func TestMetricsPerDecision(t *testing.T) {
	for _, tracing := range []bool{false, true} {
		t.Run(fmt.Sprintf("tracing=%v", tracing), func(t *testing.T) {
			h := newHarness(t, tracing)
			m := h.tel.Metrics
			steps := []struct {
				path  string
				token int64
				want  int
			}{
				{"/orders/1", 5, 200}, // advance to 5
				{"/orders/1", 5, 200}, // same token: no advance
				{"/orders/1", 4, 409}, // stale
				{"/orders/1", 3, 409}, // stale
				{"/orders/2", 1, 200}, // advance
				{"/orders/1", 6, 200}, // advance
			}
			for _, s := range steps {
				if got := h.put(t, s.path, s.token, "", "v"); got != s.want {
					t.Fatalf("PUT %s token %d: %d; want %d", s.path, s.token, got, s.want)
				}
			}
			for _, c := range []struct {
				name string
				got  float64
				want float64
			}{
				{"requests forwarded", testutil.ToFloat64(m.Requests.WithLabelValues("orders", "forwarded")), 4},
				{"requests stale", testutil.ToFloat64(m.Requests.WithLabelValues("orders", "stale")), 2},
				{"stale refusals", testutil.ToFloat64(m.StaleRefusals.WithLabelValues("orders")), 2},
				{"advances", testutil.ToFloat64(m.Advances), 3},
				{"store errors", testutil.ToFloat64(m.StoreErrors.WithLabelValues("advance")), 0},
				{"fence checks", float64(histCount(t, h, "fencegate_fence_check_duration_seconds")), 6},
				{"upstream calls", float64(histCount(t, h, "fencegate_upstream_duration_seconds")), 4},
				{"highest token", gauge(t, h, "fencegate_fence_highest_token"), 6},
			} {
				if c.got != c.want {
					t.Errorf("%s = %v; want %v", c.name, c.got, c.want)
				}
			}
		})
	}
}

// A store failure fails the write closed, counts a store error and marks
// the server span as an error (a 5xx is the server's failure).
func TestStoreErrorFailsClosed(t *testing.T) {
	h := newHarness(t, true)
	h.store.mu.Lock()
	h.store.fail = errors.New("disk on fire")
	h.store.mu.Unlock()
	if got := h.put(t, "/orders/9", 3, "00-"+staleTrace+"-"+staleParent+"-01", "v"); got != http.StatusServiceUnavailable {
		t.Fatalf("status %d; want 503", got)
	}
	if n := len(h.rec.History()); n != 0 {
		t.Fatalf("upstream applied %d writes; want none", n)
	}
	m := h.tel.Metrics
	if got := testutil.ToFloat64(m.StoreErrors.WithLabelValues("load")); got != 1 {
		t.Errorf("store errors (load) = %v; want 1", got)
	}
	if got := testutil.ToFloat64(m.Requests.WithLabelValues("orders", fencegate.CodeFenceUnavailable)); got != 1 {
		t.Errorf("requests fence_unavailable = %v; want 1", got)
	}
	tid, _ := trace.TraceIDFromHex(staleTrace)
	var sawServer, sawStore bool
	for _, s := range spansOfTrace(h.ended(t), tid) {
		switch s.Name {
		case "fence.store.load":
			sawStore = s.Status.Code == codes.Error
		default:
			if s.SpanKind == trace.SpanKindServer {
				sawServer = s.Status.Code == codes.Error &&
					attrs(s.Attributes)[telemetry.AttrDecision].AsString() == fencegate.CodeFenceUnavailable
			}
		}
	}
	if !sawServer || !sawStore {
		t.Errorf("server span error with decision fence_unavailable: %v; store span error: %v", sawServer, sawStore)
	}
}

// A newer write that waits for an older one in flight (I2) is measured
// once in the drain histogram and leaves a fencing.drain event.
func TestDrainWaitObserved(t *testing.T) {
	h := newHarness(t, true)
	arrived, release := make(chan struct{}), make(chan struct{})
	h.rec.Delay = func(r *http.Request) {
		if r.Header.Get("Fencing-Token") == "1" {
			close(arrived)
			<-release
		}
	}
	first := make(chan int)
	go func() { first <- h.put(t, "/orders/3", 1, "", "old") }()
	<-arrived
	second := make(chan int)
	go func() { second <- h.put(t, "/orders/3", 2, "", "new") }()
	// Token 2 has advanced the fence and now waits for token 1's drain.
	for {
		st, err := h.fence.State(context.Background(), "/orders/3")
		if err != nil {
			t.Fatal(err)
		}
		if st.Highest == 2 && !st.Ready {
			break
		}
		waitBriefly()
	}
	close(release)
	if got := <-first; got != 200 {
		t.Fatalf("token 1: %d; want 200 (its body was sent whole before token 2 came)", got)
	}
	if got := <-second; got != 200 {
		t.Fatalf("token 2: %d; want 200", got)
	}
	if hist := h.rec.HistoryOf("/orders/3"); len(hist) != 2 || hist[1].Token != "2" {
		t.Fatalf("history %s; want token 1 then token 2", recorder.Summary(hist))
	}
	if got := histCount(t, h, "fencegate_fence_drain_wait_seconds"); got != 1 {
		t.Errorf("drain waits = %d; want 1", got)
	}
	var events int
	for _, s := range h.ended(t) {
		if s.Name != "fence.admit" {
			continue
		}
		for _, e := range s.Events {
			if e.Name == "fencing.drain" {
				events++
			}
		}
	}
	if events != 1 {
		t.Errorf("fencing.drain events = %d; want 1", events)
	}
}

// With tracing off nothing is wrapped and no span context exists.
func TestTracingOffIsNoop(t *testing.T) {
	tel, err := telemetry.New(context.Background(), config.Telemetry{}, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tel.Tracing() {
		t.Fatal("tracing on without an endpoint")
	}
	f := gateway.NewLocalFence(&memStore{}, gateway.LocalFenceOptions{})
	if got := tel.TraceFence(f); got != gateway.Fence(f) {
		t.Errorf("TraceFence wrapped the fence with tracing off: %T", got)
	}
	var sc trace.SpanContext
	h := tel.InstrumentHandler("gateway", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc = trace.SpanContextFromContext(r.Context())
		if a := telemetry.LogAttrs(r.Context()); a != nil {
			t.Errorf("LogAttrs = %v; want nil", a)
		}
	}))
	req := httptest.NewRequest("PUT", "/orders/1", nil)
	req.Header.Set("Traceparent", "00-"+staleTrace+"-"+staleParent+"-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if sc.IsValid() {
		t.Errorf("span context %v with tracing off", sc)
	}
}

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

func histCount(t *testing.T, h *harness, name string) uint64 {
	t.Helper()
	mfs, err := h.tel.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

func gauge(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	mfs, err := h.tel.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// waitBriefly paces a loop that polls for a state; no assertion depends on
// how long anything takes.
func waitBriefly() { time.Sleep(time.Millisecond) }

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
