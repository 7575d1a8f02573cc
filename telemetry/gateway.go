package telemetry

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/httprefusal"
)

// Span attributes set on the gateway's server span (by Observe) and on the
// fence span (by TraceFence). They are the contract operators search by,
// documented in docs/observability.md.
const (
	AttrDecision = attribute.Key("fencing.decision") // forwarded, passthrough, stale, or the refusal's code
	AttrResource = attribute.Key("fencing.resource") // fence key(s), comma-separated for multi-object writes
	AttrRoute    = attribute.Key("fencing.route")    // the route's name
	AttrToken    = attribute.Key("fencing.token")    // the token the request presented
	AttrHighest  = attribute.Key("fencing.highest")  // the highest token accepted for the resource
	AttrOwner    = attribute.Key("fencing.owner")    // the authenticated identity, when known
	AttrError    = attribute.Key("fencing.error")    // the refusal's error code (refusal event)
)

// EventRefused is the span event added to a server span whose request the
// gateway refused.
const EventRefused = "fencing.refused"

var _ gateway.Observer = (*Telemetry)(nil)

// Observe implements gateway.Observer: it counts the request and, when the
// request is traced, puts the fencing decision on the server span. Per the
// OpenTelemetry HTTP conventions a 4xx answer leaves a server span's status
// unset; a refusal is a correct decision, not an error, so it is made
// findable by its attributes and an event instead.
func (t *Telemetry) Observe(ctx context.Context, o *gateway.Outcome) {
	d := Decision(o.Decision)
	m := t.Metrics
	if o.ClientGone {
		m.ClientClosed.WithLabelValues(o.Route).Inc()
	}
	switch {
	case d == DecisionForwarded && o.Route != "":
		// The hot path: the route's series, looked up once.
		rm := t.route(o.Route)
		rm.forwarded.Inc()
		if o.Wait > 0 {
			rm.fenceCheck.Observe(o.Wait.Seconds())
		}
	default:
		m.Requests.WithLabelValues(o.Route, d).Inc()
		if d == DecisionStale {
			m.StaleRefusals.WithLabelValues(o.Route).Inc()
		}
		if o.Wait > 0 {
			m.FenceCheck.WithLabelValues(o.Route).Observe(o.Wait.Seconds())
		}
	}

	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, AttrDecision.String(d))
	if o.Route != "" {
		attrs = append(attrs, AttrRoute.String(o.Route))
	}
	if o.Resource != "" {
		attrs = append(attrs, AttrResource.String(o.Resource))
	}
	if o.Token != 0 {
		attrs = append(attrs, AttrToken.Int64(o.Token))
	}
	highest := o.Highest
	if highest == 0 && d == DecisionForwarded {
		// Admitted: the token is the resource's highest at that moment.
		highest = o.Token
	}
	if highest != 0 {
		attrs = append(attrs, AttrHighest.Int64(highest))
	}
	if o.Owner != "" {
		attrs = append(attrs, AttrOwner.String(o.Owner))
	}
	span.SetAttributes(attrs...)

	var e *fencegate.Error
	if errors.As(o.Err, &e) {
		ev := []attribute.KeyValue{AttrError.String(e.Code), attribute.String("message", e.Message)}
		if e.Token != 0 || o.Token != 0 {
			ev = append(ev, AttrToken.Int64(max(e.Token, o.Token)))
		}
		if e.Highest != 0 {
			ev = append(ev, AttrHighest.Int64(e.Highest))
		}
		span.AddEvent(EventRefused, trace.WithAttributes(ev...))
	}
}

// TraceFence returns f with a child span per fence call ("fence.admit",
// "fence.state", "fence.advance"), or f itself when tracing is off. The
// gateway sees only the Fence interface, so no gateway code changes.
func (t *Telemetry) TraceFence(f gateway.Fence) gateway.Fence {
	if !t.Tracing() {
		return f
	}
	tf := &tracedFence{f: f, tracer: t.tracer}
	if tree, ok := f.(gateway.TreeFence); ok {
		// The gateway discovers the ability on the fence it is given.
		return &tracedTreeFence{tracedFence: tf, tree: tree}
	}
	return tf
}

// tracedTreeFence is a tracedFence over a gateway.TreeFence.
type tracedTreeFence struct {
	*tracedFence
	tree gateway.TreeFence
}

