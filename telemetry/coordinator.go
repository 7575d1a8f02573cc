package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/gateway"
)

// Lease attributes, beside fencing.resource, fencing.owner and
// fencing.token, on the coordinator's server spans.
const (
	AttrLeaseFresh     = attribute.Key("lease.fresh")      // a new token was issued (false: the holder's retry)
	AttrLeaseExpiresAt = attribute.Key("lease.expires_at") // RFC 3339, by the store's clock
	AttrLeaseHolder    = attribute.Key("lease.holder")     // on lease.held events: who holds it
)

// CoordinatorMetrics are the lease service's collectors, registered when
// the coordinator is instrumented.
type CoordinatorMetrics struct {
	AcquireWait  *prometheus.HistogramVec // outcome
	TokensIssued prometheus.Counter
	Renewals     *prometheus.CounterVec // outcome
	LeasesLost   prometheus.Counter
	Releases     *prometheus.CounterVec // released
	StoreErrors  *prometheus.CounterVec // op
	lastToken    atomic.Int64
}

// Coordinator returns the coordinator metrics, registering them on first use.
func (t *Telemetry) Coordinator() *CoordinatorMetrics {
	t.coordOnce.Do(func() {
		m := &CoordinatorMetrics{
			AcquireWait: histogramVec("coordinator", "acquire_duration_seconds",
				"Acquire calls from request to answer, including the wait for a held lease (outcome: acquired, held, invalid, unavailable).",
				[]float64{.001, .005, .01, .05, .1, .5, 1, 2.5, 5, 10, 30, 60}, "outcome"),
			TokensIssued: counter("coordinator", "tokens_issued_total",
				"Fencing tokens issued (new leases; a holder's retried acquire keeps its token)."),
			Renewals: counterVec("coordinator", "renewals_total",
				"Lease renewals (outcome: renewed, lost, error).",
				"outcome"),
			LeasesLost: counter("coordinator", "leases_lost_total",
				"Renewals answered lease_lost: the worker's lease had expired or a newer one was issued."),
			Releases: counterVec("coordinator", "releases_total",
				"Release calls (released: true if the named lease was current and ended, false if it was not).",
				"released"),
			StoreErrors: counterVec("coordinator", "store_errors_total",
				"Lease store calls that failed (answered 503).",
				"op"),
		}
		t.Registry.MustRegister(m.AcquireWait, m.TokensIssued, m.Renewals, m.LeasesLost, m.Releases, m.StoreErrors,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace: "fencegate", Subsystem: "coordinator", Name: "last_token_issued",
				Help: "The highest fencing token this process issued since it started.",
			}, func() float64 { return float64(m.lastToken.Load()) }))
		t.coord = m
	})
	return t.coord
}

// LeaseBackend returns b with coordinator metrics and, when tracing, a
// child span per store call; it also puts the lease on the request's server
// span (resource, owner, token, holder events while waiting), and logs one
// line per lease change (acquired with a new token, released, lost) to log
// with the trace ids. A backend that reports releases
// (coordinator.ReleaseWatcher) still does.
func (t *Telemetry) LeaseBackend(b coordinator.Backend, log *slog.Logger) coordinator.Backend {
	if log == nil {
		log = slog.Default()
	}
	lb := &leaseBackend{b: b, m: t.Coordinator(), log: log}
	if c, ok := b.(activeCounter); ok {
		t.registerActiveLeases(c, log)
	}
	if t.Tracing() {
		lb.tracer = t.tracer
	}
	if w, ok := b.(coordinator.ReleaseWatcher); ok {
		return &watchingLeaseBackend{leaseBackend: lb, w: w}
	}
	return lb
}

// activeCounter is implemented by lease backends that can count the leases
// live now (both of fencegate's do).
type activeCounter interface {
	Active(ctx context.Context) (int, error)
}

// registerActiveLeases exports the number of live leases, counted by the
// store when Prometheus scrapes (a lease ends by expiry too, which no
// request would report). A failed count reports -1 and logs.
func (t *Telemetry) registerActiveLeases(c activeCounter, log *slog.Logger) {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "fencegate", Subsystem: "coordinator", Name: "active_leases",
		Help: "Leases live now by the store's clock (counted at scrape time; -1 if the store could not be read).",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := c.Active(ctx)
		if err != nil {
			log.Warn("count active leases", "err", err.Error())
			return -1
		}
		return float64(n)
	})
	var are prometheus.AlreadyRegisteredError
	if err := t.Registry.Register(g); err != nil && !errors.As(err, &are) {
		log.Warn("register active_leases", "err", err.Error())
	}
}

type leaseBackend struct {
	b      coordinator.Backend
	m      *CoordinatorMetrics
	log    *slog.Logger
	tracer trace.Tracer // nil: no spans
}

// logChange logs a lease change at info level with the request's trace ids.
func (b *leaseBackend) logChange(ctx context.Context, msg, resource, owner string, token int64, extra ...slog.Attr) {
	attrs := append([]slog.Attr{slog.String("resource", resource), slog.String("owner", owner), slog.Int64("token", token)}, extra...)
	attrs = append(attrs, LogAttrs(ctx)...)
	b.log.LogAttrs(ctx, slog.LevelInfo, msg, attrs...)
}

type watchingLeaseBackend struct {
	*leaseBackend
	w coordinator.ReleaseWatcher
}

func (b *watchingLeaseBackend) WatchReleases(ctx context.Context, released func(resource string)) error {
	return b.w.WatchReleases(ctx, released)
}

