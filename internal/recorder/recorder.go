// Package recorder is a small upstream that applies writes to an in-memory
// key/value map and records each applied write in order. The demo uses it as
// its sample upstream and the tests read its history as the durable state
// of the resource: what matters is what the upstream applied, not what the
// gateway logged.
package recorder

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
)

// Applied is one write the upstream applied.
type Applied struct {
	Key    string    `json:"key"`
	Method string    `json:"method"`
	Value  string    `json:"value"`
	Token  string    `json:"token"` // the Fencing-Token header as received
	At     time.Time `json:"at"`
}

// Recorder is the upstream. The zero value is ready to use.
type Recorder struct {
	// Delay, if set, is waited after a write's body has been read and before
	// it is applied (a slow upstream). It may block on a channel.
	Delay func(r *http.Request)

	mu      sync.Mutex
	state   map[string]string
	history []Applied
}

// ServeHTTP applies PUT, POST and PATCH (value = body), DELETE, and answers
// GET with the current value. GET /_history answers the applied writes.
func (rec *Recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Path
	if key == "/_history" && r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rec.History())
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		v, ok := rec.Get(key)
		if !ok {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, v)
		return
	case http.MethodPut, http.MethodPost, http.MethodPatch, http.MethodDelete:
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		// An incomplete request is never applied.
		http.Error(w, "incomplete body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if rec.Delay != nil {
		rec.Delay(r)
	}
	rec.mu.Lock()
	if rec.state == nil {
		rec.state = make(map[string]string)
	}
	if r.Method == http.MethodDelete {
		delete(rec.state, key)
	} else {
		rec.state[key] = string(body)
	}
	rec.history = append(rec.history, Applied{
		Key: key, Method: r.Method, Value: string(body),
		Token: r.Header.Get(fencegate.DefaultTokenHeader), At: time.Now(),
	})
	rec.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, "applied "+r.Method+" "+key+"\n")
}

// Get returns the current value of key.
func (rec *Recorder) Get(key string) (string, bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	v, ok := rec.state[key]
	return v, ok
}

// History returns the applied writes in the order they were applied.
func (rec *Recorder) History() []Applied {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.history)
}

// HistoryOf returns the applied writes of one key.
func (rec *Recorder) HistoryOf(key string) []Applied {
	var out []Applied
	for _, a := range rec.History() {
		if a.Key == key {
			out = append(out, a)
		}
	}
	return out
}

// String summarizes the history of key, e.g. "PUT B@42, PUT C@43".
func Summary(h []Applied) string {
	s := make([]string, len(h))
	for i, a := range h {
		s[i] = a.Method + " " + a.Value + "@" + a.Token
	}
	return strings.Join(s, ", ")
}
