// Package telemetry is fencegate's observability: OpenTelemetry traces
// exported over OTLP/HTTP, Prometheus metrics for the admin listener, and the
// trace ids that refusal logs carry.
//
// Metrics are always on: they cost a few atomic adds per request. Tracing is
// on only when an OTLP endpoint is set (Options.OTLPEndpoint, the file's
// telemetry.otlp_endpoint); when it is off, nothing is wrapped (no HTTP
// instrumentation, no fence decorator), so it costs nothing.
//
// Nothing here touches OpenTelemetry's global providers: the tracer provider
// and the W3C trace-context propagator are handed to each instrumentation
// explicitly, so two servers in one process (tests) do not share state.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of fencegate's own spans.
const ScopeName = "github.com/fencegate/fencegate"

// Telemetry is one process's metrics registry and tracer provider.
type Telemetry struct {
	// Registry holds every fencegate metric (and the Go runtime and process
	// collectors); Handler serves it.
	Registry *prometheus.Registry
	// Metrics are the collectors the instrumentation updates.
	Metrics *Metrics
	// Ops are build info, reload results and in-flight writes (ops.go).
	Ops *OpsMetrics
	// Build is the version build_info reports (Options.Build).
	Build BuildInfo

	tp         trace.TracerProvider
	sdk        *sdktrace.TracerProvider // nil when tracing is off
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator

	coordOnce sync.Once
	coord     *CoordinatorMetrics // registered by the first coordinator hook

	routes sync.Map // route name → *routeMetrics

	recovery recoveryMetrics // recovery.go
}

// Options tune New.
type Options struct {
	// OTLPEndpoint is the http(s) URL of an OTLP/HTTP trace receiver;
	// empty: tracing off.
	OTLPEndpoint string
	// ServiceName is the service.name of spans. Empty: fencegate.
	ServiceName string
	// SpanExporter, if set, replaces the OTLP exporter (tests). Tracing is
	// then on whatever the endpoint says.
	SpanExporter sdktrace.SpanExporter
	// Build is the binary's version for the build_info gauge (the
	// command's ReadBuildInfo with its -ldflags values). Zero:
	// ReadBuildInfo(Linker{}), the Go build information only.
	Build BuildInfo
}

// New builds the telemetry of a process. With an empty OTLPEndpoint (and
// no SpanExporter) tracing is off and every tracing hook of this package is
// a no-op.
func New(ctx context.Context, opts Options) (*Telemetry, error) {
	t := &Telemetry{
		Registry: prometheus.NewRegistry(),
		// Only W3C trace context: it is what workers, the coordinator
		// client and upstreams are documented to send and receive.
		propagator: propagation.TraceContext{},
		tp:         noop.NewTracerProvider(),
	}
	t.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	t.Metrics = newMetrics(t.Registry)
	t.Build = opts.Build
	if t.Build == (BuildInfo{}) {
		t.Build = ReadBuildInfo(Linker{})
	}
	t.Ops = newOpsMetrics(t.Registry, t.Build)

	exp := opts.SpanExporter
	if exp == nil && opts.OTLPEndpoint != "" {
		u, err := ParseEndpoint(opts.OTLPEndpoint)
		if err != nil {
			return nil, fmt.Errorf("telemetry.otlp_endpoint: %w", err)
		}
		exp, err = otlptracehttp.New(ctx,
			otlptracehttp.WithEndpointURL(u),
			otlptracehttp.WithTimeout(10*time.Second),
		)
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
		}
	}
	if exp == nil {
		t.tracer = t.tp.Tracer(ScopeName)
		return t, nil
	}
	name := opts.ServiceName
	if name == "" {
		name = "fencegate"
	}
	res, err := sdkresource.Merge(sdkresource.Default(),
		sdkresource.NewSchemaless(attribute.String("service.name", name)))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	t.sdk = sdktrace.NewTracerProvider(
		// Every request is sampled (unless the caller's trace context says
		// it is not): the point is that every refusal can be found. The
		// batch processor bounds memory by dropping spans when its queue is
		// full, never by blocking requests.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
	)
	t.tp = t.sdk
	t.tracer = t.tp.Tracer(ScopeName)
	return t, nil
}

// ParseEndpoint checks an OTLP/HTTP endpoint: an http or https URL whose
// path, if empty, becomes /v1/traces.
func ParseEndpoint(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an http(s) URL such as http://127.0.0.1:4318", s)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// Tracing reports whether spans are recorded and exported.
func (t *Telemetry) Tracing() bool { return t.sdk != nil }

// TracerProvider returns the provider spans are made with (a no-op one when
// tracing is off).
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tp }

// Tracer returns fencegate's tracer.
func (t *Telemetry) Tracer() trace.Tracer { return t.tracer }

// Propagator returns the W3C trace-context propagator.
func (t *Telemetry) Propagator() propagation.TextMapPropagator { return t.propagator }

// Handler serves the metrics in the Prometheus exposition format.
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.Registry, promhttp.HandlerOpts{Registry: t.Registry})
}

// Shutdown flushes buffered spans to the exporter and stops it.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	if err := t.sdk.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("telemetry shutdown: %w", err)
	}
	return nil
}

// Close is Shutdown bounded by five seconds, so that an unreachable
// collector cannot hold up the process's exit.
func (t *Telemetry) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return t.Shutdown(ctx)
}

// LogAttrs returns trace_id and span_id of the span in ctx, for log lines
// (the gateway.LogContext hook). It returns nil without a valid span.
func LogAttrs(ctx context.Context) []slog.Attr {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return []slog.Attr{
		slog.String("trace_id", sc.TraceID().String()),
		slog.String("span_id", sc.SpanID().String()),
	}
}
