package gcs

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/adapters/objectstore"
)

// copyStore is a bucket's source object as the JSON API answers a GET of
// it, and the copies it makes: a copy with ifSourceGenerationMatch or
// ifSourceMetagenerationMatch on another version fails (412).
// changeAfterRead writes the source again right after the gateway's GET:
// a source replaced between the read and the copy.
type copyStore struct {
	mu              sync.Mutex
	generation      int
	changeAfterRead bool
	reads           []string // the GETs' query strings
	copies          []copied // the copies the store applied
	requests        int
}

type copied struct {
	query       url.Values
	contentType string
	doc         map[string]any
}

func (c *copyStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	b, _ := io.ReadAll(r.Body)
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/storage/v1/b/bk/o/src":
		c.reads = append(c.reads, r.URL.RawQuery)
		fmt.Fprintf(w, `{"generation":"%d","metageneration":"2","contentType":"text/csv","cacheControl":"no-cache","customTime":"2026-12-01T10:00:00Z",`+
			`"metadata":{"owner":"src-owner","fencing-token":"5"}}`, c.generation)
		if c.changeAfterRead {
			c.generation++
		}
	case r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/copyTo/"):
		q := r.URL.Query()
		if g := q.Get("ifSourceGenerationMatch"); g != "" && g != fmt.Sprint(c.generation) ||
			q.Has("ifSourceMetagenerationMatch") && q.Get("ifSourceMetagenerationMatch") != "2" {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		var doc map[string]any
		json.Unmarshal(b, &doc)
		c.copies = append(c.copies, copied{q, r.Header.Get("Content-Type"), doc})
		w.Write([]byte(`{"generation":"77"}`))
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// A stamped copyTo or rewriteTo is sent with the source's metadata, content
// members and customTime (where its body names none; before, customTime
// was dropped, and GCS takes a copy body's members only) and the copy's stamp, on the condition that the
// source is the generation and metageneration the gateway read: a source
// replaced in between fails the copy (412). The worker's own conditions on
// the source are evaluated against it; moveTo, which takes no body, is
// refused on a stamping route.
func TestCopyStamped(t *testing.T) {
	source := map[string]any{"owner": "src-owner", "fencing-token": "9"}
	const ct = "2026-12-01T10:00:00Z" // the source's customTime, which GCS copies with the rest
	for _, tc := range []struct {
		name            string
		path, query     string
		body            string
		stamp           bool
		changeAfterRead bool
		status          int
		read            string // the source GET's generation parameter ("-": no GET)
		doc             map[string]any
	}{
		{name: "no body", stamp: true, status: 200,
			doc: map[string]any{"metadata": source, "contentType": "text/csv", "cacheControl": "no-cache", "customTime": ct}},
		{name: "body without metadata", body: `{"contentType":"text/plain"}`, stamp: true, status: 200,
			doc: map[string]any{"metadata": source, "contentType": "text/plain", "cacheControl": "no-cache", "customTime": ct}},
		{name: "the worker's customTime", body: `{"customTime":"2026-12-02T00:00:00Z"}`, stamp: true, status: 200,
			doc: map[string]any{"metadata": source, "contentType": "text/csv", "cacheControl": "no-cache", "customTime": "2026-12-02T00:00:00Z"}},
		{name: "the worker's metadata", body: `{"metadata":{"a":"b","fencing-token":"1000"}}`, stamp: true, status: 200,
			doc: map[string]any{"metadata": map[string]any{"a": "b", "fencing-token": "9"}, "contentType": "text/csv", "cacheControl": "no-cache", "customTime": ct}},
		{name: "source generation", query: "?sourceGeneration=10&ifSourceGenerationMatch=10&ifSourceMetagenerationNotMatch=1", stamp: true, status: 200, read: "10",
			doc: map[string]any{"metadata": source, "contentType": "text/csv", "cacheControl": "no-cache", "customTime": ct}},
		{name: "worker's generation condition fails", query: "?ifSourceGenerationMatch=11", stamp: true, status: 412},
		{name: "worker's metageneration condition fails", query: "?ifSourceMetagenerationNotMatch=2", stamp: true, status: 412},
		{name: "source changed after the read", stamp: true, changeAfterRead: true, status: 412},
		{name: "not stamping", status: 200, read: "-", doc: nil},
		{name: "moveTo", path: "/storage/v1/b/bk/o/src/moveTo/o/dst", stamp: true, status: 501, read: "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &copyStore{generation: 10, changeAfterRead: tc.changeAfterRead}
			store := httptest.NewServer(c)
			defer store.Close()
			u, err := New(Options{Spec: objectstore.Spec{Route: "r", Endpoint: store.URL, Resource: "{bucket}/{object}", Stamp: tc.stamp}})
			if err != nil {
				t.Fatal(err)
			}
			path := tc.path
			if path == "" {
				path = "/storage/v1/b/bk/o/src/copyTo/b/bk/o/dst"
			}
			req := httptest.NewRequest(http.MethodPost, "http://gw"+path+tc.query, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			req.Header.Set("Fencing-Token", "9")
			w := httptest.NewRecorder()
			throughGateway(t, u).ServeHTTP(w, req)
			if w.Code != tc.status {
				t.Fatalf("status %d (%s); want %d", w.Code, w.Body, tc.status)
			}
			switch {
			case tc.read == "-" && len(c.reads) != 0:
				t.Fatalf("the gateway read the source: %q", c.reads)
			case tc.read != "-" && (len(c.reads) != 1 || url.Values(mustQuery(t, c.reads[0])).Get("generation") != tc.read):
				t.Fatalf("source reads %q; want one, generation %q", c.reads, tc.read)
			}
			if tc.status == 501 && c.requests != 0 {
				t.Fatalf("the refused moveTo sent %d request(s) to the store", c.requests)
			}
			if tc.status != 200 {
				if len(c.copies) != 0 {
					t.Fatalf("the store applied %d copies; want none", len(c.copies))
				}
				return
			}
			if len(c.copies) != 1 {
				t.Fatalf("the store applied %d copies; want 1", len(c.copies))
			}
			got := c.copies[0]
			if !reflect.DeepEqual(got.doc, tc.doc) {
				t.Fatalf("the copy's destination resource %v; want %v", got.doc, tc.doc)
			}
			if tc.stamp && (got.query.Get("ifSourceGenerationMatch") != "10" || got.query.Get("ifSourceMetagenerationMatch") != "2" ||
				len(got.query["ifSourceGenerationMatch"]) != 1 || got.contentType != "application/json") {
				t.Fatalf("the copy's query %v, Content-Type %q; want the gateway's conditions on generation 10, metageneration 2, JSON",
					got.query, got.contentType)
			}
		})
	}
}

func mustQuery(t *testing.T, raw string) url.Values {
	t.Helper()
	q, err := url.ParseQuery(raw)
	if err != nil {
		t.Fatal(err)
	}
	return q
}
