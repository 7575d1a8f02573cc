// Package gateway is fencegate's fencing reverse proxy: it matches a route,
// derives the resource key, checks the request's fencing token against the
// Fence and streams admitted requests to the route's Upstream.
package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/resource"
)

// Gateway is an http.Handler that fences writes. Routes can be swapped at any
// time (SetRoutes) without disturbing requests in flight.
type Gateway struct {
	fence       Fence
	tokenHeader string
	log         *slog.Logger
	logContext  func(ctx context.Context) []slog.Attr
	routes      atomic.Pointer[[]*Route]
	// Observer, if set, is told the outcome of every request (metrics,
	// tracing). It must be set before serving.
	Observer Observer
}

// Options configure a Gateway.
type Options struct {
	// TokenHeader is the header carrying the token. Empty means Fencing-Token.
	TokenHeader string
	// Logger receives one line per refusal (and per forward at debug level).
	// Nil means slog.Default().
	Logger *slog.Logger
	// LogContext, if set, adds attributes of the request's context (the
	// trace_id and span_id) to refusal logs. Nil adds none.
	LogContext func(ctx context.Context) []slog.Attr
}

// New returns a gateway over fence with no routes.
func New(fence Fence, opts Options) *Gateway {
	if opts.TokenHeader == "" {
		opts.TokenHeader = fencegate.DefaultTokenHeader
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	g := &Gateway{
		fence:       fence,
		tokenHeader: textproto.CanonicalMIMEHeaderKey(opts.TokenHeader),
		log:         opts.Logger,
		logContext:  opts.LogContext,
	}
	g.SetRoutes(nil)
	return g
}

// Fence returns the gateway's fence (for the admin API).
func (g *Gateway) Fence() Fence { return g.fence }

// SetRoutes replaces the route table; routes are tried in order.
func (g *Gateway) SetRoutes(routes []*Route) {
	rs := slices.Clone(routes)
	g.routes.Store(&rs)
}

// Routes returns the current route table.
func (g *Gateway) Routes() []*Route { return *g.routes.Load() }

// Outcome describes how one request ended, for an Observer.
type Outcome struct {
	Route    string // "" when no route matched
	Method   string
	Resource string
	Token    int64
	Highest  int64
	Owner    string
	// Decision is "forwarded" (a fenced write admitted), "passthrough" (not
	// fenced), or the refusal's error code (stale_fencing_token, ...).
	Decision string
	Status   int           // the status sent to the client, when known
	Wait     time.Duration // time spent in the fence (check, advance, drain)
	Duration time.Duration // whole request
	Err      error
}

// Observer is told about every request. Implementations must be fast and
// safe for concurrent use.
type Observer interface {
	Observe(ctx context.Context, o *Outcome)
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	o := &Outcome{Method: r.Method}
	defer func() {
		o.Duration = time.Since(start)
		if g.Observer != nil {
			g.Observer.Observe(r.Context(), o)
		}
	}()

	escaped := r.URL.EscapedPath()
	segs, err := resource.CleanPath(escaped)
	if err != nil {
		// The raw path only chooses the refusal's dialect (S3 clients expect
		// XML); nothing is forwarded.
		rt := g.match(canonicalHost(r.Host), escaped, r.Method)
		g.refuse(w, r, rt, o, &fencegate.Error{Status: http.StatusBadRequest, Code: fencegate.CodeInvalidResource,
			Message: "refused path: " + err.Error()})
		return
	}
	cpath := resource.JoinPath(segs, len(segs) > 0 && strings.HasSuffix(escaped, "/"))
	host := canonicalHost(r.Host)
	// The method is checked before routing: match.methods and the fenced
	// set compare it exactly, so a spelling the upstream folds must not
	// reach either. The route found without the method only picks the
	// refusal's dialect.
	if ref := checkMethod(r); ref != nil {
		g.refuse(w, r, g.match(host, cpath, ""), o, ref)
		return
	}
	rt := g.match(host, cpath, r.Method)
	if rt == nil {
		g.refuse(w, r, nil, o, fencegate.Errorf(http.StatusNotFound, fencegate.CodeNoRoute,
			"no route for %s %s%s", r.Method, host, cpath))
		return
	}
	o.Route = rt.Name
	if ref := checkHeaders(r, g.decidedHeaders(rt)); ref != nil {
		g.refuse(w, r, rt, o, ref)
		return
	}
	r, id, ok := g.authenticate(w, r, rt, o)
	if !ok {
		return
	}

	var insp Inspection
	if rt.inspector != nil {
		if insp, err = rt.inspector.Inspect(r); err != nil {
			g.refuse(w, r, rt, o, asRefusal(err))
			return
		}
		o.Owner = insp.Owner
	}
	if id.Owner != "" {
		insp.Owner, o.Owner = id.Owner, id.Owner
	}
	req := &Request{Route: rt, Path: cpath, Owner: insp.Owner, Inspected: insp.State}

	if !rt.fences(r.Method) {
		o.Decision = "passthrough"
		g.forward(w, r, rt, req, o, nil)
		return
	}

	token, perr := fencegate.ParseToken(g.tokenHeader, r.Header.Values(g.tokenHeader))
	if perr != nil {
		g.refuse(w, r, rt, o, perr)
		return
	}
	req.Token, o.Token = token, token

	keys, kerr := rt.resources(host, cpath, segs, r.Header, insp)
	if kerr != nil {
		g.refuse(w, r, rt, o, kerr)
		return
	}
	req.Resources = keys
	o.Resource = strings.Join(keys, ",")
	if ref := authorize(id, keys); ref != nil {
		g.refuse(w, r, rt, o, ref)
		return
	}

	if rt.maxBody > 0 && r.ContentLength > rt.maxBody {
		g.refuse(w, r, rt, o, tooLarge(rt.maxBody))
		return
	}
	if ref := rt.writes.acquire(); ref != nil {
		g.refuse(w, r, rt, o, ref)
		return
	}
	defer rt.writes.release()
	rt.inflight.Add(1)
	defer rt.inflight.Add(-1)

	// Admit every resource the request writes, in sorted order so that two
	// multi-resource requests cannot wait on each other.
	body := &sentBody{rc: r.Body, want: r.ContentLength}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		body.done.Store(true)
	}
	ctx, abort := context.WithCancelCause(r.Context())
	defer abort(nil)
	fenceStart := time.Now()
	permits := make([]Permit, 0, len(keys))
	defer func() {
		for _, p := range permits {
			p.Release()
		}
	}()
	for _, key := range keys {
		p, err := g.fence.Admit(r.Context(), Write{
			Resource: key, Token: token, Owner: insp.Owner,
			DrainTimeout: rt.drainTimeout,
			Abort:        func() { abort(errSuperseded) },
			BodySent:     body.done.Load,
		})
		if err != nil {
			o.Wait = time.Since(fenceStart)
			if r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
				// The client gave up while waiting (drain); nobody listens.
				o.Decision, o.Resource, o.Err = "client_closed", key, err
				return
			}
			ref := asRefusal(err)
			if ref.Resource == "" {
				ref.Resource = key
			}
			o.Resource, o.Highest = key, ref.Highest
			g.refuse(w, r, rt, o, ref)
			return
		}
		permits = append(permits, p)
	}
	o.Wait = time.Since(fenceStart)
	o.Decision = "forwarded"

	out := r.WithContext(ctx)
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = body
		if rt.maxBody > 0 {
			body.rc = http.MaxBytesReader(w, r.Body, rt.maxBody)
		}
	}
	g.forward(w, out, rt, req, o, ctx)
}

