package gateway

import "net/http"

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
