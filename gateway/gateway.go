// Package gateway is fencegate's fencing reverse proxy: it matches a route,
// derives the resource key, checks the request's fencing token against the
// Fence and streams admitted requests to the route's Upstream.
package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	"github.com/fencegate/fencegate/httprefusal"
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
	// admitted counts the fenced writes admitted and not yet released;
	// idle is signalled (without blocking) each time one is released.
	admitted atomic.Int64
	idle     chan struct{}
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
		idle:        make(chan struct{}, 1),
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
	// ClientGone is set for an admitted write whose client went away
	// before its answer was delivered (Decision is then client_closed,
	// or the code of a failure the forward met, such as upstream_timeout).
	// The write still counted as in flight until the upstream was done
	// with it: its answer read, its connection closed, or the route's
	// timeout passed and the connection was torn down.
	ClientGone bool
}

// Observer is told about every request. Implementations must be fast and
// safe for concurrent use.
type Observer interface {
	Observe(ctx context.Context, o *Outcome)
}

// ServeHTTP implements http.Handler. serve runs the request flow; a refusal
// it returns is answered here, and the outcome is recorded once, here.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	o := &Outcome{Method: r.Method}
	defer func() { // deferred: ReverseProxy aborts a broken answer with a panic
		o.Duration = time.Since(start)
		if g.Observer != nil {
			g.Observer.Observe(r.Context(), o)
		}
	}()
	if rt, ref := g.serve(w, r, o); ref != nil {
		g.refuse(w, r, rt, o, ref)
	} else if o.Decision == "client_closed" && o.Status == 0 {
		// Returning would let net/http answer an implicit 200 to a client
		// that only half-closed its connection, for a write that was not
		// (or not wholly) forwarded. Abort the connection instead.
		panic(http.ErrAbortHandler)
	}
}