// forward hands the request to the route's upstream and turns a failure
// before the answer started into a refusal.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, rt *Route, req *Request, o *Outcome, abortCtx context.Context) {
	ctx, cancel := context.WithTimeout(r.Context(), rt.timeout)
	defer cancel()
	if r.Body != nil && r.Body != http.NoBody {
		// When the forward is abandoned (superseded, timed out) while the
		// client is still sending its body, the transport waits for its
		// writer, which is blocked reading from the client. Expiring the
		// client connection's read deadline unblocks it; the connection is
		// closed after the answer, as its unread body makes it unusable.
		stop := context.AfterFunc(ctx, func() {
			http.NewResponseController(w).SetReadDeadline(time.Now())
		})
		defer stop()
	}
	rw := &StatusWriter{ResponseWriter: w}
	err := rt.upstream.Forward(rw, r.WithContext(withRequest(ctx, req)))
	o.Status = rw.Status
	if err == nil {
		if g.log.Enabled(r.Context(), slog.LevelDebug) {
			g.log.LogAttrs(r.Context(), slog.LevelDebug, o.Decision,
				slog.String("route", rt.Name), slog.String("method", r.Method),
				slog.String("resource", o.Resource), slog.Int64("token", o.Token),
				slog.String("owner", o.Owner), slog.Int("status", rw.Status))
		}
		return
	}
	var ref *fencegate.Error
	var mbe *http.MaxBytesError
	switch {
	case abortCtx != nil && errors.Is(context.Cause(abortCtx), errSuperseded):
		// A newer token advanced while this body was still being sent; the
		// upstream saw an incomplete request, which it does not apply.
		st, _ := g.fence.State(context.WithoutCancel(r.Context()), o.Resource)
		ref = fencegate.StaleError(o.Resource, o.Token, st.Highest)
		ref.Message += " (superseded while the request body was being sent; the upstream did not receive it whole)"
	case errors.As(err, &mbe):
		ref = tooLarge(rt.maxBody)
	case errors.Is(err, context.DeadlineExceeded):
		ref = fencegate.Errorf(http.StatusGatewayTimeout, fencegate.CodeUpstreamTimeout,
			"upstream did not answer within %s", rt.timeout)
	case errors.Is(r.Context().Err(), context.Canceled):
		// The client went away; nobody is listening for an answer.
		o.Decision, o.Err = "client_closed", err
		return
	default:
		if !errors.As(err, &ref) {
			ref = fencegate.Errorf(http.StatusBadGateway, fencegate.CodeUpstreamUnavailable,
				"upstream request failed: %s", upstreamErrMessage(err))
		}
	}
	if ref.Err == nil && !errors.Is(err, ref) {
		ref.Err = err // the cause, for the log line; never a cycle
	}
	if rw.Status != 0 {
		// The answer had started: nothing more can be said to the client.
		o.Decision, o.Err = ref.Code, err
		return
	}
	g.refuse(w, r, rt, o, ref)
}

