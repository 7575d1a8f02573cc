package gcs

import (
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// The table: each write names the objects it writes, or is refused. The
// e2e oracle checks the same against fake-gcs-server's state; this pins
// the table's rows.
func TestClassificationTable(t *testing.T) {
	const ob = "/storage/v1/b/bk/o/"
	for _, tc := range []struct {
		method, target string
		want           []Write // nil: refused
	}{
		{"POST", "/upload/storage/v1/b/bk/o?uploadType=resumable&name=a%2Fb", []Write{{"bk", "a/b"}}},
		{"POST", "/upload/storage/v1/b/bk/o?uploadType=media&name=a", []Write{{"bk", "a"}}},
		{"PATCH", ob + "a%2Fb", []Write{{"bk", "a/b"}}},
		{"PUT", ob + "x/acl/allUsers", []Write{{"bk", "x"}}},
		{"POST", ob + "x/acl", []Write{{"bk", "x"}}},
		{"POST", ob + "x/compose", []Write{{"bk", "x"}}},
		{"POST", ob + "s/copyTo/b/b2/o/d", []Write{{"b2", "d"}}},
		{"POST", ob + "s/rewriteTo/b/b2/o/d%2Fe", []Write{{"b2", "d/e"}}},
		{"POST", ob + "s/moveTo/o/d", []Write{{"bk", "s"}, {"bk", "d"}, {"bk", "s/moveTo/o/d"}}},
		{"DELETE", "/storage/v1/b/bk", []Write{{"bk", ""}}},
		// Two readings.
		{"PATCH", ob + "x/acl/e", nil},
		{"POST", ob + "x/acl/e", nil},
		{"POST", ob + "s/copyTo/b/b2/o/acl", nil},
		{"POST", ob + "x", nil},
		// Names a backend cleans.
		{"DELETE", ob + "x/", nil},
		{"DELETE", ob + "x%2F", nil},
		{"DELETE", ob + "%2Fx", nil},
		{"DELETE", ob + "a%2F..%2Fx", nil},
		{"DELETE", ob + "a%2F.%2Fx", nil},
		{"DELETE", ob + "a%2F%2Fx", nil},
		{"DELETE", "/storage/v1/b/bk/o//x", nil},
		{"POST", "/upload/storage/v1/b/bk/o?uploadType=media&name=..%2Fother%2Fx", nil},
		{"DELETE", "/storage/v1/b/B%2E/o/x", nil},
		// Parameters.
		{"DELETE", ob + "x?ifGenerationMatch=", nil},
		{"DELETE", ob + "x?ifGenerationMatch=1x", nil},
		{"DELETE", ob + "x?ifgenerationmatch=1", nil},
		{"DELETE", ob + "x?generation=1&Generation=2", nil},
		{"DELETE", ob + "x?unknown=1", nil},
		{"DELETE", ob + "x?name=y", nil},
		{"POST", "/upload/storage/v1/b/bk/o?uploadType=media&name=a&Name=b", nil},
		{"POST", "/upload/storage/v1/b/bk/o?uploadType=Media&name=a", nil},
		// One parser for every dialect (resource.ParseQuery): no empty
		// pair, no ';'.
		{"DELETE", ob + "x?generation=1&", nil},
		{"DELETE", ob + "x?generation=1&&ifGenerationMatch=2", nil},
		{"DELETE", ob + "x?generation=1;ifGenerationMatch=2", nil},
		// Outside the table.
		{"POST", "/storage/v1/b", nil},
		{"PATCH", ob + "x/acl/e/f", nil},
		{"POST", "/batch/storage/v1", nil},
		{"PUT", "/bk/x", nil},
		{"POST", "/_internal/delete_all", nil},
		{"PUT", "/upload/resumable/u", nil},
	} {
		r := httptest.NewRequest(tc.method, "http://gw"+tc.target, nil)
		got, err := Writes(r, nil)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%s %s: %v; want refused", tc.method, tc.target, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %s: %v, %v; want %v", tc.method, tc.target, got, err, tc.want)
		}
	}
	// A header of the resumable protocol on a path that is not an upload.
	r := httptest.NewRequest("PUT", "http://gw/storage/v1/b/bk", nil)
	r.Header.Set("X-Goog-Upload-Protocol", "resumable")
	if _, err := Writes(r, nil); err == nil {
		t.Error("X-Goog-Upload-Protocol on a bucket path: accepted")
	}
}

// A body that names objects must be read one way and name the fenced one.
func TestReadNames(t *testing.T) {
	const up = "http://gw/upload/storage/v1/b/bk/o?uploadType=resumable&name=own"
	for _, tc := range []struct {
		ct, body string
		ok       bool
	}{
		{"application/json", `{"name":"own","bucket":"bk","metadata":{"a":"b"}}`, true},
		{"application/json; charset=UTF-8", `{}`, true},
		{"", ``, true},
		{"application/json", `{"name":"victim"}`, false},
		{"application/json", `{"bucket":"other"}`, false},
		{"application/json", `{"NAME":"own"}`, false},
		{"application/json", `{"name":"own","name":"own"}`, false},
		{"application/json", `{"name":"own","Name":"own"}`, false},
		{"application/json", `{"n\u0061me":"victim"}`, false},
		{"application/json", `{"bucket":"bk","buc\u212aet":"other"}`, false},
		{"application/json", `{"content_type":"a","contentType":"b"}`, false},
		{"application/json", `{"metadata":{"k":"1","K":"2"}}`, false},
		{"application/json", `{"name":"own"} {"name":"victim"}`, false},
		{"application/json", `["own"]`, false},
		{"application/json", `{"name":1}`, false},
		{"text/plain; x=application/json", `{"name":"own"}`, false},
		{"Application/JSON", `{"name":"own"}`, false},
		{"application/json; charset=latin1", `{"name":"own"}`, false},
		{"application/json", strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40), false},
	} {
		r := httptest.NewRequest("POST", up, nil)
		if tc.ct != "" {
			r.Header.Set("Content-Type", tc.ct)
		}
		_, err := Writes(r, []byte(tc.body))
		if (err == nil) != tc.ok {
			t.Errorf("%q %s: err %v; want ok %v", tc.ct, tc.body, err, tc.ok)
		}
	}
	// The compose destination.
	r := httptest.NewRequest("POST", "http://gw/storage/v1/b/bk/o/d/compose", nil)
	r.Header.Set("Content-Type", "application/json")
	if _, err := Writes(r, []byte(`{"sourceObjects":[{"name":"s"}],"destination":{"bucket":"other","name":"d"}}`)); err == nil {
		t.Error("compose destination in another bucket: accepted")
	}
	if _, err := Writes(r, []byte(`{"sourceObjects":[{"name":"s"}],"destination":{"name":"d","contentType":"x"}}`)); err != nil {
		t.Errorf("compose with its own destination: %v", err)
	}
}
