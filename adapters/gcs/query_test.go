package gcs

import "testing"

func TestQueryDropsEncodedSessionParam(t *testing.T) {
	u := &Upstream{}
	f := &forward{}
	for raw, want := range map[string]string{
		"upload_id=1&fencegate%5Fsession=x": "upload_id=1",
		"fencegate_session=x&upload_id=1":   "upload_id=1",
		"upload_id=a%2Bb":                   "upload_id=a%2Bb",
		"upload_id=1":                       "upload_id=1",
	} {
		if got := u.query(raw, f); got != want {
			t.Errorf("query(%q) = %q, want %q", raw, got, want)
		}
	}
}