// serve is the request flow of the README ("How a request flows"). It
// returns the refusal to answer, if any, with the route whose dialect
// answers it (nil: JSON). A nil refusal means the answer was given (or
// nobody is listening for one) and o tells how the request ended.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, o *Outcome) (*Route, *fencegate.Error) {
	// 1. Match a route, on the canonical path.
	host := canonicalHost(r.Host)
	escaped := r.URL.EscapedPath()
	segs, err := resource.CleanPath(escaped)
	var slashRoute *Route // the route an encoded slash was accepted for
	if errors.Is(err, resource.ErrEncodedSlash) {
		if rt := g.match(host, escaped, ""); rt != nil && rt.encodedSlash {
			slashRoute = rt
			segs, err = resource.CleanObjectPath(escaped)
		}
	}
	if err != nil {
		// The raw path only chooses the refusal's dialect (S3 clients expect
		// XML); nothing is forwarded.
		return g.match(host, escaped, r.Method), fencegate.InvalidResource("refused path: %s", err)
	}
	cpath := resource.JoinPath(segs, len(segs) > 0 && strings.HasSuffix(escaped, "/"))
	// The method is checked before routing: match.methods and the fenced
	// set compare it exactly, so a spelling the upstream folds must not
	// reach either. The route found without the method only picks the
	// refusal's dialect.
	if ref := checkMethod(r); ref != nil {
		return g.match(host, cpath, ""), ref
	}
	rt := g.match(host, cpath, r.Method)
	if rt == nil {
		return nil, fencegate.NoRoute(r.Method, host, cpath)
	}
	if slashRoute != nil && rt != slashRoute {
		// The cleaned path went to another route than the one whose
		// upstream reads %2F inside a name.
		return rt, fencegate.InvalidResource("refused path: %s", resource.ErrEncodedSlash)
	}
	o.Route = rt.Name

	// 2. Shape checks, the sender, what the route's inspector reads.
	if ref := checkHeaders(r, g.decidedHeaders(rt)); ref != nil {
		return rt, ref
	}
	r, id, ref := g.authenticate(r, rt, o)
	if ref != nil {
		return rt, ref
	}
	// 3. The token, parsed once, here, before the inspection that may
	// need it (an upload session's requests carry the token it was opened
	// with). A fenced request without a valid one is refused after the
	// inspection, whose refusals come first; an unfenced one's is only
	// handed over (0 if invalid).
	fenced := rt.fences(r.Method)
	var token int64
	var tokenRef *fencegate.Error
	if vs := r.Header.Values(g.tokenHeader); fenced || len(vs) > 0 {
		token, tokenRef = fencegate.ParseToken(g.tokenHeader, vs)
	}
	// The route's body limit holds before the inspection, which may read
	// the body (the objects a DeleteObjects or a compose names): a body
	// declared larger is refused unread, one of unknown length is read
	// through the limit, and a read it stopped refuses the request as too
	// large whatever the inspection made of the error (limitedBody).
	var limit *limitedBody
	if fenced && rt.maxBody > 0 {
		if r.ContentLength > rt.maxBody {
			return rt, fencegate.BodyTooLarge(rt.maxBody)
		}
		if r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody {
			limit = &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, rt.maxBody)}
			r.Body = limit
		}
	}
	var insp Inspection
	if rt.inspector != nil {
		insp, err = rt.inspector.Inspect(r, token)
		if limit.exceeded() {
			return rt, fencegate.BodyTooLarge(rt.maxBody)
		}
		if err != nil {
			return rt, fencegate.AsError(err)
		}
		o.Owner = insp.Owner
	}
	if id.Owner != "" {
		insp.Owner, o.Owner = id.Owner, id.Owner
	}
	req := &Request{Route: rt, Path: cpath, Owner: insp.Owner, Inspected: insp.State}
	if !rt.forwardToken {
		req.TokenHeader = g.tokenHeader
	}
	if !fenced {
		o.Decision = "passthrough"
		return rt, g.forward(w, r, rt, req, o, nil, nil)
	}
	if tokenRef != nil {
		return rt, tokenRef
	}
	req.Token, o.Token = token, token

	// 4. The resource keys, and whether the sender may write them. A read
	// the upstream cannot name (ReadsUnnamed) is refused with its reason
	// first: the keys of a request that names nothing would only say a
	// template variable is missing.
	if rt.fenceReads && insp.ReadsUnnamed != nil {
		return rt, fencegate.AsError(insp.ReadsUnnamed)
	}
	keys, ref := rt.resources(host, cpath, segs, r.Header, insp)
	if ref != nil {
		return rt, ref
	}
	coll, ref := rt.collectionAdmission(rt.requestVars(host, cpath, segs, r.Header, insp), insp)
	if ref != nil {
		return rt, ref
	}
	// The keys the request may change with everything below them.
	var trees []string
	if TreeMethod(r.Method) {
		trees = keys
	}
	var dest string // the Destination's key, if the request names one
	if rt.dest[r.Method] {
		if r, dest, ref = g.destination(r, rt, host, insp); ref != nil {
			return rt, ref
		}
		if dest != "" {
			// A COPY or MOVE replaces what is at its Destination, a
			// collection with its members included.
			trees = append(slices.Clip(trees), dest)
			if i, found := slices.BinarySearch(keys, dest); !found {
				keys = slices.Insert(slices.Clip(keys), i, dest)
			}
		}
	}
	req.Resources = keys
	o.Resource = strings.Join(keys, ",")
	if ref := authorize(id, keys); ref != nil {
		return rt, ref
	}
	// The fence keys: those written, and, on a route that fences reads,
	// those the request reads (a copy's source), as a GET of them would be.
	admitted := keys
	var reads []string
	if rt.fenceReads {
		if reads, ref = rt.readResources(host, insp); ref != nil {
			return rt, ref
		}
		if ref := authorize(id, reads); ref != nil {
			o.Resource = ""
			return rt, ref
		}
		if len(reads) > 0 {
			admitted = slices.Concat(keys, reads)
			slices.Sort(admitted)
			admitted = slices.Compact(admitted)
		}
	}
	// Answered even when the read cancelled the request's context: a
	// client that half-closed its connection still reads the answer, and
	// an empty one would be a 200.
	small, ref := readSmallBody(r)
	if ref != nil {
		return rt, ref
	}
	if ref := rt.writes.acquire(); ref != nil {
		return rt, ref
	}
	defer rt.writes.release()
	rt.inflight.Add(1)
	defer rt.inflight.Add(-1)

	// 5. The fence.
	var body *sentBody // nil: nothing left to send once forwarded
	if small == nil && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		body = &sentBody{rc: r.Body, want: r.ContentLength, limit: limit}
	}
	// An admitted write counts as in flight until the upstream is done with
	// it, whatever its client does (I2): a client that hangs up once its
	// request was handed over does not end the forward, which is bounded
	// by the route's timeout and the fence's aborts instead. The client's
	// context still ends a wait for the fence (nothing was forwarded) and
	// a body the client stops sending (the upstream gets an incomplete
	// request on a connection that is then closed).
	ctx, abort := context.WithCancelCause(context.WithoutCancel(r.Context()))
	defer abort(nil)
	fenceStart := time.Now()
	var one [1]Permit
	permits, err := g.admit(r.Context(), rt, host, admitted, trees, coll, token, insp.Owner, body, abort, o, one[:0])
	if len(permits) > 0 {
		g.admitted.Add(1)
	}
	if body != nil && err == nil {
		body.live = livePermits(permits)
	}
	defer func() {
		for _, p := range permits {
			p.Release()
		}
		if len(permits) > 0 {
			g.admitted.Add(-1)
			select {
			case g.idle <- struct{}{}:
			default:
			}
		}
	}()
	o.Wait = time.Since(fenceStart)
	if err != nil {
		if r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
			// The client gave up while waiting (drain); nobody listens.
			o.Decision, o.Err = "client_closed", err
			return rt, nil
		}
		ref := fencegate.AsError(err)
		if ref.Resource == "" {
			ref.Resource = o.Resource
		}
		if _, written := slices.BinarySearch(keys, o.Resource); !written && slices.Contains(reads, o.Resource) {
			ref.Message += " (an object the request reads, a copy's source: on a route with fence_reads it is fenced as a GET of it is)"
		}
		if dest != "" && o.Resource == dest && ref.Code == fencegate.CodeUnknownToken {
			ref.Message += "; the request writes its Destination too, with the same token, which was never issued for the Destination's key " +
				"(a move inside one owner's tree needs the tree under one key: a coarser resource template)"
		}
		return rt, ref
	}
	o.Decision = "forwarded"

	// 6. Forward; 7., the record, is ServeHTTP's.
	var out io.ReadCloser
	switch {
	case small != nil:
		req.Body = small
		out = io.NopCloser(bytes.NewReader(small))
	case body != nil:
		out = body
	}
	return rt, g.forward(w, r, rt, req, o, ctx, out)
}

