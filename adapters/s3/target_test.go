package s3

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/gateway"
)

func TestParseTarget(t *testing.T) {
	u := &Upstream{vhostSuffix: "s3.internal"}
	tests := []struct {
		host, uri      string
		bucket, key    string
		op             op
		method, errSub string
	}{
		{"gw:8080", "/b1k/a/b.txt", "b1k", "a/b.txt", opPutObject, "PUT", ""},
		{"gw", "/b1k/a%20b/%C3%BC", "b1k", "a b/ü", opPutObject, "PUT", ""},
		{"gw", "/b1k/dir/", "b1k", "dir/", opPutObject, "PUT", ""},
		{"b1k.s3.internal:8080", "/x/y", "b1k", "x/y", opDeleteObject, "DELETE", ""},
		{"s3.internal", "/b1k/x", "b1k", "x", opPutObject, "PUT", ""},
		{"gw", "/b1k/x?uploadId=1", "b1k", "x", opCompleteMultipart, "POST", ""},
		{"gw", "/b1k/x?uploadId=1&partNumber=2", "b1k", "x", opOther, "PUT", ""},
		{"gw", "/b1k/x?tagging", "b1k", "x", opOther, "PUT", ""},
		{"gw", "/b1k?delete", "b1k", "", opDeleteObjects, "POST", ""},
		{"gw", "/", "", "", opOther, "GET", ""},
		{"gw", "/b1k", "b1k", "", opBucket, "PUT", ""},
		{"gw", "/b1k/", "b1k", "", opBucket, "DELETE", ""},
		{"gw", "/b1k?x-id=CreateBucket", "b1k", "", opBucket, "PUT", ""},
		{"b1k.s3.internal", "/", "b1k", "", opBucket, "PUT", ""},
		{"gw", "/b1k?lifecycle", "b1k", "", opBucketConfig, "PUT", ""},
		{"gw", "/b1k?versioning=", "b1k", "", opBucketConfig, "PUT", ""},
		{"gw", "/b1k?policy", "b1k", "", opBucketConfig, "DELETE", ""},
		{"gw", "/b1k?x-id=CreateBucket&acl", "b1k", "", opBucketConfig, "PUT", ""},
		{"gw", "/b1k?unknown-subresource", "b1k", "", opBucketConfig, "PUT", ""},
		{"gw", "/b1k?restore", "b1k", "", opBucketConfig, "POST", ""},
		{"gw", "/b1k", "b1k", "", opBucketConfig, "PATCH", ""},
		{"gw", "/b1k", "b1k", "", opPostObject, "POST", ""},
		{"gw", "/b1k?lifecycle", "b1k", "", opOther, "GET", ""},
		{"gw", "/b1k", "b1k", "", opOther, "HEAD", ""},
		{"gw", "/b1k", "b1k", "", opOther, "OPTIONS", ""},
		{"gw", "/b1k/a//b", "", "", 0, "PUT", "empty segment"},
		{"gw", "/b1k//a", "", "", 0, "PUT", "empty segment"},
		{"gw", "/b1k/a/./b", "", "", 0, "PUT", `"." or ".."`},
		{"gw", "/b1k/a/%2e%2e/b", "", "", 0, "PUT", `"." or ".."`},
		{"gw", "/b1k/a%2Fb", "", "", 0, "PUT", "encoded slash"},
		{"gw", "/b1k/a%5Cb", "", "", 0, "PUT", `'\\'`},
		{"gw", "/b1k/a%00b", "", "", 0, "PUT", `'\x00'`},
		{"gw", "/b1k/a%ffb", "", "", 0, "PUT", "UTF-8"},
		{"gw", "/b1k/" + strings.Repeat("k", 1025), "", "", 0, "PUT", "1024"},
		{"gw", "/B1K/x", "", "", 0, "PUT", "bucket"},
	}
	for _, tc := range tests {
		t.Run(tc.uri, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.uri, nil)
			r.Host = tc.host
			got, err := u.parseTarget(r)
			if tc.errSub != "" {
				if err == nil || !strings.Contains(err.Message, tc.errSub) {
					t.Fatalf("got %+v, %v; want error containing %q", got, err, tc.errSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.bucket != tc.bucket || got.key != tc.key || got.op != tc.op {
				t.Fatalf("got %q %q op %d; want %q %q op %d", got.bucket, got.key, got.op, tc.bucket, tc.key, tc.op)
			}
		})
	}
}

func TestVarsKeyPrefix(t *testing.T) {
	u := &Upstream{keyPrefixes: []int{1, 2, 3}}
	v := u.vars("b", "jobs/42/part-1")
	if v["key.1"] != "jobs" || v["key.2"] != "jobs/42" || v["key.3"] != "jobs/42/part-1" {
		t.Fatalf("vars %v", v)
	}
	if _, ok := u.vars("b", "top")["key.2"]; ok {
		t.Fatal("key.2 of a one-segment key must be missing (refused), not the whole key")
	}
}

func TestCanonicalQuery(t *testing.T) {
	got := canonicalQuery("uploadId=a+b&partNumber=2&list-type=2&prefix=x%2Fy&delete", false, false)
	want := "delete=&list-type=2&partNumber=2&prefix=x%2Fy&uploadId=a%20b"
	if got != want {
		t.Fatalf("got %s; want %s", got, want)
	}
}

// copySourceReads names the object x-amz-copy-source reads as a GET of it
// would name it; a source the gateway cannot name as one object of the
// route is unnamed (refused on a route with fence_reads).
func TestCopySourceReads(t *testing.T) {
	u := &Upstream{}
	tests := []struct {
		name    string
		sources []string
		want    string // bucket/key; "" if unnamed
	}{
		{"bucket/key", []string{"src-b/a/b.txt"}, "src-b/a/b.txt"},
		{"leading slash and versionId", []string{"/src-b/a/b.txt?versionId=3"}, "src-b/a/b.txt"},
		{"encoded whole", []string{"src-b%2Fa%2Fb%20c.txt"}, "src-b/a/b c.txt"},
		{"dot-dot segment", []string{"src-b/mine/../other/x"}, ""},
		{"empty segment", []string{"src-b/a//x"}, ""},
		{"access point ARN", []string{"arn:aws:s3:us-east-1:123456789012:accesspoint/ap/object/x"}, ""},
		{"no key", []string{"src-b"}, ""},
		{"sent twice", []string{"src-b/a", "src-b/b"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, s := range tc.sources {
				h.Add("X-Amz-Copy-Source", s)
			}
			var insp gateway.Inspection
			u.copySourceReads(h, &insp)
			if tc.want == "" {
				if insp.ReadsUnnamed == nil || insp.Reads != nil {
					t.Fatalf("Reads %v, ReadsUnnamed %v; want it unnamed", insp.Reads, insp.ReadsUnnamed)
				}
				return
			}
			if insp.ReadsUnnamed != nil || len(insp.Reads) != 1 || insp.Reads[0]["bucket"]+"/"+insp.Reads[0]["key"] != tc.want {
				t.Fatalf("Reads %v, ReadsUnnamed %v; want %s", insp.Reads, insp.ReadsUnnamed, tc.want)
			}
		})
	}
	var insp gateway.Inspection
	if u.copySourceReads(http.Header{}, &insp); insp.Reads != nil || insp.ReadsUnnamed != nil {
		t.Fatal("a request without x-amz-copy-source reads something")
	}
}