// start returns the server span (to annotate) and a child span for the
// store call (nil without tracing).
func (b *leaseBackend) start(ctx context.Context, name, resource, owner string, token int64) (context.Context, trace.Span, trace.Span) {
	if b.tracer == nil {
		return ctx, nil, nil
	}
	server := trace.SpanFromContext(ctx)
	attrs := []attribute.KeyValue{AttrResource.String(resource)}
	if owner != "" {
		attrs = append(attrs, AttrOwner.String(owner))
	}
	if token != 0 {
		attrs = append(attrs, AttrToken.Int64(token))
	}
	server.SetAttributes(attrs...)
	ctx, span := b.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, server, span
}

func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (b *leaseBackend) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (coordinator.Lease, bool, error) {
	ctx, server, span := b.start(ctx, "lease.store.acquire", resource, owner, 0)
	l, fresh, err := b.b.Acquire(ctx, resource, owner, ttl)
	switch {
	case err == nil:
		if fresh {
			b.logChange(ctx, "lease acquired", resource, owner, l.Token, slog.Time("expires_at", l.ExpiresAt))
			b.m.TokensIssued.Inc()
			for {
				cur := b.m.lastToken.Load()
				if l.Token <= cur || b.m.lastToken.CompareAndSwap(cur, l.Token) {
					break
				}
			}
		}
		if server != nil {
			a := []attribute.KeyValue{AttrToken.Int64(l.Token), AttrLeaseFresh.Bool(fresh),
				AttrLeaseExpiresAt.String(l.ExpiresAt.UTC().Format(time.RFC3339Nano))}
			server.SetAttributes(a...)
			span.SetAttributes(a...)
		}
		endSpan(span, nil)
	case errors.Is(err, coordinator.ErrHeld):
		if server != nil {
			// One event per attempt: the trace shows whom the worker waited
			// for and for how long.
			server.AddEvent("lease.held", trace.WithAttributes(
				AttrLeaseHolder.String(l.Owner), AttrToken.Int64(l.Token),
				attribute.Float64("lease.remaining_seconds", l.Remaining.Seconds())))
		}
		endSpan(span, nil)
	default:
		b.m.StoreErrors.WithLabelValues("acquire").Inc()
		endSpan(span, err)
	}
	return l, fresh, err
}

func (b *leaseBackend) Renew(ctx context.Context, resource, owner string, token int64, ttl time.Duration) (coordinator.Lease, error) {
	ctx, server, span := b.start(ctx, "lease.store.renew", resource, owner, token)
	l, err := b.b.Renew(ctx, resource, owner, token, ttl)
	switch {
	case err == nil:
		b.m.Renewals.WithLabelValues("renewed").Inc()
		endSpan(span, nil)
	case errors.Is(err, coordinator.ErrLost):
		b.m.Renewals.WithLabelValues("lost").Inc()
		b.m.LeasesLost.Inc()
		b.logChange(ctx, "lease lost", resource, owner, token)
		if server != nil {
			server.AddEvent("lease.lost")
		}
		endSpan(span, nil)
	default:
		b.m.Renewals.WithLabelValues("error").Inc()
		b.m.StoreErrors.WithLabelValues("renew").Inc()
		endSpan(span, err)
	}
	return l, err
}

func (b *leaseBackend) Release(ctx context.Context, resource, owner string, token int64) (bool, error) {
	ctx, _, span := b.start(ctx, "lease.store.release", resource, owner, token)
	ok, err := b.b.Release(ctx, resource, owner, token)
	if err != nil {
		b.m.StoreErrors.WithLabelValues("release").Inc()
	} else {
		b.m.Releases.WithLabelValues(strconv.FormatBool(ok)).Inc()
		if ok {
			b.logChange(ctx, "lease released", resource, owner, token)
		}
		if span != nil {
			span.SetAttributes(attribute.Bool("lease.released", ok))
		}
	}
	endSpan(span, err)
	return ok, err
}

func (b *leaseBackend) Lease(ctx context.Context, resource string) (coordinator.Lease, error) {
	ctx, _, span := b.start(ctx, "lease.store.show", resource, "", 0)
	l, err := b.b.Lease(ctx, resource)
	if err != nil {
		b.m.StoreErrors.WithLabelValues("show").Inc()
	}
	endSpan(span, err)
	return l, err
}

// coordinatorRoutes are the API's endpoints, the only paths that name a
// span or a metric (any other path is a 404, and would be unbounded).
var coordinatorRoutes = map[string]bool{
	"/v1/leases/acquire": true, "/v1/leases/renew": true, "/v1/leases/release": true, "/v1/leases": true,
}

// InstrumentCoordinator wraps the coordinator's HTTP API: the acquire
// duration histogram (the wait a worker sees), and, when tracing, a server
// span per call named after its endpoint, continuing the worker's W3C trace
// context so that its lease and its writes can share one trace.
func (t *Telemetry) InstrumentCoordinator(h http.Handler) http.Handler {
	m := t.Coordinator()
	timed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/leases/acquire" {
			h.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sw := &gateway.StatusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		m.AcquireWait.WithLabelValues(acquireOutcome(sw.Status)).Observe(time.Since(start).Seconds())
	})
	if !t.Tracing() {
		return timed
	}
	return otelhttp.NewHandler(timed, "coordinator",
		otelhttp.WithTracerProvider(t.tp),
		otelhttp.WithPropagators(t.propagator),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if coordinatorRoutes[r.URL.Path] {
				return r.Method + " " + r.URL.Path
			}
			return r.Method
		}),
	)
}

func acquireOutcome(status int) string {
	switch {
	case status == 0 || status == http.StatusOK:
		return "acquired"
	case status == http.StatusConflict:
		return "held"
	case status >= 500:
		return "unavailable"
	}
	return "invalid"
}