// smallBody is the largest request body of known length the gateway reads
// whole before the fence. Larger ones, and those of unknown length, stream.
const smallBody = 32 << 10

// readSmallBody reads a small request body of known length whole (nil if
// the body is not small, or absent). Held in memory (Request.Body), it goes
// upstream in the same write as the headers, where a streamed body costs a
// write of its own. Read before the fence, a slow client holds no permit
// while sending it, and a write already whole cannot be cut by a newer
// token. A request with an Expect header is left to stream, so a client
// that sent Expect: 100-continue waits for the upstream's go-ahead.
func readSmallBody(r *http.Request) ([]byte, *fencegate.Error) {
	if r.ContentLength <= 0 || r.ContentLength > smallBody || r.Body == nil || r.Body == http.NoBody ||
		r.Header.Get("Expect") != "" {
		return nil, nil
	}
	buf := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, buf); err != nil {
		ref := fencegate.InvalidRequest("the request body ended before its Content-Length of %d bytes", r.ContentLength)
		ref.Err = err
		return nil, ref
	}
	return buf, nil
}

// admit admits every resource the request writes, in sorted order so that
// two multi-resource requests cannot wait on each other. It returns the
// permits it got (appended to permits), to be released, and on failure sets
// o.Resource to the key that failed.
func (g *Gateway) admit(ctx context.Context, rt *Route, host string, keys, trees []string, coll admission, token int64, owner string,
	body *sentBody, abort context.CancelCauseFunc, o *Outcome, permits []Permit) ([]Permit, error) {
	var sent func() bool // nil: the body is whole in memory, or absent
	if body != nil {
		sent = body.done.Load
	}
	ctx = withTokenVerifier(ctx, rt.Tokens)
	var buf [8]admission
	adms := rt.admissions(host, keys, trees, coll, buf[:0])
	tf, _ := g.fence.(TreeFence)
	for i, a := range adms {
		w := Write{
			Resource: a.key, Token: token, Owner: owner,
			DrainTimeout: rt.drainTimeout,
			Abort:        abort,
			BodySent:     sent,
			Scope:        a.scope,
			// A tree key's token was checked on the request's own key,
			// admitted before it (it sorts first): leases name that key.
			Verified: a.scope == ScopeTree && !slices.Contains(keys, a.key),
		}
		var p Permit
		var err error
		switch above, ok := treeAbove(adms, i); {
		case tf == nil || a.scope == ScopeMember && ok:
			p, err = g.fence.Admit(ctx, w)
		case ok:
			p, err = tf.AdmitTree(ctx, w, above)
		default:
			continue // a ScopeMember admission made with a key below it
		}
		if err != nil {
			o.Resource = a.key
			return permits, err
		}
		permits = append(permits, p)
	}
	return permits, nil
}