func (f *tracedTreeFence) AdmitTree(ctx context.Context, w gateway.Write, above []string) (gateway.Permit, error) {
	return f.admit(ctx, w, func(ctx context.Context) (gateway.Permit, error) { return f.tree.AdmitTree(ctx, w, above) })
}

type tracedFence struct {
	f      gateway.Fence
	tracer trace.Tracer
}

// DecisionAdmitted is the fencing.decision of a fence span whose write was
// admitted (the server span says forwarded once the upstream answered).
const DecisionAdmitted = "admitted"

func (f *tracedFence) Admit(ctx context.Context, w gateway.Write) (gateway.Permit, error) {
	return f.admit(ctx, w, func(ctx context.Context) (gateway.Permit, error) { return f.f.Admit(ctx, w) })
}

// admit runs an admission of w in a fence.admit span.
func (f *tracedFence) admit(ctx context.Context, w gateway.Write, admit func(context.Context) (gateway.Permit, error)) (gateway.Permit, error) {
	ctx, span := f.tracer.Start(ctx, "fence.admit", trace.WithAttributes(
		AttrResource.String(w.Resource), AttrToken.Int64(w.Token)))
	defer span.End()
	p, err := admit(ctx)
	if err != nil {
		endFenceSpan(span, err)
		return nil, err
	}
	span.SetAttributes(AttrDecision.String(DecisionAdmitted), AttrHighest.Int64(w.Token))
	return p, nil
}

func (f *tracedFence) State(ctx context.Context, resource string) (fencegate.FenceState, error) {
	ctx, span := f.tracer.Start(ctx, "fence.state", trace.WithAttributes(AttrResource.String(resource)))
	defer span.End()
	st, err := f.f.State(ctx, resource)
	if err != nil {
		endFenceSpan(span, err)
		return st, err
	}
	span.SetAttributes(AttrHighest.Int64(st.Highest))
	return st, nil
}

func (f *tracedFence) Advance(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error) {
	ctx, span := f.tracer.Start(ctx, "fence.advance", trace.WithAttributes(
		AttrResource.String(resource), AttrToken.Int64(token)))
	defer span.End()
	st, err := f.f.Advance(ctx, resource, token, owner)
	if err != nil {
		endFenceSpan(span, err)
		return st, err
	}
	span.SetAttributes(AttrHighest.Int64(st.Highest))
	return st, nil
}

// endFenceSpan records a fence refusal. Stale and unknown tokens are
// decisions, not failures; the fence failing closed (store down, drain
// timeout) is an error of this operation.
func endFenceSpan(span trace.Span, err error) {
	var e *fencegate.Error
	if !errors.As(err, &e) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return
	}
	span.SetAttributes(AttrDecision.String(Decision(e.Code)))
	if e.Highest != 0 {
		span.SetAttributes(AttrHighest.Int64(e.Highest))
	}
	if httprefusal.Status(e) >= 500 {
		span.RecordError(err)
		span.SetStatus(codes.Error, e.Code)
	}
}

// Store returns s with metrics (latency, errors, advances, highest token)
// and, when tracing, a span per call. Wrap the store a LocalFence uses.
func (t *Telemetry) Store(s gateway.Store) gateway.Store {
	st := &store{s: s, m: t.Metrics}
	if t.Tracing() {
		st.tracer = t.tracer
	}
	return st
}

type store struct {
	s      gateway.Store
	m      *Metrics
	tracer trace.Tracer // nil: no spans
}

func (s *store) LoadFence(ctx context.Context, resource string) (fencegate.FenceState, error) {
	ctx, span := s.start(ctx, "fence.store.load", resource, 0)
	start := time.Now()
	st, err := s.s.LoadFence(ctx, resource)
	s.done(span, "load", start, err)
	if err == nil {
		s.m.observeHighest(st.Highest)
	}
	return st, err
}

func (s *store) AdvanceFence(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error) {
	ctx, span := s.start(ctx, "fence.store.advance", resource, token)
	start := time.Now()
	st, err := s.s.AdvanceFence(ctx, resource, token, owner)
	s.done(span, "advance", start, err)
	if err == nil {
		if st.Highest == token {
			s.m.Advances.Inc()
		}
		s.m.observeHighest(st.Highest)
	}
	return st, err
}

func (s *store) start(ctx context.Context, name, resource string, token int64) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{AttrResource.String(resource)}
	if token != 0 {
		attrs = append(attrs, AttrToken.Int64(token))
	}
	return s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

