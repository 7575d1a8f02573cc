package gateway

import (
	"errors"
	"net/http"
	"sync/atomic"
)

// StatusWriter is an http.ResponseWriter that remembers whether, and with
// what status, the answer started, and counts the body bytes written: the
// gateway's outcome, the coordinator's acquire metrics and the access log
// read it.
type StatusWriter struct {
	http.ResponseWriter
	// Status is the answer's status once it started (informational 1xx
	// answers do not count); 0 before.
	Status int
	// Bytes is the number of body bytes written.
	Bytes int64
}

// WriteHeader implements http.ResponseWriter.
func (w *StatusWriter) WriteHeader(code int) {
	if w.Status == 0 && code >= 200 {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *StatusWriter) Write(p []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.Bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer (flush,
// deadlines), which ReverseProxy relies on for streaming.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// clientWriter is the answer writer of an admitted write. Once a write to
// the client fails (the client is gone), it discards the rest of the
// answer and reports success, so that the adapter goes on reading the
// upstream's answer to its end instead of abandoning it: until then the
// upstream is not known to be done with the write, which must keep
// counting as in flight.
type clientWriter struct {
	http.ResponseWriter
	lost atomic.Bool // a write or flush to the client failed
}

// Write implements http.ResponseWriter.
func (w *clientWriter) Write(p []byte) (int, error) {
	if w.lost.Load() {
		return len(p), nil
	}
	n, err := w.ResponseWriter.Write(p)
	switch {
	case errors.Is(err, http.ErrBodyNotAllowed), errors.Is(err, http.ErrContentLength):
		// The answer's own framing is wrong, not the client gone: the
		// adapter aborts it like any other failed write.
		return n, err
	case err != nil:
		w.lost.Store(true)
	}
	return len(p), nil
}

// FlushError lets http.ResponseController flush the client's answer; a
// failed flush loses the client as a failed write does.
func (w *clientWriter) FlushError() error {
	if w.lost.Load() {
		return nil
	}
	err := http.NewResponseController(w.ResponseWriter).Flush()
	switch {
	case errors.Is(err, http.ErrNotSupported):
		return err
	case err != nil:
		w.lost.Store(true)
	}
	return nil
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *clientWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
