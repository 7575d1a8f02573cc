package gcs

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"io"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/httprefusal"
)

// What a read names for a route with fence_reads (Inspect): the object of
// a JSON API object read, the bucket alone of a bucket read (a listing),
// or nothing, with the status such a route refuses it with. The writes'
// grammar and refusals apply: one object segment, no trailing slash, no
// "." or ".." component, no name a backend cleans, known parameters once.
func TestReadClassification(t *testing.T) {
	const ob = "/storage/v1/b/bk/o/"
	for _, tc := range []struct {
		method, target string
		bucket, object string // named (object "" for the bucket)
		status         int    // else refused with this status
	}{
		{"GET", ob + "a", "bk", "a", 0},
		{"HEAD", ob + "a", "bk", "a", 0},
		{"GET", ob + "dir%2Fjob?alt=media", "bk", "dir/job", 0},
		{"GET", ob + "a?alt=json&generation=3&userProject=p", "bk", "a", 0},
		{"GET", "/download/storage/v1/b/bk/o/dir%2Fjob?alt=media", "bk", "dir/job", 0},
		{"HEAD", "/download/storage/v1/b/bk/o/a?alt=media", "bk", "a", 0},
		// Bucket reads: the bucket, which a "{bucket}/{object}"
		// template has no key for (as an S3 or Azure listing).
		{"GET", "/storage/v1/b/bk/o", "bk", "", 0},
		{"GET", "/storage/v1/b/bk", "bk", "", 0},
		{"GET", "/storage/v1/b/bk/acl", "bk", "", 0},
		// The writes' refusals.
		{"GET", ob + "a/", "", "", 400},
		{"GET", ob + "a%2F", "", "", 400},
		{"GET", ob + "%2Fa", "", "", 400},
		{"GET", ob + "a%2F..%2Fb", "", "", 400},
		{"GET", ob + "a%2F.%2Fb", "", "", 400},
		{"GET", ob + "a%2F%2Fb", "", "", 400},
		{"GET", "/storage/v1/b/bk/o//a", "", "", 400},
		{"GET", ob + "./a", "", "", 400},
		{"GET", "/storage/v1/b/B%2E/o/a", "", "", 400},
		{"GET", "/storage/v1/b/bk/o/", "", "", 400},
		{"GET", ob + "a?generation=1&Generation=2", "", "", 400},
		{"GET", ob + "a?unknown=1", "", "", 400},
		{"GET", ob + "a?name=b", "", "", 400},
		{"GET", ob + "a?uploadType=media", "", "", 400},
		// An object's ACL, the list or one entity: a read of the object,
		// its name one segment, read so by fake-gcs-server too.
		{"GET", ob + "a/acl", "bk", "a", 0},
		{"GET", ob + "a/acl/allUsers", "bk", "a", 0},
		{"GET", ob + "dir%2Fjob/acl/user-x@example.com?generation=3", "bk", "dir/job", 0},
		{"GET", ob + "x%2Facl/acl", "bk", "x/acl", 0},
		{"GET", ob + "x%2Facl/acl/acl", "", "", 400}, // fake-gcs-server: the ACL list of "x/acl/acl"
		{"GET", ob + "x/acl/acl", "", "", 400},       // fake-gcs-server: the ACL list of "x/acl"
		{"GET", ob + "x/acl/acl/allUsers", "", "", 400},
		{"GET", ob + "x/y/acl", "", "", 400},
		{"HEAD", ob + "a/acl", "", "", 400}, // fake-gcs-server: a HEAD of the object "a/acl"
		{"GET", ob + "a/ACL", "", "", 400},
		{"GET", ob + "a/acl/", "", "", 400},
		{"GET", ob + "a%2F..%2Fb/acl", "", "", 400},
		{"GET", ob + "a/acl?name=b", "", "", 400},
		{"GET", "/download/storage/v1/b/bk/o/a/acl", "", "", 400},
		// More than one segment otherwise: fake-gcs-server reads a/b as
		// one name, the store as nothing.
		{"GET", ob + "a/b", "", "", 400},
		{"GET", "/download/storage/v1/b/bk/o", "", "", 400},
		{"GET", "/download/storage/v1/b/bk", "", "", 400},
		{"GET", "/storage/v1/b", "", "", 400},
		{"OPTIONS", ob + "a", "", "", 400},
		// The XML API, path and host style: not written either.
		{"GET", "/bk/a", "", "", 501},
		{"GET", "/a", "", "", 501},
		{"GET", "/", "", "", 400}, // an empty segment
	} {
		r := httptest.NewRequest(tc.method, "http://gw"+tc.target, nil)
		insp, _, err := dialect{&Upstream{}}.Inspect(r, 5)
		if err != nil {
			t.Errorf("%s %s: %v; a read is never refused by Inspect (only on a route that fences reads)", tc.method, tc.target, err)
			continue
		}
		if tc.status != 0 {
			if insp.ReadsUnnamed == nil || insp.Vars != nil {
				t.Errorf("%s %s: vars %v, unnamed %v; want unnamed", tc.method, tc.target, insp.Vars, insp.ReadsUnnamed)
			} else if got := httprefusal.Status(fencegate.AsError(insp.ReadsUnnamed)); got != tc.status {
				t.Errorf("%s %s: %d %v; want %d", tc.method, tc.target, got, insp.ReadsUnnamed, tc.status)
			}
			continue
		}
		if want := vars(tc.bucket, tc.object); insp.ReadsUnnamed != nil || !reflect.DeepEqual(insp.Vars, want) ||
			!reflect.DeepEqual(insp.Collection, vars(tc.bucket, "")) {
			t.Errorf("%s %s: vars %v, collection %v, unnamed %v; want %v", tc.method, tc.target, insp.Vars, insp.Collection, insp.ReadsUnnamed, want)
		}
	}
	// The method the store would act on is the one checked.
	r := httptest.NewRequest("GET", "http://gw"+ob+"a", nil)
	r.Header.Set("X-HTTP-Method-Override", "DELETE")
	if insp, _, _ := (dialect{&Upstream{}}).Inspect(r, 5); insp.ReadsUnnamed == nil {
		t.Errorf("GET with X-HTTP-Method-Override: named %v", insp.Vars)
	}
}

