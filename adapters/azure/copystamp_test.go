package azure

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// A stamped copy's source is read from the store only when it names a
// blob of the store, on the gateway's address or the store's; the
// snapshot or version it names is read, and nothing else of its query,
// unless it carries a SAS: the store reads it with its whole query, and
// so does the gateway (without its own credentials). A source elsewhere
// is not read.
func TestSourceBlob(t *testing.T) {
	endpoint, _ := url.Parse("http://store:10000/devstoreaccount1")
	u := &Upstream{endpoint: endpoint}
	in := httptest.NewRequest(http.MethodPut, "http://gw:8080/c/dst", nil)
	for _, tc := range []struct {
		src, want string
		ownSAS    bool
	}{
		{"http://gw:8080/c/src", "http://store:10000/devstoreaccount1/c/src", false},
		{"http://GW:8080/c/dir%2Fsrc?snapshot=2026-12-06T10%3A00%3A00Z&sig=worker&sv=2021", "http://store:10000/devstoreaccount1/c/dir/src?snapshot=2026-12-06T10%3A00%3A00Z&sig=worker&sv=2021", true},
		{"http://GW:8080/c/dir%2Fsrc?snapshot=2026-12-06T10%3A00%3A00Z&sv=2021", "http://store:10000/devstoreaccount1/c/dir/src?snapshot=2026-12-06T10%3A00%3A00Z", false},
		{"http://store:10000/devstoreaccount1/c/a/b?versionid=v1", "http://store:10000/devstoreaccount1/c/a/b?versionid=v1", false},
		{"http://store:10000/otheraccount/c/src", "", false},
		{"http://elsewhere/c/src", "", false},
		{"http://gw:8080/c", "", false},
		{"http://gw:8080/c/a/../b", "", false},
		{"http://gw:8080/c/src/", "", false},
		{"::", "", false},
	} {
		got, ownSAS, ok := u.sourceBlob(in, tc.src)
		if s := ""; ok {
			s = got.String()
			if s != tc.want || ownSAS != tc.ownSAS {
				t.Errorf("sourceBlob(%q) = %s, own SAS %v; want %q, %v", tc.src, s, ownSAS, tc.want, tc.ownSAS)
			}
		} else if tc.want != "" {
			t.Errorf("sourceBlob(%q) refused; want %s", tc.src, tc.want)
		}
	}
}

// Copy Blob and Copy Blob From URL take the source's metadata when they
// name none; Put Blob From URL (a blob type) never does.
func TestCopiesSourceMetadata(t *testing.T) {
	for _, tc := range []struct {
		op     op
		header map[string]string
		want   bool
	}{
		{opCopy, nil, true},
		{opCopy, map[string]string{"X-Ms-Requires-Sync": "true"}, true},
		{opCopy, map[string]string{"X-Ms-Meta-Owner": "w"}, false},
		{opCopy, map[string]string{"X-Ms-Meta-Fencing_token": "1"}, false},
		{opCopy, map[string]string{"X-Ms-Blob-Type": "BlockBlob"}, false},
		{opBlob, nil, false},
	} {
		r := httptest.NewRequest(http.MethodPut, "http://gw/c/b", nil)
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if got := copiesSourceMetadata(r, target{op: tc.op}); got != tc.want {
			t.Errorf("copiesSourceMetadata(op %d, %v) = %v; want %v", tc.op, tc.header, got, tc.want)
		}
	}
}
