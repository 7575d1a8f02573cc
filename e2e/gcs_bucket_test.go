package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestGCSBucketWritesFenced: a bucket write on a GCS route (its
// versioning by PATCH, its ACL) is fenced as a write of the whole bucket, like an S3
// bucket write: with a token older than an object's in the bucket it is
// refused stale and the bucket's settings on fake-gcs-server stay; with a
// current token it lands; after it, an object write older than the
// bucket write is refused and the object stays the owner's. Before, every
// bucket write on a "{bucket}/{object}" route was refused, whatever its
// token (no collection key).
func TestGCSBucketWritesFenced(t *testing.T) {
	e := startGCSEnv(t, "")
	if err := gcsPut(e.worker(t, tokenOf(100)), "job", "owner", 0); err != nil {
		t.Fatalf("owner's write of job with 100: %v", err)
	}
	// The bucket's state as the store holds it: versioning, ACL entries.
	stored := func() string {
		t.Helper()
		resp, b := e.GCS.Do(t, http.MethodGet, "/storage/v1/b/"+gcsBucket, "")
		var doc struct{ Versioning struct{ Enabled bool } }
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &doc) != nil {
			t.Fatalf("read the bucket from the store: %s %s", resp.Status, b)
		}
		resp, acl := e.GCS.Do(t, http.MethodGet, "/storage/v1/b/"+gcsBucket+"/acl", "")
		return fmt.Sprintf("versioning %v, acl %s %s", doc.Versioning.Enabled, resp.Status, acl)
	}
	js := map[string]string{"Content-Type": "application/json"}
	versioning := func(token int64, on bool) (*http.Response, string) {
		return gcsRaw(t, http.MethodPatch, e.GW+"/storage/v1/b/"+gcsBucket, token, js,
			[]byte(fmt.Sprintf(`{"versioning":{"enabled":%v}}`, on)))
	}
	aclInsert := func(token int64) (*http.Response, string) {
		return gcsRaw(t, http.MethodPost, e.GW+"/storage/v1/b/"+gcsBucket+"/acl", token, js,
			[]byte(`{"entity":"allUsers","role":"READER"}`))
	}
	initial := stored()

	// A zombie's bucket writes, older than the object's token.
	for name, send := range map[string]func() (*http.Response, string){
		"PATCH":      func() (*http.Response, string) { return versioning(5, true) },
		"ACL insert": func() (*http.Response, string) { return aclInsert(5) },
	} {
		if resp, body := send(); resp.StatusCode != http.StatusConflict || !isStale(body) {
			t.Fatalf("bucket %s with 5 below job's 100: %s %s; want 409 stale", name, resp.Status, body)
		}
		if got := stored(); got != initial {
			t.Fatalf("after a refused bucket %s the store's bucket changed: %s -> %s", name, initial, got)
		}
	}
	// The current owner's bucket writes land.
	for _, w := range []struct {
		token int64
		on    bool
	}{{100, true}, {200, false}} {
		if resp, body := versioning(w.token, w.on); resp.StatusCode != http.StatusOK {
			t.Fatalf("bucket PATCH with %d: %s %s; want it forwarded", w.token, resp.Status, body)
		}
		if got, want := stored(), fmt.Sprintf("versioning %v,", w.on); !strings.HasPrefix(got, want) {
			t.Fatalf("after the bucket PATCH with %d the store holds %s; want %s", w.token, got, want)
		}
	}
	if resp, body := aclInsert(150); resp.StatusCode != http.StatusConflict || !isStale(body) {
		t.Fatalf("bucket ACL insert with 150 after the bucket write with 200: %s %s; want 409 stale", resp.Status, body)
	}
	if resp, body := aclInsert(200); resp.StatusCode != http.StatusOK || !strings.Contains(stored(), "allUsers") {
		t.Fatalf("bucket ACL insert with 200: %s %s; the store holds %s", resp.Status, body, stored())
	}
	// An object write older than the bucket's write is refused.
	osGCS.wantStale(t, "object write with 150 after the bucket write with 200", gcsPut(e.worker(t, tokenOf(150)), "job", "late", 0))
	if got, stamp := e.stored(t, "job"); got != "owner" || stamp != "100" {
		t.Fatalf("job = %q stamped %q; want the owner's, stamped 100", got, stamp)
	}
	if err := gcsPut(e.worker(t, tokenOf(200)), "job", "new owner", 0); err != nil {
		t.Fatalf("object write with the bucket's token 200: %v", err)
	}
	if got, stamp := e.stored(t, "job"); got != "new owner" || stamp != "200" {
		t.Fatalf("job = %q stamped %q; want the new owner's, stamped 200", got, stamp)
	}
}

// isStale reports whether a GCS route's refusal says stale_fencing_token.
func isStale(body string) bool {
	return strings.Contains(body, `"reason":"stale_fencing_token"`)
}
