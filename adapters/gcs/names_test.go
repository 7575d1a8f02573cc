package gcs

import "testing"

// A body may name only the request's own object. An upload's resource that
// names the bucket must name the object too (fake-gcs-server takes a
// bucket-only resource for an object named ""); a metadata or ACL update
// is applied to the object its path names, so its body may name the bucket
// alone (the official clients send it so). Naming another bucket or object
// is refused either way: the store may write the one the body names.
func TestCheckNames(t *testing.T) {
	for _, tt := range []struct {
		doc          string
		nameRequired bool
		ok           bool
	}{
		{`{"bucket":"b","name":"o"}`, true, true},
		{`{"bucket":"b"}`, true, false},
		{`{"bucket":"b"}`, false, true},
		{`{"metadata":{"k":"v"}}`, false, true},
		{`{"bucket":"other"}`, false, false},
		{`{"bucket":"b","name":"victim"}`, false, false},
		{`{"name":"victim"}`, false, false},
		{`{"bucket":"b","BUCKET":"other"}`, false, false},
		{`{"bucket":"b","bucket":"other"}`, false, false},
	} {
		err := checkNames([]byte(tt.doc), "b", "o", tt.nameRequired)
		if (err == nil) != tt.ok {
			t.Errorf("%s (name required %v): %v; want ok %v", tt.doc, tt.nameRequired, err, tt.ok)
		}
	}
}
