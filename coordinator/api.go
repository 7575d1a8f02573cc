package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/httprefusal"
)

// Duration is a time.Duration in JSON: a Go duration string ("30s",
// "1m30s") or a number of seconds (30, 0.5). It marshals as a string.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: want e.g. \"30s\" or a number of seconds", s)
		}
		*d = Duration(v)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f < -1e9 || f > 1e9 {
		return fmt.Errorf("duration %s: want e.g. \"30s\" or a number of seconds", b)
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

// LeaseResponse is the answer of acquire, renew and show. The first four
// fields are the contract of docs/design.md §5.
type LeaseResponse struct {
	Resource  string    `json:"resource"`
	Owner     string    `json:"owner"`
	Token     int64     `json:"token"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// TTL is the time the lease had left when the store answered.
	TTL Duration `json:"ttl"`
	// Held is false when show finds no live lease (Token is then the last
	// one issued, 0 if none ever was).
	Held bool `json:"held"`
}

func responseOf(l Lease) LeaseResponse {
	r := LeaseResponse{Resource: l.Resource, Owner: l.Owner, Token: l.Token, ExpiresAt: l.ExpiresAt, Held: l.Held()}
	if r.Held {
		r.TTL = Duration(l.Remaining)
	}
	return r
}

// ReleaseResponse is the answer of release.
type ReleaseResponse struct {
	Released bool `json:"released"`
}

// maxBody caps request bodies; a request is a few names and numbers.
const maxBody = fencegate.MaxAPIBody

// Handler returns the HTTP JSON API:
//
//	POST /v1/leases/acquire  {"resource","owner","ttl","wait"}
//	POST /v1/leases/renew    {"resource","owner","token","ttl"}
//	POST /v1/leases/release  {"resource","owner","token"}
//	GET  /v1/leases?resource=R
//	GET  /openapi.json       these operations as OpenAPI 3.1 (package api)
//
// Refusals are the JSON error body of package fencegate with the codes
// lease_held and lease_lost (409), invalid_request (400) and
// fence_unavailable (503, Retry-After) when the store is down.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/leases/acquire", func(w http.ResponseWriter, r *http.Request) {
		var req AcquireRequest
		if !decode(w, r, &req) {
			return
		}
		l, err := s.Acquire(r.Context(), req)
		answerLease(w, err, l)
	})
	mux.HandleFunc("POST /v1/leases/renew", func(w http.ResponseWriter, r *http.Request) {
		var req RenewRequest
		if !decode(w, r, &req) {
			return
		}
		l, err := s.Renew(r.Context(), req)
		answerLease(w, err, l)
	})
	mux.HandleFunc("POST /v1/leases/release", func(w http.ResponseWriter, r *http.Request) {
		var req RenewRequest
		if !decode(w, r, &req) {
			return
		}
		if req.TTL != 0 {
			httprefusal.WriteJSON(w, invalid("release takes no ttl"))
			return
		}
		ok, err := s.Release(r.Context(), req)
		if err == nil {
			if ok {
				writeJSON(w, []byte("{\"released\":true}\n"))
			} else {
				writeJSON(w, []byte("{\"released\":false}\n"))
			}
			return
		}
		answer(w, err, nil)
	})
	mux.HandleFunc("GET /v1/leases", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if len(q["resource"]) != 1 {
			httprefusal.WriteJSON(w, invalid("give exactly one resource query parameter"))
			return
		}
		l, err := s.Show(r.Context(), q.Get("resource"))
		answerLease(w, err, l)
	})
	mux.Handle("GET /openapi.json", api.Handler("coordinator"))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httprefusal.WriteJSON(w, httprefusal.WithStatus(http.StatusNotFound, fencegate.Errorf(fencegate.CodeInvalidRequest,
			"no such endpoint %s %s: see POST /v1/leases/acquire|renew|release, GET /v1/leases?resource=R", r.Method, r.URL.Path)))
	})
	return mux
}

// decode reads a JSON body strictly: a misspelt field ("ttl_ms") would
// otherwise be ignored silently.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		httprefusal.WriteJSON(w, invalid("request body: %v", err))
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		httprefusal.WriteJSON(w, invalid("request body: %v", err))
		return false
	}
	if dec.More() {
		httprefusal.WriteJSON(w, invalid("request body: more than one JSON value"))
		return false
	}
	return true
}

// answer answers err, or the JSON of body() if err is nil.
func answer(w http.ResponseWriter, err error, body func() any) {
	if err != nil {
		var fe *fencegate.Error
		if !errors.As(err, &fe) {
			fe = unavailable("", err)
		}
		httprefusal.WriteJSON(w, fe)
		return
	}
	b, err := json.Marshal(body())
	if err != nil {
		httprefusal.WriteJSON(w, unavailable("", err))
		return
	}
	writeJSON(w, append(b, '\n'))
}

// answerLease answers a lease record, or err.
func answerLease(w http.ResponseWriter, err error, l Lease) {
	if err != nil {
		answer(w, err, nil)
		return
	}
	writeJSON(w, appendLeaseJSON(make([]byte, 0, 256), responseOf(l)))
}

func writeJSON(w http.ResponseWriter, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.Write(b)
}

// appendLeaseJSON appends r as encoding/json marshals it, and a newline:
// the answer of acquire, renew and show, built without reflection (it is
// on every call's path). Anything unusual (a name that needs escaping, a
// time json refuses) is left to encoding/json; TestLeaseJSON compares the
// two.
func appendLeaseJSON(b []byte, r LeaseResponse) []byte {
	y := r.ExpiresAt.Year()
	_, offset := r.ExpiresAt.Zone()
	if !plainJSON(r.Resource) || !plainJSON(r.Owner) || y < 0 || y > 9999 || offset%60 != 0 {
		j, err := json.Marshal(r)
		if err != nil { // not reached: json refuses only such years
			j = []byte("{}")
		}
		return append(append(b, j...), '\n')
	}
	b = append(b, `{"resource":"`...)
	b = append(b, r.Resource...)
	b = append(b, `","owner":"`...)
	b = append(b, r.Owner...)
	b = append(b, `","token":`...)
	b = strconv.AppendInt(b, r.Token, 10)
	if !r.ExpiresAt.IsZero() {
		b = append(b, `,"expires_at":"`...)
		b = r.ExpiresAt.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, `,"ttl":"`...)
	b = append(b, time.Duration(r.TTL).String()...)
	b = append(b, `","held":`...)
	b = strconv.AppendBool(b, r.Held)
	return append(b, "}\n"...)
}

// plainJSON reports whether s is printable ASCII that encoding/json writes
// as it is (no quote, backslash or HTML character to escape).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
