package precondition

import (
	"net/http"
	"testing"
)

// A worker's condition may replace the gateway's only when a request
// delayed past a newer owner's write cannot satisfy it.
func TestPinsVersion(t *testing.T) {
	for _, tc := range []struct {
		hdr  [][2]string
		want bool
	}{
		{nil, false},
		{[][2]string{{"If-Match", `"a"`}}, true},
		{[][2]string{{"If-Match", `"a", "b"`}}, true},
		{[][2]string{{"If-Match", `W/"a"`}}, true}, // never matches strongly: refused, not overwritten
		{[][2]string{{"If-None-Match", "*"}}, true},
		{[][2]string{{"If-None-Match", " * "}}, true},
		{[][2]string{{"If-Match", "*"}}, false},
		{[][2]string{{"If-Match", `"a", *`}}, false},
		{[][2]string{{"If-Match", `"a",`}}, false},
		{[][2]string{{"If-Match", `"a"`}, {"If-Match", "*"}}, false},
		{[][2]string{{"If-None-Match", `"a"`}}, false},
		{[][2]string{{"If-None-Match", "*"}, {"If-None-Match", "*"}}, false},
		{[][2]string{{"If-Unmodified-Since", "Fri, 04 Dec 2026 10:00:00 GMT"}}, false},
	} {
		h := http.Header{}
		for _, kv := range tc.hdr {
			h.Add(kv[0], kv[1])
		}
		if got := PinsVersion(h); got != tc.want {
			t.Errorf("PinsVersion(%v) = %v, want %v", tc.hdr, got, tc.want)
		}
	}
}
