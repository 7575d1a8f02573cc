package objectstore

import (
	"net/http"
	"testing"
)

// A copy's conditions on its source hold as the store evaluates them: an
// entity-tag list or *, compared strongly for If-Match (a weak tag never
// matches) and weakly for If-None-Match, and the dates unless the matching
// entity-tag condition is there (RFC 9110).
func TestSourceConditionsHold(t *testing.T) {
	c := SourceConditions{IfMatch: "If-Match", IfNoneMatch: "If-None-Match", IfModifiedSince: "If-Modified-Since", IfUnmodifiedSince: "If-Unmodified-Since"}
	const etag, mod = `"e1"`, "Sun, 06 Dec 2026 10:00:00 GMT"
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   bool
	}{
		{"none", nil, true},
		{"if-match", map[string]string{"If-Match": `"e0", "e1"`}, true},
		{"if-match weak", map[string]string{"If-Match": `"e0", W/"e1"`}, false},
		{"if-none-match weak", map[string]string{"If-None-Match": `W/"e1"`}, false},
		{"if-match other", map[string]string{"If-Match": `"e0"`}, false},
		{"if-match *", map[string]string{"If-Match": "*"}, true},
		{"if-none-match", map[string]string{"If-None-Match": `"e1"`}, false},
		{"if-none-match other", map[string]string{"If-None-Match": `"e0"`}, true},
		{"unmodified since later", map[string]string{"If-Unmodified-Since": "Sun, 06 Dec 2026 11:00:00 GMT"}, true},
		{"unmodified since earlier", map[string]string{"If-Unmodified-Since": "Sun, 06 Dec 2026 09:00:00 GMT"}, false},
		{"if-match overrides unmodified since", map[string]string{"If-Match": `"e1"`, "If-Unmodified-Since": "Sun, 06 Dec 2026 09:00:00 GMT"}, true},
		{"modified since earlier", map[string]string{"If-Modified-Since": "Sun, 06 Dec 2026 09:00:00 GMT"}, true},
		{"modified since later", map[string]string{"If-Modified-Since": "Sun, 06 Dec 2026 11:00:00 GMT"}, false},
		{"if-none-match overrides modified since", map[string]string{"If-None-Match": `"e0"`, "If-Modified-Since": "Sun, 06 Dec 2026 11:00:00 GMT"}, true},
	} {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		if got := c.Hold(h, etag, mod); got != tc.want {
			t.Errorf("%s: Hold = %v; want %v", tc.name, got, tc.want)
		}
	}
	h := http.Header{"If-None-Match": {`"e0"`}, "If-Modified-Since": {mod}, "X-Other": {"kept"}}
	c.Set(h, etag)
	if len(h) != 2 || h.Get("If-Match") != etag || h.Get("X-Other") != "kept" {
		t.Fatalf("Set left %v; want only the gateway's If-Match and the other headers", h)
	}
}

// ReplaceMeta replaces the metadata headers, and only them.
func TestReplaceMeta(t *testing.T) {
	h := http.Header{"X-Ms-Meta-Worker": {"w"}, "Content-Type": {"text/plain"}}
	ReplaceMeta(h, http.Header{"X-Ms-Meta-Owner": {"src"}, "Etag": {`"e"`}}, "X-Ms-Meta-")
	if len(h) != 2 || h.Get("X-Ms-Meta-Owner") != "src" || h.Get("Content-Type") != "text/plain" {
		t.Fatalf("ReplaceMeta left %v", h)
	}
}

// A source read answered with a weak ETag does not pin a copy: the
// store's If-Match never matches a weak tag, and it names no one version.
func TestReadSourceWeakETag(t *testing.T) {
	c := SourceConditions{IfMatch: "If-Match", IfNoneMatch: "If-None-Match", IfModifiedSince: "If-Modified-Since", IfUnmodifiedSince: "If-Unmodified-Since"}
	for etag, ok := range map[string]bool{`"e1"`: true, `W/"e1"`: false} {
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Etag": {etag}}}
		s, err := c.ReadSource(resp, http.Header{}, "HEAD", "X-Amz-Meta-", nil, SourceRefusals{})
		if (err == nil) != ok || ok && s.ETag != etag {
			t.Errorf("ReadSource with ETag %s: %+v, %v; want pinned: %v", etag, s, err, ok)
		}
	}
}