// refuse answers a refusal in the route's dialect and logs it.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, rt *Route, o *Outcome, e *fencegate.Error) {
	if rt != nil && e.Route == "" {
		e.Route = rt.Name
	}
	// Refusals never echo more than a bounded prefix of client input.
	e = boundedError(e)
	o.Decision, o.Status, o.Highest, o.Err = e.Code, e.Status, e.Highest, e
	if o.Resource == "" {
		o.Resource = e.Resource
	}
	o.Resource = bounded(o.Resource)
	if rt != nil && rt.errWriter != nil {
		rt.errWriter.WriteError(w, r, e)
	} else {
		e.WriteJSON(w)
	}
	level := slog.LevelInfo
	switch {
	case e.Code == fencegate.CodeStaleToken:
		level = slog.LevelWarn
	case e.Status >= 500:
		level = slog.LevelError
	}
	attrs := []slog.Attr{
		slog.String("route", e.Route), slog.String("method", r.Method),
		slog.String("resource", o.Resource), slog.String("owner", o.Owner),
		slog.Int64("token", o.Token), slog.Int64("highest", e.Highest),
		slog.Int("status", e.Status),
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("err", e.Err.Error()))
	}
	if g.logContext != nil {
		attrs = append(attrs, g.logContext(r.Context())...)
	}
	g.log.LogAttrs(r.Context(), level, e.Code, attrs...)
}

func (g *Gateway) match(host, path, method string) *Route {
	for _, rt := range g.Routes() {
		if rt.matches(host, path, method) {
			return rt
		}
	}
	return nil
}

func asRefusal(err error) *fencegate.Error {
	var e *fencegate.Error
	if errors.As(err, &e) {
		return e
	}
	return &fencegate.Error{Status: http.StatusInternalServerError, Code: "internal_error", Message: "internal error", Err: err}
}

func tooLarge(max int64) *fencegate.Error {
	return fencegate.Errorf(http.StatusRequestEntityTooLarge, fencegate.CodeBodyTooLarge,
		"request body exceeds this route's limit of %d bytes", max)
}

// upstreamErrMessage keeps internal addresses out of client answers.
func upstreamErrMessage(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case strings.Contains(err.Error(), "connection refused"):
		return "connection refused"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "connection closed by upstream"
	}
	return "connection error"
}

func canonicalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// sentBody wraps a request body and records when it has been read to the
// end, i.e. handed whole to the upstream connection.
type sentBody struct {
	rc   io.ReadCloser
	want int64 // Content-Length, or -1
	n    int64
	done atomic.Bool
}

func (b *sentBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if err == io.EOF || (b.want > 0 && b.n >= b.want) {
		b.done.Store(true)
	}
	return n, err
}

func (b *sentBody) Close() error { return b.rc.Close() }

// Request is what the gateway learnt about an admitted request; upstreams
// find it in the request context (RequestFrom).
type Request struct {
	Route     *Route
	Path      string   // canonical escaped path, forwarded upstream
	Resources []string // fence keys (empty for unfenced requests)
	Token     int64    // 0 for unfenced requests
	Owner     string
	// Inspected is the Inspection's State for this request (nil if none).
	Inspected any
}

type requestKey struct{}

func withRequest(ctx context.Context, r *Request) context.Context {
	return context.WithValue(ctx, requestKey{}, r)
}

// RequestFrom returns the gateway's view of the request being forwarded.
func RequestFrom(ctx context.Context) *Request {
	r, _ := ctx.Value(requestKey{}).(*Request)
	return r
}
