package s3

import (
	"net/http"
	"slices"
	"testing"

	"github.com/fencegate/fencegate/precondition"
)

// The store sees one valid set of conditions: the gateway's and the
// worker's never as If-Match beside If-None-Match, and a combination that
// cannot hold is sent as a condition that fails the way the worker's own
// would.
func TestCombineConditions(t *testing.T) {
	known := &precondition.Write{IfMatch: `"e1"`}
	absent := &precondition.Write{IfNoneMatch: true}
	for _, tc := range []struct {
		name      string
		w         *precondition.Write
		worker    [][2]string
		ifMatch   []string
		ifNone    []string
		ambiguous bool
	}{
		{"known, none", known, nil, []string{`"e1"`}, nil, false},
		{"known, If-Match *", known, [][2]string{{"If-Match", "*"}}, []string{`"e1"`}, nil, false},
		{"known, If-None-Match etag", known, [][2]string{{"If-None-Match", `"x"`}}, []string{`"e1"`}, []string{`"x"`}, true},
		{"known, size", known, [][2]string{{"X-Amz-If-Match-Size", "4"}}, []string{`"e1"`}, nil, true},
		{"known, time", known, [][2]string{{"X-Amz-If-Match-Last-Modified-Time", "Mon, 01 Jan 2001 00:00:00 GMT"}}, []string{`"e1"`}, nil, true},
		{"absent, none", absent, nil, nil, []string{"*"}, false},
		{"absent, If-Match *", absent, [][2]string{{"If-Match", "*"}}, []string{noVersionETag}, nil, false},
		{"absent, If-None-Match etag", absent, [][2]string{{"If-None-Match", `"x"`}}, nil, []string{"*"}, false},
		{"absent, size", absent, [][2]string{{"X-Amz-If-Match-Size", "4"}}, nil, []string{"*"}, true},
		{"unconditional", &precondition.Write{}, [][2]string{{"If-Match", "*"}}, []string{"*"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, kv := range tc.worker {
				h.Add(kv[0], kv[1])
			}
			c := combineConditions(h, tc.w)
			c.apply(h)
			if got := h.Values("If-Match"); !slices.Equal(got, tc.ifMatch) {
				t.Errorf("If-Match %q; want %q", got, tc.ifMatch)
			}
			if got := h.Values("If-None-Match"); !slices.Equal(got, tc.ifNone) {
				t.Errorf("If-None-Match %q; want %q", got, tc.ifNone)
			}
			if c.ambiguous != tc.ambiguous {
				t.Errorf("ambiguous %v; want %v", c.ambiguous, tc.ambiguous)
			}
		})
	}
}

func TestWriteHolds(t *testing.T) {
	known := &precondition.Write{IfMatch: `"e1"`}
	absent := &precondition.Write{IfNoneMatch: true}
	for _, tc := range []struct {
		w    *precondition.Write
		head string
		want bool
	}{
		{known, `"e1"`, true},
		{known, `"e2"`, false},
		{known, `W/"e1"`, false},
		{known, "", false},
		{absent, "", true},
		{absent, `"e1"`, false},
	} {
		if got := tc.w.Holds(tc.head); got != tc.want {
			t.Errorf("%+v Holds(%q) = %v; want %v", tc.w, tc.head, got, tc.want)
		}
	}
}