// treeAbove returns, for a TreeFence, the keys among adms that are above
// adms[i] and admitted ScopeMember, and true; false if adms[i] is itself a
// ScopeMember admission of a key above another of adms (admitted with that
// one). A ScopeMember admission above none of them is returned alone,
// and true: it is admitted on its own.
func treeAbove(adms []admission, i int) ([]string, bool) {
	a := adms[i]
	if a.scope == ScopeMember {
		for _, b := range adms {
			if b.scope != ScopeMember && strings.HasPrefix(b.key, resource.MemberPrefix(a.key)) {
				return nil, false
			}
		}
		return nil, true
	}
	var above []string
	for _, b := range adms {
		if b.scope == ScopeMember && strings.HasPrefix(a.key, resource.MemberPrefix(b.key)) {
			above = append(above, b.key)
		}
	}
	return above, true
}

// forward hands the request to the route's upstream, under abortCtx (a
// fenced write's, nil for others) and with body instead of r's (nil: r's
// own). A failure before the answer started is returned as the refusal to
// answer; after, it is only recorded in o.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, rt *Route, req *Request, o *Outcome,
	abortCtx context.Context, body io.ReadCloser) *fencegate.Error {
	parent := r.Context()
	if abortCtx != nil {
		parent = abortCtx
	}
	ctx, cancel := context.WithTimeout(parent, rt.timeout)
	defer cancel()
	out := r.WithContext(ctx)
	streaming := r.Body != nil && r.Body != http.NoBody
	if body != nil {
		out.Body = body
		_, streaming = body.(*sentBody)
	}
	if streaming {
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
	var rw *StatusWriter
	if abortCtx != nil {
		// An admitted write's answer is read to its end even when its
		// client is gone: only then is the upstream known to be done
		// with the write. (Both writers in one allocation.)
		ws := &struct {
			sw StatusWriter
			cw clientWriter
		}{}
		ws.cw.ResponseWriter = w
		ws.sw.ResponseWriter = &ws.cw
		rw = &ws.sw
		defer func() {
			// Before cancel: ctx still tells a timeout or an abort
			// (which cut the body's read) from a client gone.
			if r.Context().Err() != nil || ws.cw.lost.Load() || clientStopped(ctx, body) {
				g.clientGone(r, rt, o)
			}
		}()
	} else {
		rw = &StatusWriter{ResponseWriter: w}
	}
	err := rt.upstream.Forward(rw, out, req)
	o.Status = rw.Status
	if err == nil {
		if g.log.Enabled(r.Context(), slog.LevelDebug) {
			g.log.LogAttrs(r.Context(), slog.LevelDebug, o.Decision,
				slog.String("route", rt.Name), slog.String("method", r.Method),
				slog.String("resource", o.Resource), slog.Int64("token", o.Token),
				slog.String("owner", o.Owner), slog.Int("status", rw.Status))
		}
		return nil
	}
	var ref *fencegate.Error
	var mbe *http.MaxBytesError
	var cause error
	if abortCtx != nil {
		cause = context.Cause(abortCtx)
	}
	causeRef, causeRefuses := fencegate.Refusal(cause)
	cut := liveCut(body)
	switch {
	case errors.Is(cause, ErrSuperseded):
		// A newer token advanced while this body was still being sent; the
		// upstream saw an incomplete request, which it does not apply.
		st, _ := g.fence.State(context.WithoutCancel(r.Context()), o.Resource)
		ref = fencegate.StaleError(o.Resource, o.Token, st.Highest)
		ref.Message += " (superseded while the request body was being sent; the upstream did not receive it whole)"
	case cut != nil:
		// The permit stopped holding while the body was sent
		// (LivePermit): the upstream saw an incomplete request, and the
		// client, still there, is told the fence's reason.
		var ok bool
		if ref, ok = fencegate.Refusal(cut); !ok {
			ref, _ = fencegate.Refusal(&fencegate.SessionLostError{Resource: o.Resource, Err: cut})
		}
	case causeRefuses:
		// The fence cut the forward for a reason of its own (a shared
		// fence lost the session guarding it, or its forward
		// timeout passed); the refusal it stands for is what the client is
		// told.
		ref = causeRef
	case errors.As(err, &mbe), overLimit(body):
		// The body went over the route's limit while the forward read it
		// (also where the upstream's own reading of it turned the error
		// into another).
		ref = fencegate.BodyTooLarge(rt.maxBody)
	case errors.Is(err, context.DeadlineExceeded):
		ref = fencegate.UpstreamTimeout(rt.timeout)
	case errors.Is(r.Context().Err(), context.Canceled), clientStopped(ctx, body):
		// The client went away; nobody is listening for an answer.
		o.Decision, o.Err = "client_closed", err
		return nil
	default:
		if !errors.As(err, &ref) {
			ref = fencegate.UpstreamUnavailable(upstreamErrMessage(err))
		}
	}
	if ref.Err == nil && !errors.Is(err, ref) {
		ref.Err = err // the cause, for the log line; never a cycle
	}
	if rw.Status != 0 {
		// The answer had started: nothing more can be said to the client.
		o.Decision, o.Err = ref.Code, err
		return nil
	}
	return ref
}

// clientGone records an admitted write whose client went away before its
// answer was delivered: its decision becomes client_closed and it is
// logged, with what the upstream said. It runs when the forward has ended
// (also when it ended in a panic), before the write's permits are
// released.
func (g *Gateway) clientGone(r *http.Request, rt *Route, o *Outcome) {
	o.ClientGone = true
	upstream := "answered"
	if o.Status == 0 {
		// The forward failed before an answer (the client stopped
		// sending its body, or the route's timeout passed): the upstream
		// connection was closed.
		upstream = "connection_closed"
	} else {
		o.Decision = "client_closed"
	}
	attrs := []slog.Attr{
		slog.String("route", rt.Name), slog.String("method", r.Method),
		slog.String("resource", o.Resource), slog.String("owner", o.Owner),
		slog.Int64("token", o.Token), slog.String("upstream", upstream),
		slog.Int("upstream_status", o.Status),
	}
	if g.logContext != nil {
		attrs = append(attrs, g.logContext(r.Context())...)
	}
	g.log.LogAttrs(r.Context(), slog.LevelWarn, "client_closed", attrs...)
}

// WaitWrites waits until no admitted write is in flight, or ctx ends. Each
// admitted write ends within its route's timeout, whether or not its
// client is still there; a gateway that stops serving waits for them
// before it lets go of its fence, so that no write it forwarded can land
// after a newer token was admitted elsewhere (or after a restart).
func (g *Gateway) WaitWrites(ctx context.Context) error {
	for g.admitted.Load() > 0 {
		select {
		case <-g.idle:
		case <-ctx.Done():
			return fmt.Errorf("%d admitted writes still in flight: %w", g.admitted.Load(), ctx.Err())
		}
	}
	return nil
}

// AdmittedWrites is the number of fenced writes admitted and not yet
// ended.
func (g *Gateway) AdmittedWrites() int64 { return g.admitted.Load() }

// clientStopped reports whether the forward of body under ctx failed
// because the client stopped sending body (not the forward's timeout or
// an abort, which cut the read themselves).
func clientStopped(ctx context.Context, body io.ReadCloser) bool {
	sb, ok := body.(*sentBody)
	return ok && sb.failed.Load() && ctx.Err() == nil
}

// refuse answers a refusal in the route's dialect and logs it.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, rt *Route, o *Outcome, e *fencegate.Error) {
	if rt != nil && e.Route == "" {
		e.Route = rt.Name
	}
	// Refusals never echo more than a bounded prefix of client input.
	e = boundedError(e)
	status := httprefusal.Status(e)
	o.Decision, o.Status, o.Highest, o.Err = e.Code, status, e.Highest, e
	if o.Resource == "" {
		o.Resource = e.Resource
	}
	o.Resource = bounded(o.Resource)
	if rt != nil && rt.errWriter != nil {
		rt.errWriter.WriteError(w, r, e)
	} else {
		httprefusal.WriteJSON(w, e)
	}
	level := slog.LevelInfo
	switch {
	case e.Code == fencegate.CodeStaleToken:
		level = slog.LevelWarn
	case status >= 500:
		level = slog.LevelError
	}
	// What is not known is left out rather than logged as "" or 0, which
	// reads as a value (owner "" as an anonymous writer, highest 0 as an
	// empty fence): owner is the authenticated sender, absent when the
	// route asks for no credentials; token is absent when the request
	// carried none that parsed; resource and highest when the refusal came
	// before the fence was read. Without a resource, the path the request
	// was sent to says where it went (a body over the route's limit is
	// refused before the inspection names what it writes), bounded as a
	// refusal's echo is.
	attrs := []slog.Attr{slog.String("route", e.Route), slog.String("method", r.Method)}
	if o.Resource != "" {
		attrs = append(attrs, slog.String("resource", o.Resource))
	} else {
		attrs = append(attrs, slog.String("path", bounded(r.URL.Path)))
	}
	if o.Owner != "" {
		attrs = append(attrs, slog.String("owner", o.Owner))
	}
	if o.Token > 0 {
		attrs = append(attrs, slog.Int64("token", o.Token))
	}
	if e.Highest > 0 {
		attrs = append(attrs, slog.Int64("highest", e.Highest))
	}
	attrs = append(attrs, slog.Int("status", status))
	if e.Err != nil {
		// A status pinned at the edge (httprefusal.WithStatus) is no cause.
		if cause := e.Err.Error(); cause != "" {
			attrs = append(attrs, slog.String("err", cause))
		}
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
	// Without a colon there is no port (and SplitHostPort's error for
	// that would be an allocation per request).
	if strings.IndexByte(h, ':') < 0 {
		return strings.ToLower(strings.TrimSuffix(h, "."))
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// sentBody wraps a request body and records when it has been read to the
// end, i.e. handed whole to the upstream connection.
type sentBody struct {
	rc io.ReadCloser
	// live, if set, is asked before each piece of the body goes on
	// (LivePermit): a write whose permit stopped holding sends no more.
	live func() error
	want int64 // Content-Length, or -1
	n    int64
	done atomic.Bool
	// failed is set when reading the client's body failed other than by
	// the route's body limit: the client stopped sending it (went away,
	// or the forward's own deadline cut the read).
	failed atomic.Bool
	// cut is the permit's reason when live stopped the body.
	cut atomic.Pointer[error]
	// limit is the route's body limit the body is read through, if it
	// has a limit and no length (nil otherwise: a length was checked).
	limit *limitedBody
}

// limitedBody is a body of unknown length read through the route's limit
// (http.MaxBytesReader). It records that the limit stopped a read, which
// the reader (an inspection, an upstream preparing the body) may have
// answered with an error of its own: the request is refused as too large
// all the same, before the fence if the inspection read it.
type limitedBody struct {
	io.ReadCloser
	over atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	if err != nil && errors.As(err, &mbe) {
		b.over.Store(true)
	}
	return n, err
}

// exceeded reports whether the limit stopped a read of b (false for nil).
func (b *limitedBody) exceeded() bool { return b != nil && b.over.Load() }

// overLimit reports whether body went over the route's limit.
func overLimit(body io.ReadCloser) bool {
	sb, ok := body.(*sentBody)
	return ok && sb.limit.exceeded()
}

// liveCut returns why a permit stopped holding while body was sent (nil:
// it did not).
func liveCut(body io.ReadCloser) error {
	if sb, ok := body.(*sentBody); ok {
		if err := sb.cut.Load(); err != nil {
			return *err
		}
	}
	return nil
}

func (b *sentBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 && b.live != nil {
		if lerr := b.live(); lerr != nil {
			// Not failed: the client is still there and is told why
			// (liveCut), not treated as gone.
			b.cut.Store(&lerr)
			return 0, lerr
		}
	}
	b.n += int64(n)
	var mbe *http.MaxBytesError
	switch {
	case err == io.EOF || (b.want > 0 && b.n >= b.want):
		b.done.Store(true)
	case err != nil && !errors.As(err, &mbe):
		b.failed.Store(true)
	}
	return n, err
}

func (b *sentBody) Close() error { return b.rc.Close() }

// livePermits returns the check of the permits that implement LivePermit,
// nil if none does.
func livePermits(permits []Permit) func() error {
	var live []LivePermit
	for _, p := range permits {
		if lp, ok := p.(LivePermit); ok {
			live = append(live, lp)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return func() error {
		for _, lp := range live {
			if err := lp.Live(); err != nil {
				return err
			}
		}
		return nil
	}
}

// Request is what the gateway learnt about an admitted request, handed to
// the upstream's Forward beside the request itself: the facts cross the
// seam as an argument, never as a context value the upstream must fetch.
type Request struct {
	Route     *Route
	Path      string   // canonical escaped path, forwarded upstream
	Resources []string // fence keys (empty for unfenced requests)
	Token     int64    // 0 for unfenced requests
	Owner     string
	// Body is the request body if the gateway read it whole (small bodies
	// of known length, see readSmallBody); nil if it streams. The
	// forwarded request's Body reads the same bytes.
	Body []byte
	// Inspected is the Inspection's State for this request (nil if none).
	Inspected any
	// TokenHeader is the header that carried the token (the gateway's
	// one name for it, Options.TokenHeader), which the forward must not
	// carry on; "" when the route forwards it (RouteOptions.ForwardToken).
	// relay.Send removes it while it copies the request's headers: the one
	// place a forward loses the token, whatever the upstream.
	TokenHeader string
}