func (s *store) done(span trace.Span, op string, start time.Time, err error) {
	s.m.StoreDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.StoreErrors.WithLabelValues(op).Inc()
	}
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Drained is the LocalFence drain hook: it records how long a write waited
// for older in-flight writes and adds a span event to the fence span.
func (t *Telemetry) Drained(ctx context.Context, resource string, waited time.Duration, err error) {
	t.Metrics.DrainWait.Observe(waited.Seconds())
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		AttrResource.String(resource),
		attribute.Float64("fencing.drain_wait_seconds", waited.Seconds()),
	}
	if err != nil {
		attrs = append(attrs, attribute.String("fencing.drain_error", err.Error()))
	}
	span.AddEvent("fencing.drain", trace.WithAttributes(attrs...))
}

type ctxKey struct{}

// InstrumentHandler wraps h (the gateway, the coordinator's API) so that
// upstream calls made while serving find this Telemetry (Transport), and,
// when tracing, with a server span per request following the OpenTelemetry
// HTTP semantic conventions, continuing the caller's W3C trace context.
//
// A server whose BaseContext is WithContext's serves its requests without
// the copy of each that adding t to its context takes.
func (t *Telemetry) InstrumentHandler(server string, h http.Handler) http.Handler {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fromContext(r.Context()) != t {
			r = r.WithContext(t.WithContext(r.Context()))
		}
		h.ServeHTTP(w, r)
	})
	if !t.Tracing() {
		return inner
	}
	return otelhttp.NewHandler(inner, server,
		otelhttp.WithTracerProvider(t.tp),
		otelhttp.WithPropagators(t.propagator),
		// Metrics are Prometheus's job here, without the global provider.
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
	)
}

// WithContext returns ctx carrying t, as the requests InstrumentHandler
// serves: for an http.Server's BaseContext.
func (t *Telemetry) WithContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

func fromContext(ctx context.Context) *Telemetry {
	t, _ := ctx.Value(ctxKey{}).(*Telemetry)
	return t
}

// Transport instruments a transport for the upstream calls of the route
// named route: the upstream latency metric of that route and, when the
// request is traced, a client span whose W3C trace context is sent
// upstream. It finds the Telemetry through the request context
// (InstrumentHandler: the server's, not the request's), so one transport
// serves any server; without it, it is base.
func Transport(base http.RoundTripper, route string) http.RoundTripper {
	return &transport{
		base:  base,
		route: route,
		// No tracer provider: otelhttp takes the one of the span in the
		// request context, the gateway's server span.
		traced: otelhttp.NewTransport(base,
			otelhttp.WithPropagators(propagation.TraceContext{}),
			otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		),
	}
}

type transport struct {
	base   http.RoundTripper
	route  string // the route whose calls it carries
	traced http.RoundTripper
}

func (tr *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	t := fromContext(r.Context())
	if t == nil {
		return tr.base.RoundTrip(r)
	}
	rt := tr.base
	if t.Tracing() {
		rt = tr.traced
	}
	start := time.Now()
	resp, err := rt.RoundTrip(r)
	rm := t.route(tr.route)
	upstream := rm.upstreamResponse
	if err != nil {
		upstream = rm.upstreamError
	}
	upstream.Observe(time.Since(start).Seconds())
	return resp, err
}

// routeMetrics are a route's series of the forward path, looked up once:
// WithLabelValues hashes the labels and takes a lock on every call.
// Routes are never removed from the metrics, so the series stay valid.
type routeMetrics struct {
	forwarded                       prometheus.Counter
	fenceCheck                      prometheus.Observer
	upstreamResponse, upstreamError prometheus.Observer
}

// route returns the series of the route named name.
func (t *Telemetry) route(name string) *routeMetrics {
	if rm, ok := t.routes.Load(name); ok {
		return rm.(*routeMetrics)
	}
	m := t.Metrics
	rm, _ := t.routes.LoadOrStore(name, &routeMetrics{
		forwarded:        m.Requests.WithLabelValues(name, DecisionForwarded),
		fenceCheck:       m.FenceCheck.WithLabelValues(name),
		upstreamResponse: m.Upstream.WithLabelValues(name, "response"),
		upstreamError:    m.Upstream.WithLabelValues(name, "error"),
	})
	return rm.(*routeMetrics)
}

// CloseIdleConnections passes on to the base transport.
func (tr *transport) CloseIdleConnections() {
	if c, ok := tr.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
