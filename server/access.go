package server

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate/gateway"
)

// accessLog wraps a listener's handler with the access log (log.access):
// one line per request with method, path, route, status, bytes, duration,
// token, decision and trace_id. Off, it returns h itself. The path is
// logged without its query, which may carry credentials (S3 presigned
// URLs); headers and bodies are never logged.
func (s *Server) accessLog(listener string, h http.Handler) http.Handler {
	if !s.cfg.Log.Access {
		return h
	}
	log := s.log.With("component", "access", "listener", listener)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		e := &accessEntry{}
		aw := &gateway.StatusWriter{ResponseWriter: w}
		// Deferred: the gateway aborts a connection (http.ErrAbortHandler)
		// when no answer may be given; that request is logged too, with
		// the status it had (0 if none).
		aborted := true
		defer func() { log.LogAttrs(r.Context(), slog.LevelInfo, "access", e.attrs(r, aw, start, aborted)...) }()
		h.ServeHTTP(aw, r.WithContext(context.WithValue(r.Context(), accessKey{}, e)))
		aborted = false
	})
}

// attrs is the access log line of one request.
func (e *accessEntry) attrs(r *http.Request, aw *gateway.StatusWriter, start time.Time, aborted bool) []slog.Attr {
	status := aw.Status
	if !aborted {
		status = cmp.Or(status, http.StatusOK) // net/http's implicit answer
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return []slog.Attr{
		slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("route", e.route), slog.Int("status", status),
		slog.Int64("bytes", aw.Bytes), slog.Duration("duration", time.Since(start)),
		slog.Int64("token", e.token), slog.String("decision", e.decision),
		slog.String("trace_id", e.traceID),
	}
}

type accessKey struct{}

// accessEntry is filled in by the gateway's observer, which runs inside
// the handler and sees the gateway's decision and the server span.
type accessEntry struct {
	mu       sync.Mutex
	route    string
	decision string
	token    int64
	traceID  string
}

func accessEntryFrom(ctx context.Context) *accessEntry {
	e, _ := ctx.Value(accessKey{}).(*accessEntry)
	return e
}

func (e *accessEntry) observed(ctx context.Context, o *gateway.Outcome) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.route, e.decision, e.token = o.Route, o.Decision, o.Token
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		e.traceID = sc.TraceID().String()
	}
}
