// Package httprefusal answers fencegate's refusals over HTTP. The domain
// (package fencegate, the stores, the coordinator's service) says what was
// refused and why, in codes; this package is the one place a code gets its
// HTTP status, and the one place the headers every refusal carries are
// set (Cache-Control: no-store, Retry-After). Each dialect (fencegate's
// JSON, S3's XML, the GCS JSON API's, the Blob service's XML) only formats
// the body: it calls WriteHeader, then writes its document.
package httprefusal

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/fencegate/fencegate"
)

// statusByCode is the HTTP status of each refusal code (docs/design.md §3;
// the codes and their statuses are a public contract).
var statusByCode = map[string]int{
	fencegate.CodeMissingToken:           http.StatusPreconditionRequired,
	fencegate.CodeInvalidToken:           http.StatusBadRequest,
	fencegate.CodeStaleToken:             http.StatusConflict,
	fencegate.CodeUnknownToken:           http.StatusConflict,
	fencegate.CodeFenceUnavailable:       http.StatusServiceUnavailable,
	fencegate.CodeFenceDraining:          http.StatusServiceUnavailable,
	fencegate.CodeNoRoute:                http.StatusNotFound,
	fencegate.CodeInvalidResource:        http.StatusBadRequest,
	fencegate.CodeInvalidMethod:          http.StatusBadRequest,
	fencegate.CodeUnauthorized:           http.StatusUnauthorized,
	fencegate.CodeForbidden:              http.StatusForbidden,
	fencegate.CodeBodyTooLarge:           http.StatusRequestEntityTooLarge,
	fencegate.CodeUpstreamUnavailable:    http.StatusBadGateway,
	fencegate.CodeUpstreamTimeout:        http.StatusGatewayTimeout,
	fencegate.CodeTooManyWrites:          http.StatusServiceUnavailable,
	fencegate.CodeInvalidRequest:         http.StatusBadRequest,
	fencegate.CodeLeaseHeld:              http.StatusConflict,
	fencegate.CodeLeaseLost:              http.StatusConflict,
	fencegate.CodePreconditionFailed:     http.StatusPreconditionFailed,
	fencegate.CodeTokenOutOfRange:        http.StatusConflict,
	fencegate.CodeStoreRegressed:         http.StatusServiceUnavailable,
	fencegate.CodeTokenSourceUnavailable: http.StatusServiceUnavailable,
	fencegate.CodeInternal:               http.StatusInternalServerError,
	fencegate.CodeForeignDestination:     http.StatusBadRequest,
	fencegate.CodeNotLockHolder:          http.StatusConflict,
	fencegate.CodeNotFound:               http.StatusNotFound,
}

// StatusCoder is a cause (fencegate.Error.Err) that says the HTTP status
// its refusal is answered with, where an HTTP edge answers a code with
// another status than the code's own: S3's own errors (NotImplemented is
// 501 invalid_request), WithStatus.
type StatusCoder interface {
	HTTPStatus() int
}

// Status is the HTTP status e is answered with: the one its cause pins
// (StatusCoder), else its code's, else 500. Only the direct cause counts:
// a refusal that wraps another refusal (fence_unavailable around a failed
// call) is answered as itself.
func Status(e *fencegate.Error) int {
	if s, ok := e.Err.(StatusCoder); ok {
		if st := s.HTTPStatus(); st >= 100 && st <= 999 {
			return st
		}
	}
	if st, ok := statusByCode[e.Code]; ok {
		return st
	}
	return http.StatusInternalServerError
}

// WithStatus makes e answered with status instead of its code's: for an
// HTTP edge whose request has no better code (a 404 endpoint, a 501
// operation, a 411 body without a length), or a client that keeps the
// status it was answered with. e's cause stays its cause. It returns e.
func WithStatus(status int, e *fencegate.Error) *fencegate.Error {
	e.Err = &pinned{status: status, err: e.Err}
	return e
}

// pinned is the cause WithStatus puts in front of a refusal's own.
type pinned struct {
	status int
	err    error
}

func (p *pinned) HTTPStatus() int { return p.status }
func (p *pinned) Unwrap() error   { return p.err }

// Error is the cause's text: a pinned status adds nothing to the log line
// or to the text of an error a client returns.
func (p *pinned) Error() string {
	if p.err != nil {
		return p.err.Error()
	}
	return ""
}

// RetryAfter is the Retry-After value of a retry hint: whole seconds,
// rounded up so a client never retries before the hint; "" for none.
func RetryAfter(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return strconv.Itoa(int((d + time.Second - 1) / time.Second))
}

// WriteHeader sends e's status with the headers every refusal carries and
// contentType, the dialect's body type, and returns the status (which the
// GCS JSON API repeats in its body). Other headers go in w.Header() first.
func WriteHeader(w http.ResponseWriter, e *fencegate.Error, contentType string) int {
	h := w.Header()
	h.Set("Content-Type", contentType)
	// A refusal answers one request at one moment: no cache may serve it
	// to the next one (a retried write must reach the fence again).
	h.Set("Cache-Control", "no-store")
	if ra := RetryAfter(e.RetryAfter); ra != "" {
		h.Set("Retry-After", ra)
	}
	status := Status(e)
	w.WriteHeader(status)
	return status
}

// WriteJSON answers e as fencegate's own JSON refusal (docs/design.md §3).
func WriteJSON(w http.ResponseWriter, e *fencegate.Error) {
	WriteHeader(w, e, "application/json")
	b, _ := json.Marshal(e)
	w.Write(append(b, '\n'))
}
