package objectstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/objectstore"
)

type versions struct{}

func (versions) LastETag(context.Context, string) (string, error)        { return "", nil }
func (versions) RecordETag(context.Context, string, int64, string) error { return nil }

// TestSpecTracker: a route's precondition is on only with a template
// naming one object and a store of versions; off, there is no tracker.
func TestSpecTracker(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    objectstore.Spec
		on      bool
		wantErr string
	}{
		{"off", objectstore.Spec{Resource: "{bucket}"}, false, ""},
		{"one object", objectstore.Spec{Route: "r", Resource: "{bucket}/{key}", Precondition: true, Versions: versions{}}, true, ""},
		{"a bucket", objectstore.Spec{Resource: "{bucket}", Precondition: true, Versions: versions{}}, false, "precondition: etag needs a resource template naming one object, with {bucket} and {key}"},
		{"no store", objectstore.Spec{Resource: "{bucket}/{key}", Precondition: true}, false, "precondition: etag needs a store that records versions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := tc.spec.Tracker("etag", "S3", "bucket", "key")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || (tr != nil) != tc.on {
				t.Fatalf("tracker %v, err %v; want on %v", tr, err, tc.on)
			}
			if tr != nil && (tr.Route != "r" || tr.Upstream != "S3" || tr.Log == nil) {
				t.Fatalf("tracker %+v", tr)
			}
		})
	}
}
