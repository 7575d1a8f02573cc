package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/fencegate/fencegate/internal/testenv"
)

// jaegerYAML is a gateway and coordinator exporting traces to endpoint.
func jaegerYAML(upstream, endpoint string) string {
	return metricsYAML(upstream) + fmt.Sprintf("telemetry: {otlp_endpoint: %q, service_name: fencegate}\n", endpoint)
}

// A zombie worker's refused write is found in a real Jaeger by searching
// fencing.decision=stale, in one trace with the worker's own span and the
// coordinator's acquire span that issued its (now old) token, because the
// worker propagated its W3C trace context to both.
func TestJaegerStaleRefusalTrace(t *testing.T) {
	j := testenv.Jaeger(t)
	rec, up := newUpstream(t)
	// Export within ~100ms rather than the SDK's default 5s.
	p := startFencegate(t, jaegerYAML(up, j.OTLPHTTP), "OTEL_BSP_SCHEDULE_DELAY=100")

	// The workers' side: their own tracer provider, and the W3C
	// propagator the coordinator client injects with.
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(j.OTLPHTTP+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(sdkresource.NewSchemaless(attribute.String("service.name", "e2e-worker"))))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })

	ctx := context.Background()
	ctxA, spanA := tp.Tracer("e2e").Start(ctx, "worker A job")
	a := &client.Client{URL: p.URL("coordinator"), Owner: "worker-A"}
	b := &client.Client{URL: p.URL("coordinator"), Owner: "worker-B"}

	// A takes a short lease and then "pauses" (renews nothing).
	la, err := a.AcquireOnce(ctxA, "/orders/7", client.Options{TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// B waits at the coordinator until A's lease expires, then writes.
	lb, err := b.AcquireOnce(ctx, "/orders/7", client.Options{TTL: time.Minute, Wait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token <= la.Token {
		t.Fatalf("B's token %d is not newer than A's %d", lb.Token, la.Token)
	}
	if st, body := tracedWrite(t, ctx, p.URL("gateway")+"/orders/7", lb.Token, "B"); st != 200 {
		t.Fatalf("B's write: %d %s", st, body)
	}
	// A resumes and writes with its old token.
	st, body := tracedWrite(t, ctxA, p.URL("gateway")+"/orders/7", la.Token, "A")
	if st != http.StatusConflict || !strings.Contains(body, "stale_fencing_token") {
		t.Fatalf("A's late write: %d %s; want 409 stale_fencing_token", st, body)
	}
	spanA.End()
	if got, want := applied(rec, "/orders/7"), fmt.Sprintf("PUT B@%d", lb.Token); got != want {
		t.Fatalf("upstream applied %q; want %q", got, want)
	}

	// Find it the way an operator would.
	traceID := spanA.SpanContext().TraceID().String()
	q := url.Values{"service": {"fencegate"}, "tags": {`{"fencing.decision":"stale"}`}, "lookback": {"1h"}, "limit": {"20"}}
	var tr jaegerTrace
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The acquire span is exported by its own batch; wait for both.
		if tr = findTrace(t, j.QueryURL+"/api/traces?"+q.Encode(), traceID); tr.find("POST /v1/leases/acquire") != nil && tr.find("fence.admit") != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s with a stale refusal and the acquire not in Jaeger after 30s; found %v\nfencegate log:\n%s", traceID, tr.names(), p.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}

	t.Logf("trace %s: %v", traceID, tr.names())
	server := tr.findTag("span.kind", "server", "fencing.decision", "stale")
	if server == nil {
		t.Fatalf("no server span with fencing.decision=stale in %v", tr.names())
	}
	for k, want := range map[string]string{
		"fencing.resource":          "/orders/7",
		"fencing.route":             "orders",
		"fencing.token":             fmt.Sprint(la.Token),
		"fencing.highest":           fmt.Sprint(lb.Token),
		"http.response.status_code": "409",
		"http.request.method":       "PUT",
	} {
		if got := server.tag(k); got != want {
			t.Errorf("server span %s = %q; want %q", k, got, want)
		}
	}
	if got := server.tag("otel.status_code"); got == "ERROR" || server.tag("error") == "true" {
		t.Errorf("refusal server span marked as an error (otel.status_code %q)", got)
	}
	if !server.hasLog("fencing.refused") {
		t.Errorf("server span has no fencing.refused event: %+v", server.Logs)
	}
	if tr.service(server) != "fencegate" {
		t.Errorf("server span service %q; want fencegate", tr.service(server))
	}
	// On a hierarchical route the write is also admitted on each key
	// above its own (as a member, decision admitted); the refusal is its
	// own key's admission.
	var fence *jaegerSpan
	for i := range tr.Spans {
		if tr.Spans[i].OperationName == "fence.admit" && tr.Spans[i].tag("fencing.decision") == "stale" {
			fence = &tr.Spans[i]
		}
	}
	if fence == nil || fence.parent() != server.SpanID {
		t.Errorf("no fence.admit span with decision stale under the server span %s in %v", server.SpanID, tr.names())
	}
	acq := tr.find("POST /v1/leases/acquire")
	if acq.tag("fencing.token") != fmt.Sprint(la.Token) || acq.tag("fencing.owner") != "worker-A" || acq.tag("lease.fresh") != "true" {
		t.Errorf("acquire span tags %v; want token %d owner worker-A fresh", acq.Tags, la.Token)
	}
	worker := tr.find("worker A job")
	if worker == nil || acq.parent() != worker.SpanID || server.parent() != worker.SpanID {
		t.Errorf("acquire (parent %s) and refused write (parent %s) are not children of the worker's span %v",
			acq.parent(), server.parent(), worker)
	}
	// The refusal log line names the same trace.
	waitFor(t, func() bool { return strings.Contains(p.Log(), `"trace_id":"`+traceID+`"`) })
}

// tracedWrite PUTs body with token, carrying ctx's trace context.
func tracedWrite(t *testing.T, ctx context.Context, u string, token int64, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Fencing-Token", fmt.Sprint(token))
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Jaeger's query API (/api/traces) answer, the parts the test reads.
type jaegerTrace struct {
	TraceID   string       `json:"traceID"`
	Spans     []jaegerSpan `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	ProcessID     string `json:"processID"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []jaegerKV `json:"tags"`
	Logs []struct {
		Fields []jaegerKV `json:"fields"`
	} `json:"logs"`
}

type jaegerKV struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

func findTrace(t *testing.T, u, traceID string) jaegerTrace {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data []jaegerTrace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("jaeger %s: %v", u, err)
	}
	for _, tr := range out.Data {
		if tr.TraceID == traceID {
			return tr
		}
	}
	return jaegerTrace{}
}

func (tr jaegerTrace) find(op string) *jaegerSpan {
	for i := range tr.Spans {
		if tr.Spans[i].OperationName == op {
			return &tr.Spans[i]
		}
	}
	return nil
}

// findTag returns the span whose tags include every key/value pair given.
func (tr jaegerTrace) findTag(kv ...string) *jaegerSpan {
spans:
	for i := range tr.Spans {
		for j := 0; j+1 < len(kv); j += 2 {
			if tr.Spans[i].tag(kv[j]) != kv[j+1] {
				continue spans
			}
		}
		return &tr.Spans[i]
	}
	return nil
}

func (tr jaegerTrace) names() []string {
	var out []string
	for _, s := range tr.Spans {
		out = append(out, tr.service(&s)+":"+s.OperationName)
	}
	return out
}

func (tr jaegerTrace) service(s *jaegerSpan) string { return tr.Processes[s.ProcessID].ServiceName }

func (s *jaegerSpan) tag(k string) string {
	if s == nil {
		return ""
	}
	for _, kv := range s.Tags {
		if kv.Key == k {
			return fmt.Sprint(kv.Value)
		}
	}
	return ""
}

func (s *jaegerSpan) parent() string {
	if s == nil {
		return ""
	}
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

func (s *jaegerSpan) hasLog(event string) bool {
	for _, l := range s.Logs {
		for _, f := range l.Fields {
			if f.Key == "event" && f.Value == event {
				return true
			}
		}
	}
	return false
}
