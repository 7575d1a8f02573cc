package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"

	"github.com/fencegate/fencegate/coordinator/client/gcsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// On a GCS route with fence_reads, a read names its object as a write
// does: a GET inside the worker's prefixes with a current token returns
// the object, below the object's fence it is refused stale, outside the
// prefixes forbidden, and what the gateway cannot name (a listing, the XML
// API, a name a backend would clean) is refused with its reason. The
// store is read directly to see that a refused read changed nothing.
func TestGCSReadsOnFenceReadsRoutes(t *testing.T) {
	gw, direct := gcsFenceReadsGateway(t)
	ctx := context.Background()
	// The newer holder writes mine/src with token 9.
	if err := gcsPut(gcsWorker(t, gw, func() int64 { return 9 }), "mine/src", "source body", 0); err != nil {
		t.Fatal(err)
	}
	before, err := direct.Bucket(gcsBucket).Object("mine/src").Attrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unchanged := func(what string) {
		t.Helper()
		a, err := direct.Bucket(gcsBucket).Object("mine/src").Attrs(ctx)
		if err != nil || a.Generation != before.Generation || a.Metageneration != before.Metageneration {
			t.Fatalf("%s: mine/src is now %+v, %v; want generation %d unchanged", what, a, err, before.Generation)
		}
	}
	get := func(path string, token int64) (int, string) {
		t.Helper()
		resp, body := gcsRaw(t, http.MethodGet, gw+path, token, nil, nil)
		return resp.StatusCode, body
	}
	const o = "/storage/v1/b/" + gcsBucket + "/o/"

	// Below the object's fence: refused stale, nothing read or changed.
	if code, body := get(o+"mine%2Fsrc?alt=media", 7); code != http.StatusConflict || strings.Contains(body, "source body") {
		t.Fatalf("GET with token 7 of an object written with 9: %d %s; want 409", code, body)
	}
	unchanged("a stale read")
	// Outside the prefixes: forbidden, the content not answered.
	if code, body := get(o+"other%2Fsecret?alt=media", 10); code != http.StatusForbidden || strings.Contains(body, "not yours") {
		t.Fatalf("GET outside the prefixes: %d %s; want 403", code, body)
	}
	if code, body := get("/download/storage/v1/b/"+gcsBucket+"/o/other%2Fsecret?alt=media", 10); code != http.StatusForbidden || strings.Contains(body, "not yours") {
		t.Fatalf("download outside the prefixes: %d %s; want 403", code, body)
	}

	// Inside them with a current token: the content, the metadata, the
	// download path, and the official client's JSON reads.
	if code, body := get(o+"mine%2Fsrc?alt=media", 10); code != http.StatusOK || body != "source body" {
		t.Fatalf("GET ?alt=media with token 10: %d %q; want the object's content", code, body)
	}
	if code, body := get(o+"mine%2Fsrc", 10); code != http.StatusOK || !strings.Contains(body, `"mine/src"`) {
		t.Fatalf("GET of the metadata with token 10: %d %s", code, body)
	}
	if code, body := get("/download/storage/v1/b/"+gcsBucket+"/o/mine%2Fsrc?alt=media", 10); code != http.StatusOK || body != "source body" {
		t.Fatalf("download with token 10: %d %q; want the object's content", code, body)
	}
	c, err := storage.NewClient(ctx, option.WithEndpoint(gw+"/storage/v1/"), gcsfence.WithToken(gcsWorkerKey, func() int64 { return 10 }), storage.WithJSONReads())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r, err := c.Bucket(gcsBucket).Object("mine/src").NewReader(ctx)
	if err != nil {
		t.Fatalf("client JSON read with token 10: %v", err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "source body" {
		t.Fatalf("client JSON read: %q; want the object's content", got)
	}
	unchanged("current reads")
	// The read was admitted with token 10: the holder of 9 is fenced out.
	if err := gcsPut(gcsWorker(t, gw, func() int64 { return 9 }), "mine/src", "late write", 0); err == nil {
		t.Fatal("a write with token 9 after a read with 10: accepted")
	}
	unchanged("a write below a read's token")

	// What the gateway names no object for, or another one than the
	// store: refused with the reason.
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/storage/v1/b/" + gcsBucket + "/o?prefix=mine%2F", 400}, // a listing: no object for {bucket}/{object}
		{"/" + gcsBucket + "/mine/src", 501},                      // the XML API
		{o + "mine%2Fsrc%2F?alt=media", 400},                      // a trailing slash in the name
		{o + "mine%2F..%2Fother%2Fsecret?alt=media", 400},         // a .. component
		{o + "mine%2Fsrc/acl/acl", 400},                           // the ACL of "mine/src/acl" for fake-gcs-server
		{o + "mine%2Fsrc?alt=media&Alt=json", 400},                // a parameter twice
	} {
		if code, body := get(tc.path, 10); code != tc.code || strings.Contains(body, "not yours") {
			t.Errorf("GET %s: %d %s; want %d", tc.path, code, body, tc.code)
		}
	}
}

// gcsFenceReadsGateway serves a GCS route with fence_reads whose worker's
// API key is limited to fenced/mine/ (route auth), on a fresh
// fake-gcs-server holding other/secret ("not yours"), which direct reads
// and writes itself.
func gcsFenceReadsGateway(t *testing.T) (gw string, direct *storage.Client) {
	return gcsFenceReadsGatewayOn(t, "memory")
}

// gcsFenceReadsGatewayOn is gcsFenceReadsGateway on fake-gcs-server with
// the backend named ("memory", "filesystem").
func gcsFenceReadsGatewayOn(t *testing.T, backend string) (gw string, direct *storage.Client) {
	t.Helper()
	srv := testenv.FakeGCSBackend(t, backend)
	srv.CreateBucket(t, gcsBucket)
	route := strings.Replace(gcsRouteYAML("objects", "", srv.Endpoint, "", "30s"), "[{owner: worker, sha256:", "[{owner: worker, prefixes: ["+gcsBucket+"/mine/], sha256:", 1) +
		"      fence_reads: true\n"
	gw = copyReadsGateway(t, route, "")
	direct = gcsDirect(t, srv.Endpoint)
	if err := gcsPut(direct, "other/secret", "not yours", 0); err != nil {
		t.Fatal(err)
	}
	return gw, direct
}
