package s3

import (
	"net/http"
	"testing"
)

// A write's query must name exactly one S3 operation, spelled as S3 spells
// it; anything else is refused (issue 41: names in another case, names
// sent twice, pairs parsers read differently, unknown sub-resources).
func TestCheckWriteQuery(t *testing.T) {
	obj := target{bucket: "b", key: "k"}
	bkt := target{bucket: "b"}
	for _, tc := range []struct {
		method string
		t      target
		query  string
		ok     bool
	}{
		{"PUT", obj, "", true},
		{"PUT", obj, "x-id=PutObject", true},
		{"PUT", obj, "tagging", true},
		{"PUT", obj, "tagging=", true},
		{"PUT", obj, "tagging&versionId=3", true},
		{"PUT", obj, "partNumber=1&uploadId=u&x-id=UploadPart", true},
		{"PUT", obj, "legal-hold&x-id=PutObjectLegalHold", true},
		{"PUT", obj, "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=00", true},
		{"POST", obj, "uploads", true},
		{"POST", obj, "uploadId=u", true},
		{"POST", obj, "select&select-type=2", true},
		{"DELETE", obj, "versionId=v", true},
		{"DELETE", obj, "tagging", true},
		{"DELETE", obj, "uploadId=u", true},
		{"PUT", bkt, "", true},
		{"PUT", bkt, "x-id=CreateBucket", true},
		{"PUT", bkt, "lifecycle", true},
		{"PUT", bkt, "analytics&id=a", true},
		{"DELETE", bkt, "policy", true},
		{"POST", bkt, "delete", true},

		{"PUT", obj, "Tagging", false},           // another case
		{"PUT", obj, "TAGGING", false},           // another case
		{"PUT", obj, "tagging&tagging", false},   // twice
		{"PUT", obj, "tagging&Tagging", false},   // twice, in another case
		{"PUT", obj, "%74agging&tagging", false}, // twice, one encoded
		{"PUT", obj, "tagging;x", false},         // net/url drops it; fasthttp keeps it
		{"PUT", obj, "tagging&&x-id=PutObjectTagging", false},
		{"PUT", obj, "tagging=%zz", false},                // net/url drops it
		{"PUT", obj, "=tagging", false},                   // no name
		{"PUT", obj, "torrent", false},                    // not a write S3 defines
		{"PUT", obj, "tagging&retention", false},          // two operations
		{"PUT", obj, "uploadId=u", false},                 // half an operation
		{"PUT", obj, "x-amz-copy-source=b%2Fk", false},    // a header in the query
		{"PUT", obj, "x-amz-meta-fencing-token=9", false}, // a forged stamp
		{"DELETE", obj, "acl", false},
		{"DELETE", obj, "tagging&uploadId=u", false},
		{"PATCH", obj, "", false},
		{"POST", obj, "", false},
		{"POST", obj, "restore&uploadId=u", false},
		{"PUT", bkt, "Versioning", false},
		{"PUT", bkt, "versioning&policy", false},
		{"PUT", bkt, "frobnicate", false},
		{"POST", bkt, "", false},
		{"POST", bkt, "Delete", false},
		// One parser for every dialect (resource.ParseQuery): a value
		// where one is due, no empty pair at the end either.
		{"DELETE", obj, "versionId=", false},
		{"POST", obj, "uploadId=", false},
		{"PUT", obj, "partNumber=x&uploadId=u", false},
		{"PUT", obj, "x-id=", false},
		{"PUT", obj, "tagging&", false},
	} {
		err := checkWriteQuery(tc.method, tc.t, tc.query)
		if (err == nil) != tc.ok {
			t.Errorf("%s %q key %q: refused %v; want ok %v", tc.method, tc.query, tc.t.key, err, tc.ok)
		}
		if err != nil && err.Status != http.StatusBadRequest && err.Status != http.StatusNotImplemented {
			t.Errorf("%s %q: status %d", tc.method, tc.query, err.Status)
		}
	}
}

func TestCheckConditionHeaders(t *testing.T) {
	for _, tc := range []struct {
		h  http.Header
		ok bool
	}{
		{http.Header{}, true},
		{http.Header{"If-Match": {`"e"`}}, true},
		{http.Header{"If-None-Match": {"*"}}, true},
		{http.Header{"If-Match": {""}}, false},
		{http.Header{"If-None-Match": {" "}}, false},
		{http.Header{"X-Amz-If-Match-Size": {""}}, false},
		{http.Header{"If-Unmodified-Since": {""}}, false},
		{http.Header{"If-Match": {`"e"`, ""}}, false},
	} {
		if err := checkConditionHeaders(tc.h); (err == nil) != tc.ok {
			t.Errorf("%v: refused %v; want ok %v", tc.h, err, tc.ok)
		}
	}
}
