package gcs

import (
	"net/http/httptest"
	"reflect"
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
		// More than one segment: fake-gcs-server reads a/b as one name,
		// the store as nothing; an object's ACL is not named.
		{"GET", ob + "a/b", "", "", 400},
		{"GET", ob + "a/acl", "", "", 400},
		{"GET", ob + "a/acl/allUsers", "", "", 400},
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
