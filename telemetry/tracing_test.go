package telemetry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/telemetry"
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

// With tracing off nothing is wrapped and no span context exists.
func TestTracingOffIsNoop(t *testing.T) {
	tel, err := telemetry.New(context.Background(), telemetry.Options{})
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

// treeFence is a fence with the optional gateway.TreeFence ability.
type treeFence struct{ gateway.Fence }

func (treeFence) AdmitTree(context.Context, gateway.Write, []string) (gateway.Permit, error) {
	return nil, nil
}

// TestTraceFenceKeepsTreeFence: the traced fence keeps the TreeFence
// ability of the fence it wraps (the shared fence's hierarchical routes
// need it), and does not invent it.
func TestTraceFenceKeepsTreeFence(t *testing.T) {
	h := newHarness(t, true)
	if _, ok := h.tel.TraceFence(treeFence{h.fence}).(gateway.TreeFence); !ok {
		t.Error("TraceFence dropped the TreeFence ability")
	}
	if _, ok := h.tel.TraceFence(h.fence).(gateway.TreeFence); ok {
		t.Error("TraceFence made a LocalFence a TreeFence")
	}
}
