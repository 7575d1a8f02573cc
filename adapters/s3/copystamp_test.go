package s3_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/adapters/s3"
)

// copyStore is a bucket's source object as S3 answers a HEAD of it, and
// the copies it makes: a copy with x-amz-copy-source-if-match on another
// ETag fails (412). changeAfterHead changes the source's ETag right after
// the gateway's HEAD: a source replaced between the HEAD and the copy.
type copyStore struct {
	mu              sync.Mutex
	etag            string
	changeAfterHead bool
	heads           []string      // the HEADs' query strings
	headHeaders     []http.Header // and their headers
	headStatus      int           // the HEAD's status, 0: 200
	copied          []http.Header // the copies the store applied
}

func (c *copyStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case r.Method == http.MethodHead && r.URL.Path == "/bkt/src":
		c.heads = append(c.heads, r.URL.RawQuery)
		c.headHeaders = append(c.headHeaders, r.Header.Clone())
		if c.headStatus != 0 {
			w.WriteHeader(c.headStatus)
			return
		}
		w.Header().Set("ETag", c.etag)
		w.Header().Set("Content-Type", "text/csv")
		w.Header().Set("X-Amz-Meta-Owner", "src-owner")
		w.Header().Set("X-Amz-Meta-Fencing-Token", "5")
		w.Header().Set("Last-Modified", "Sun, 06 Dec 2026 10:00:00 GMT")
		if c.changeAfterHead {
			c.etag = `"changed"`
		}
	case r.Method == http.MethodHead:
		w.WriteHeader(http.StatusNotFound)
	case r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "":
		if im := r.Header.Get("X-Amz-Copy-Source-If-Match"); im != "" && im != c.etag {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		c.copied = append(c.copied, r.Header.Clone())
		w.Header().Set("ETag", `"copy"`)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// A stamped CopyObject with the COPY directive is sent as a REPLACE copy
// of the source's metadata with the copy's stamp, on the condition that
// the source is the version the gateway read: a source replaced in
// between fails the copy (412) instead of copying other metadata. The
// worker's own conditions on the source are evaluated against it.
func TestCopyObjectCopyDirectiveStamped(t *testing.T) {
	stamp := func(o *s3.Options) { o.Stamp, o.Precondition = true, false }
	for _, tc := range []struct {
		name            string
		hdr             map[string]string
		changeAfterHead bool
		status          int
		head            string // the HEAD's query; "-" for none
		replace         bool   // the worker's REPLACE: its metadata, stamped, no HEAD
	}{
		{name: "default directive", hdr: map[string]string{}, status: 200},
		{name: "COPY, lower case", hdr: map[string]string{"X-Amz-Metadata-Directive": "copy"}, status: 200},
		{name: "versioned source", hdr: map[string]string{"X-Amz-Copy-Source": "/bkt/src?versionId=v%2B1"}, status: 200, head: "versionId=v%2B1"},
		{name: "source changed after the HEAD", hdr: map[string]string{}, changeAfterHead: true, status: 412},
		{name: "worker's source If-Match holds", hdr: map[string]string{"X-Amz-Copy-Source-If-Match": `"v1"`}, status: 200},
		{name: "worker's source If-Match fails", hdr: map[string]string{"X-Amz-Copy-Source-If-Match": `"v0"`}, status: 412},
		{name: "worker's source If-None-Match fails", hdr: map[string]string{"X-Amz-Copy-Source-If-None-Match": `v1`}, status: 412},
		{name: "worker's source If-Modified-Since fails", hdr: map[string]string{"X-Amz-Copy-Source-If-Modified-Since": "Sun, 06 Dec 2026 11:00:00 GMT"}, status: 412},
		{name: "worker's source If-Unmodified-Since holds", hdr: map[string]string{"X-Amz-Copy-Source-If-Unmodified-Since": "Sun, 06 Dec 2026 11:00:00 GMT"}, status: 200},
		{name: "worker's REPLACE, lower case", hdr: map[string]string{"X-Amz-Metadata-Directive": "replace"}, status: 200, head: "-", replace: true},
		{name: "unknown directive", hdr: map[string]string{"X-Amz-Metadata-Directive": "MERGE"}, status: 400, head: "-"},
		{name: "bucket that is a path", hdr: map[string]string{"X-Amz-Copy-Source": "/../bkt/src"}, status: 400, head: "-"},
		{name: "access point source", hdr: map[string]string{"X-Amz-Copy-Source": "arn:aws:s3:us-east-1:1:accesspoint/ap/object/src"}, status: 400, head: "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &copyStore{etag: `"v1"`, changeAfterHead: tc.changeAfterHead}
			gw := reviewGateway(t, store, stamp)
			hdr := map[string]string{"X-Amz-Copy-Source": "/bkt/src", "X-Amz-Meta-Fencing-Token": "999", "X-Amz-Meta-Forged": "x", "Content-Type": "text/plain"}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			if st := putSigned(t, gw+"/bkt/dst", "9", "", hdr); st != tc.status {
				t.Fatalf("copy answered %d; want %d", st, tc.status)
			}
			store.mu.Lock()
			defer store.mu.Unlock()
			if want := tc.head; want != "-" && (len(store.heads) != 1 || store.heads[0] != want) {
				t.Fatalf("HEADs of the source %q; want one, query %q", store.heads, want)
			}
			if tc.status != 200 {
				if len(store.copied) != 0 {
					t.Fatalf("the store applied a refused copy: %v", store.copied)
				}
				return
			}
			if len(store.copied) != 1 {
				t.Fatalf("the store applied %d copies; want 1", len(store.copied))
			}
			h := store.copied[0]
			if tc.replace {
				if len(store.heads) != 0 || h.Get("X-Amz-Metadata-Directive") != "REPLACE" || h.Get("X-Amz-Meta-Fencing-Token") != "9" ||
					h.Get("X-Amz-Meta-Forged") != "x" || h.Get("Content-Type") != "text/plain" || h.Get("X-Amz-Copy-Source-If-Match") != "" {
					t.Fatalf("the worker's REPLACE copy the store applied: %v (HEADs %q)", h, store.heads)
				}
				return
			}
			if h.Get("X-Amz-Metadata-Directive") != "REPLACE" || h.Get("X-Amz-Meta-Fencing-Token") != "9" ||
				h.Get("X-Amz-Meta-Owner") != "src-owner" || h.Get("Content-Type") != "text/csv" || h.Get("X-Amz-Meta-Forged") != "" ||
				h.Get("X-Amz-Copy-Source-If-Match") != `"v1"` || !strings.Contains(h.Get("Authorization"), "Credential=gw/") {
				t.Fatalf("the copy the store applied: %v", h)
			}
			for _, k := range []string{"X-Amz-Copy-Source-If-None-Match", "X-Amz-Copy-Source-If-Modified-Since", "X-Amz-Copy-Source-If-Unmodified-Since"} {
				if _, ok := h[k]; ok {
					t.Fatalf("%s reached the store beside the gateway's condition", k)
				}
			}
		})
	}
}

// The gateway's HEAD of a stamped copy's source carries the copy's
// headers for reading it, renamed as a HEAD names them: the SSE-C key of
// an encrypted source, the request payer's acknowledgement, the source
// bucket's expected owner (signed, so S3 checks them). Before, it carried
// none: S3 refused the HEAD of an SSE-C source (400) and of a
// requester-pays source (403), and the copy failed as "the gateway may
// not read the copy source". A HEAD S3 still refuses with 400 says what
// may be missing.
func TestCopySourceHeadCarriesReadHeaders(t *testing.T) {
	stamp := func(o *s3.Options) { o.Stamp, o.Precondition = true, false }
	store := &copyStore{etag: `"v1"`}
	gw := reviewGateway(t, store, stamp)
	hdr := map[string]string{"X-Amz-Copy-Source": "/bkt/src",
		"X-Amz-Copy-Source-Server-Side-Encryption-Customer-Algorithm": "AES256",
		"X-Amz-Copy-Source-Server-Side-Encryption-Customer-Key":       "a2V5",
		"X-Amz-Copy-Source-Server-Side-Encryption-Customer-Key-Md5":   "bWQ1",
		"X-Amz-Request-Payer":                "requester",
		"X-Amz-Source-Expected-Bucket-Owner": "111122223333",
		"X-Amz-Expected-Bucket-Owner":        "444455556666"}
	if st := putSigned(t, gw+"/bkt/dst", "9", "", hdr); st != 200 {
		t.Fatalf("copy answered %d; want 200", st)
	}
	store.mu.Lock()
	if len(store.headHeaders) != 1 {
		t.Fatalf("%d HEADs of the source; want 1", len(store.headHeaders))
	}
	h := store.headHeaders[0]
	store.mu.Unlock()
	for name, want := range map[string]string{
		"X-Amz-Server-Side-Encryption-Customer-Algorithm": "AES256",
		"X-Amz-Server-Side-Encryption-Customer-Key":       "a2V5",
		"X-Amz-Server-Side-Encryption-Customer-Key-Md5":   "bWQ1",
		"X-Amz-Request-Payer":                             "requester",
		"X-Amz-Expected-Bucket-Owner":                     "111122223333", // the source's owner, not the destination's
	} {
		if got := h.Get(name); got != want {
			t.Errorf("the HEAD's %s = %q; want %q", name, got, want)
		}
		if !strings.Contains(strings.ToLower(h.Get("Authorization")), strings.ToLower(name)) {
			t.Errorf("%s is not signed: %s", name, h.Get("Authorization"))
		}
	}
	for k := range h {
		if strings.HasPrefix(k, "X-Amz-Copy-Source") {
			t.Errorf("the HEAD carries the copy's %s", k)
		}
	}

	store.mu.Lock()
	store.headStatus = http.StatusBadRequest
	store.mu.Unlock()
	if st := putSigned(t, gw+"/bkt/dst", "9", "", map[string]string{"X-Amz-Copy-Source": "/bkt/src"}); st != http.StatusBadRequest {
		t.Fatalf("a HEAD refused with 400: the copy answered %d; want 400 (InvalidArgument, naming the SSE-C headers)", st)
	}
}