// A compose's sources, named in its body, are reads (Inspection.Reads) in
// the destination's bucket. A body not read one way is refused on every
// route (as it was after the fence); a source the gateway cannot name as
// the store reads it is unnamed (refused on a route that fences reads).
// The body goes on as sent.
func TestComposeReads(t *testing.T) {
	many := `{"sourceObjects":[` + strings.Repeat(`{"name":"a"},`, maxComposeSources) + `{"name":"a"}]}`
	for _, tc := range []struct {
		name, body string
		ct         string // "" for application/json
		reads      []string
		status     int  // refused with this status
		everywhere bool // by Inspect, on every route; else ReadsUnnamed
	}{
		{name: "two sources", body: `{"sourceObjects":[{"name":"a"},{"name":"dir/b","generation":"5"}]}`, reads: []string{"a", "dir/b"}},
		{name: "the destination among them, pinned", body: `{"destination":{"bucket":"bk","name":"dst","contentType":"text/plain"},` +
			`"sourceObjects":[{"name":"dst","generation":"7","objectPreconditions":{"ifGenerationMatch":"7"}},{"name":"a"}]}`, reads: []string{"dst", "a"}},
		{name: "one source twice", body: `{"sourceObjects":[{"name":"a"},{"name":"a"}]}`, reads: []string{"a", "a"}},
		{name: "charset", body: `{"sourceObjects":[{"name":"a"}]}`, ct: "application/json; charset=UTF-8", reads: []string{"a"}},
		{name: "no sources", body: `{}`},
		{name: "null sources", body: `{"sourceObjects":null}`},
		// Not read one way: refused on every route.
		{name: "member spelled otherwise", body: `{"SourceObjects":[{"name":"other"}]}`, status: 400, everywhere: true},
		{name: "member folded", body: `{"source_objects":[{"name":"other"}]}`, status: 400, everywhere: true},
		{name: "member twice", body: `{"sourceObjects":[{"name":"a"}],"sourceObjects":[{"name":"other"}]}`, status: 400, everywhere: true},
		{name: "case-variant member twice", body: `{"sourceObjects":[{"name":"a"}],"sourceobjects":[{"name":"other"}]}`, status: 400, everywhere: true},
		{name: "name twice in a source", body: `{"sourceObjects":[{"name":"a","name":"other"}]}`, status: 400, everywhere: true},
		{name: "name case-variant in a source", body: `{"sourceObjects":[{"name":"a","Name":"other"}]}`, status: 400, everywhere: true},
		{name: "name spelled otherwise", body: `{"sourceObjects":[{"NAME":"other"}]}`, status: 400, everywhere: true},
		{name: "not an array", body: `{"sourceObjects":{"name":"a"}}`, status: 400, everywhere: true},
		{name: "a source not an object", body: `{"sourceObjects":["a"]}`, status: 400, everywhere: true},
		{name: "a name not a string", body: `{"sourceObjects":[{"name":1}]}`, status: 400, everywhere: true},
		{name: "two documents", body: `{"sourceObjects":[{"name":"a"}]} {"sourceObjects":[{"name":"other"}]}`, status: 400, everywhere: true},
		{name: "another destination", body: `{"destination":{"name":"other"},"sourceObjects":[{"name":"a"}]}`, status: 400, everywhere: true},
		{name: "not JSON's Content-Type", body: `{"sourceObjects":[{"name":"a"}]}`, ct: "text/plain", status: 400, everywhere: true},
		{name: "too large", body: `{"sourceObjects":[],"x":"` + strings.Repeat("x", maxMetadataDoc) + `"}`, status: 413, everywhere: true},
		// Sources the gateway cannot name as the store reads them.
		{name: "no name", body: `{"sourceObjects":[{"generation":"1"}]}`, status: 400},
		{name: "empty name", body: `{"sourceObjects":[{"name":""}]}`, status: 400},
		{name: "a .. component", body: `{"sourceObjects":[{"name":"mine/../other"}]}`, status: 400},
		{name: "a leading slash", body: `{"sourceObjects":[{"name":"/a"}]}`, status: 400},
		{name: "a double slash", body: `{"sourceObjects":[{"name":"a//b"}]}`, status: 400},
		{name: "a control character", body: `{"sourceObjects":[{"name":"a\u0000"}]}`, status: 400},
		{name: "another bucket", body: `{"sourceObjects":[{"name":"a","bucket":"other"}]}`, status: 400},
		{name: "another object member", body: `{"sourceObjects":[{"name":"a","object":"b"}]}`, status: 400},
		{name: "more than the store takes", body: many, status: 400},
		// Bytes a store might decompress (Content-Encoding: gzip) are
		// not JSON to the gateway: refused, not passed unread.
		{name: "gzip bytes", body: gzipped(`{"sourceObjects":[{"name":"other"}]}`), status: 400, everywhere: true},
	} {
		for _, chunked := range []bool{false, true} {
			name := tc.name
			ct := cmp.Or(tc.ct, "application/json")
			r := httptest.NewRequest("POST", "http://gw/storage/v1/b/bk/o/dst/compose", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", ct)
			if chunked {
				// Sent chunked: the length is not known before the body.
				r.ContentLength = -1
				name += " (chunked)"
			}
			insp, _, err := dialect{&Upstream{}}.Inspect(r, 5)
			switch {
			case tc.everywhere:
				if got := httprefusal.Status(fencegate.AsError(err)); err == nil || got != tc.status {
					t.Errorf("%s: %v (%d); want refused %d", name, err, got, tc.status)
				}
				continue
			case err != nil:
				t.Errorf("%s: %v; want no refusal on every route", name, err)
				continue
			case tc.status != 0:
				if got := httprefusal.Status(fencegate.AsError(insp.ReadsUnnamed)); insp.ReadsUnnamed == nil || got != tc.status || insp.Reads != nil {
					t.Errorf("%s: reads %v, unnamed %v (%d); want unnamed %d", name, insp.Reads, insp.ReadsUnnamed, got, tc.status)
				}
			default:
				var want []map[string]string
				for _, o := range tc.reads {
					want = append(want, vars("bk", o))
				}
				if insp.ReadsUnnamed != nil || !reflect.DeepEqual(insp.Reads, want) {
					t.Errorf("%s: reads %v, unnamed %v; want %v", name, insp.Reads, insp.ReadsUnnamed, want)
				}
			}
			// The destination is the written object, as before.
			if !reflect.DeepEqual(insp.Vars, vars("bk", "dst")) {
				t.Errorf("%s: writes %v; want bk/dst", name, insp.Vars)
			}
			// The bytes read go on to the store as sent.
			if b, err := io.ReadAll(r.Body); err != nil || string(b) != tc.body {
				t.Errorf("%s: the body forwarded is %q, %v; want the one sent", name, b, err)
			}
		}
	}
}

// gzipped is s gzip-compressed.
func gzipped(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.String()
}
