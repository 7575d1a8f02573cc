package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"

	"github.com/fencegate/fencegate/internal/testenv"
)

// On a GCS route with fence_reads, a compose's sources, named in its
// body, are reads: each is authorized against the worker's prefixes and
// admitted with the request's token, as a GET of it is. A body that a
// reader could read another way (a case-variant or repeated member, which
// fake-gcs-server's decoder folds) is refused, and so is a source name a
// backend would clean. The store (fake-gcs-server, memory and filesystem
// backends) is read directly: a refused compose writes no object and
// leaves the existing ones as they were.
func TestGCSComposeSourcesAreReadsOnFenceReadsRoutes(t *testing.T) {
	for _, backend := range []string{"memory", "filesystem"} {
		t.Run(backend, func(t *testing.T) { testGCSComposeSourcesAreReads(t, backend) })
	}
}

func testGCSComposeSourcesAreReads(t *testing.T, backend string) {
	gw, direct := gcsFenceReadsGatewayOn(t, backend)
	ctx := context.Background()
	bkt := direct.Bucket(gcsBucket)
	worker := func(token int64) *storage.BucketHandle {
		return gcsWorker(t, gw, func() int64 { return token }).Bucket(gcsBucket)
	}
	// The newer holder writes mine/src with token 9; mine/dst and
	// mine/part are written with 5.
	for _, w := range []struct {
		object, body string
		token        int64
	}{{"mine/src", "source body", 9}, {"mine/dst", "destination body", 5}, {"mine/part", " and part", 5}} {
		if err := gcsPut(gcsWorker(t, gw, func() int64 { return w.token }), w.object, w.body, 0); err != nil {
			t.Fatal(err)
		}
	}
	state := func() []string { return gcsObjects(t, bkt) }
	before := state()
	unchanged := func(what string) {
		t.Helper()
		if after := state(); !slices.Equal(after, before) {
			t.Fatalf("%s: the store holds %v; want %v unchanged", what, after, before)
		}
	}
	wantCode := func(what string, err error, code int) {
		t.Helper()
		var ge *googleapi.Error
		if !errors.As(err, &ge) || ge.Code != code {
			t.Fatalf("%s: %v; want %d", what, err, code)
		}
	}

	// The official client's compose.
	_, err := worker(10).Object("mine/stolen").ComposerFrom(worker(10).Object("mine/part"), worker(10).Object("other/secret")).Run(ctx)
	wantCode("compose from outside the prefixes", err, 403)
	unchanged("a compose from outside the prefixes")
	_, err = worker(7).Object("mine/stale").ComposerFrom(worker(7).Object("mine/part"), worker(7).Object("mine/src")).Run(ctx)
	wantCode("compose with token 7 from a source written with 9", err, 409)
	unchanged("a stale compose into a new object")
	_, err = worker(7).Object("mine/dst").ComposerFrom(worker(7).Object("mine/dst"), worker(7).Object("mine/src")).Run(ctx)
	wantCode("compose with token 7 onto mine/dst from a source written with 9", err, 409)
	unchanged("a stale compose onto an existing object")

	// Bodies another reader reads otherwise, and names a backend
	// cleans: refused, nothing written.
	compose := func(dst, body string, token int64) (int, string) {
		t.Helper()
		resp, b := gcsRaw(t, http.MethodPost, gw+"/storage/v1/b/"+gcsBucket+"/o/"+dst+"/compose", token,
			map[string]string{"Content-Type": "application/json"}, []byte(body))
		return resp.StatusCode, b
	}
	for _, body := range []string{
		`{"SourceObjects":[{"name":"other/secret"}]}`,
		`{"sourceObjects":[{"name":"mine/part"}],"sourceobjects":[{"name":"other/secret"}]}`,
		`{"sourceObjects":[{"name":"mine/part","Name":"other/secret"}]}`,
		`{"sourceObjects":[{"name":"mine/part","name":"other/secret"}]}`,
		`{"sourceObjects":[{"NAME":"other/secret"}]}`,
		`{"sourceObjects":[{"name":"mine/part"}]} {"sourceObjects":[{"name":"other/secret"}]}`,
		`{"sourceObjects":[{"name":"mine/../other/secret"}]}`,
		`{"sourceObjects":[{"name":"mine/part","bucket":"elsewhere"}]}`,
		`{"sourceObjects":[{"generation":"1"}]}`,
	} {
		if code, b := compose("mine%2Fx", body, 10); code != http.StatusBadRequest {
			t.Errorf("compose %s: %d %s; want 400", body, code, b)
		}
	}
	unchanged("refused compose bodies")

	// Inside the prefixes with a current token: composed, with the
	// destination's members of the body forwarded as sent.
	if code, b := compose("mine%2Fcomposed", `{"destination": {"contentType": "text/x-composed"},`+
		` "sourceObjects": [{"name": "mine/src"}, {"name": "mine/part", "generation": "`+storedGeneration(t, bkt, "mine/part")+`"}]}`, 10); code != http.StatusOK {
		t.Fatalf("compose inside the prefixes with token 10: %d %s", code, b)
	}
	a, err := bkt.Object("mine/composed").Attrs(ctx)
	if err != nil || a.ContentType != "text/x-composed" {
		t.Fatalf("mine/composed: %+v, %v; want content type text/x-composed", a, err)
	}
	if got := readDirect(t, bkt, "mine/composed"); got != "source body and part" {
		t.Fatalf("mine/composed holds %q; want the sources' bodies", got)
	}
	if _, err := worker(10).Object("mine/dst").ComposerFrom(worker(10).Object("mine/dst"), worker(10).Object("mine/part")).Run(ctx); err != nil {
		t.Fatalf("compose onto mine/dst with token 10: %v", err)
	}
	if got := readDirect(t, bkt, "mine/dst"); got != "destination body and part" {
		t.Fatalf("mine/dst holds %q after an append", got)
	}
	// The compose admitted token 10 on its source: the holder of 9 is
	// fenced out of mine/src.
	fencedOutBy(t, gw, bkt, "mine/src", "a compose with 10", "source body")
}

// On a GCS route with fence_reads, a GET of an object's ACL (the list, or
// one entity) is a read of the object: stale below its fence, forbidden
// outside the prefixes. A path that fake-gcs-server's greedy routes read
// as the ACL of another object ("x/acl" with a literal slash before its
// /acl) is refused: the object "mine/x/acl", written with token 9, is not
// read around its fence by a token-7 reader naming "mine/x".
func TestGCSObjectACLReadsOnFenceReadsRoutes(t *testing.T) {
	for _, backend := range []string{"memory", "filesystem"} {
		t.Run(backend, func(t *testing.T) { testGCSObjectACLReads(t, backend) })
	}
}

func testGCSObjectACLReads(t *testing.T, backend string) {
	gw, direct := gcsFenceReadsGatewayOn(t, backend)
	bkt := direct.Bucket(gcsBucket)
	for _, o := range []string{"mine/src", "mine/x/acl"} {
		if err := gcsPut(gcsWorker(t, gw, func() int64 { return 9 }), o, "written with 9", 0); err != nil {
			t.Fatal(err)
		}
	}
	get := func(method, path string, token int64) (int, string) {
		t.Helper()
		resp, body := gcsRaw(t, method, gw+"/storage/v1/b/"+gcsBucket+"/o/"+path, token, nil, nil)
		return resp.StatusCode, body
	}
	// What an ACL looks like when the store answers it (a refusal's
	// body names the resource, never an entity).
	const leaked = `"entity"`
	for _, tc := range []struct {
		method, path string
		token        int64
		code         int
	}{
		{"GET", "mine%2Fsrc/acl", 7, 409},
		{"GET", "mine%2Fsrc/acl/allUsers", 7, 409},
		{"GET", "other%2Fsecret/acl", 10, 403},
		{"GET", "mine%2Fx%2Facl/acl", 7, 409},
		// fake-gcs-server: the ACL list of "mine/x/acl"; the store: an
		// entity "acl" of "mine/x" (fenced at 0).
		{"GET", "mine%2Fx/acl/acl", 7, 400},
		{"GET", "mine/x/acl/acl", 7, 400},
		// fake-gcs-server: a HEAD of the object "mine/src/acl".
		{"HEAD", "mine%2Fsrc/acl", 10, 400},
	} {
		if code, body := get(tc.method, tc.path, tc.token); code != tc.code || strings.Contains(body, leaked) {
			t.Errorf("%s %s with token %d: %d %s; want %d", tc.method, tc.path, tc.token, code, body, tc.code)
		}
	}
	// With a current token: the store's answer.
	if code, body := get("GET", "mine%2Fx%2Facl/acl", 10); code != http.StatusOK || !strings.Contains(body, leaked) || !strings.Contains(body, `"mine/x/acl"`) {
		t.Fatalf("GET of mine/x/acl's ACL with token 10: %d %s; want its ACL", code, body)
	}
	code, body := get("GET", "mine%2Fsrc/acl", 10)
	if code != http.StatusOK || !strings.Contains(body, leaked) {
		t.Fatalf("GET of mine/src's ACL with token 10: %d %s; want its ACL", code, body)
	}
	if code, body := get("GET", "mine%2Fsrc/acl/projectOwner-test-project", 10); code != http.StatusOK || !strings.Contains(body, `"object":"mine/src"`) {
		t.Fatalf("GET of an entity of mine/src's ACL with token 10: %d %s; want the entry", code, body)
	}
	// The ACL read admitted token 10 on mine/src: the holder of 9 is
	// fenced out.
	fencedOutBy(t, gw, bkt, "mine/src", "an ACL read with 10", "written with 9")
}

// fencedOutBy checks that a read (what) admitted token 10 on object, which
// holds content: a write of it with token 9 through the gateway at gw is
// refused, and the store's object is the same generation and content.
func fencedOutBy(t *testing.T, gw string, bkt *storage.BucketHandle, object, what, content string) {
	t.Helper()
	before, err := bkt.Object(object).Attrs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := gcsPut(gcsWorker(t, gw, func() int64 { return 9 }), object, "late write", 0); err == nil {
		t.Fatalf("a write of %s with token 9 after %s: accepted", object, what)
	}
	a, err := bkt.Object(object).Attrs(context.Background())
	if err != nil || a.Generation != before.Generation {
		t.Fatalf("%s after a refused write: %+v, %v; want generation %d", object, a, err, before.Generation)
	}
	if got := readDirect(t, bkt, object); got != content {
		t.Fatalf("%s holds %q after a refused write; want %q", object, got, content)
	}
}

// gcsObjects is the store's state as bkt lists it: every object's name,
// generation, metageneration and content, sorted.
func gcsObjects(t *testing.T, bkt *storage.BucketHandle) []string {
	t.Helper()
	var s []string
	it := bkt.Objects(context.Background(), nil)
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		s = append(s, a.Name+"@"+strconv.FormatInt(a.Generation, 10)+"."+strconv.FormatInt(a.Metageneration, 10)+"="+readDirect(t, bkt, a.Name))
	}
	slices.Sort(s)
	return s
}

// readDirect is an object's content, read from the store itself.
func readDirect(t *testing.T, bkt *storage.BucketHandle, object string) string {
	t.Helper()
	r, err := bkt.Object(object).NewReader(context.Background())
	if err != nil {
		t.Fatalf("read %s: %v", object, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// storedGeneration is an object's generation in the store, in decimal.
func storedGeneration(t *testing.T, bkt *storage.BucketHandle, object string) string {
	t.Helper()
	a, err := bkt.Object(object).Attrs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return strconv.FormatInt(a.Generation, 10)
}

// A compose body over the route's max_body_bytes is refused 413
// body_too_large in the JSON API's error format before the gateway reads
// its names (a declared length over the limit is not read at all; a
// chunked body is read up to the limit), before the fence and before
// fake-gcs-server: the destination is not composed, and its fence is not
// advanced by the compose's newer token. So is a resumable upload's
// metadata sent chunked over the limit (read after the fence, as it was:
// nothing is forwarded). Before, the compose body was read (up to 1 MiB)
// and its names checked first: a body read two ways was answered 400, a
// chunked one was admitted (its token 9 advanced the destination's fence,
// and the holder's token 4 was then refused) and answered 400 "the request
// body ended early", as was the chunked metadata.
func TestGCSComposeOverMaxBodyBytes(t *testing.T) {
	const limit = 1000
	srv := testenv.FakeGCS(t)
	srv.CreateBucket(t, gcsBucket)
	p := startFencegate(t, s3GatewayYAML(gcsRouteYAML("objects", "", srv.Endpoint, "", "30s")+
		fmt.Sprintf("      max_body_bytes: %d\n", limit)))
	gw := p.URL("gateway")
	bkt := gcsDirect(t, srv.Endpoint).Bucket(gcsBucket)
	for _, o := range []string{"a", "b", "dst"} {
		if err := gcsPut(gcsWorker(t, gw, func() int64 { return 4 }), o, o+" body", 0); err != nil {
			t.Fatal(err)
		}
	}
	before := gcsObjects(t, bkt)
	send := func(method, path, body string, chunked bool, token int64) (int, string) {
		t.Helper()
		var rd io.Reader = strings.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // a length the client cannot know
		}
		resp, b := gcsSend(t, method, gw+path, token, map[string]string{"Content-Type": "application/json"}, rd)
		return resp.StatusCode, b
	}
	composePath := "/storage/v1/b/" + gcsBucket + "/o/dst/compose"
	pad := `"destination":{"metadata":{"pad":"` + strings.Repeat("x", limit) + `"}}`
	for _, tc := range []struct {
		name, path, body string
		chunked          bool
	}{
		{"compose with a length", composePath, `{"sourceObjects":[{"name":"a"},{"name":"b"}],` + pad + `}`, false},
		{"compose with a length, read two ways", composePath, `{"sourceObjects":[{"name":"a"}],"SourceObjects":[{"name":"b"}],` + pad + `}`, false},
		{"compose chunked", composePath, `{"sourceObjects":[{"name":"a"},{"name":"b"}],` + pad + `}`, true},
		{"compose chunked, read two ways", composePath, `{"sourceObjects":[{"name":"a"}],"SourceObjects":[{"name":"b"}],` + pad + `}`, true},
		{"resumable upload's metadata chunked", "/upload/storage/v1/b/" + gcsBucket + "/o?uploadType=resumable&name=dst",
			`{"name":"dst","metadata":{"pad":"` + strings.Repeat("x", limit) + `"}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := send(http.MethodPost, tc.path, tc.body, tc.chunked, 9)
			if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"reason":"body_too_large"`) {
				t.Fatalf("%d %s; want 413 body_too_large", code, body)
			}
			if h := fenceHighest(t, p.URL("admin"), gcsBucket+"/dst"); !strings.HasPrefix(tc.name, "resumable") && h != 4 {
				t.Fatalf("the fence of dst is %d after a refused compose with token 9; want 4", h)
			}
		})
	}
	if after := gcsObjects(t, bkt); !slices.Equal(after, before) {
		t.Fatalf("the store holds %v after refused requests; want %v unchanged", after, before)
	}
	// Within the limit, chunked, a compose goes through.
	if code, body := send(http.MethodPost, composePath, `{"sourceObjects":[{"name":"a"},{"name":"b"}]}`, true, 9); code != http.StatusOK {
		t.Fatalf("compose within the limit: %d %s", code, body)
	}
	if got := readDirect(t, bkt, "dst"); got != "a bodyb body" {
		t.Fatalf("dst holds %q after a compose within the limit; want the sources' bodies", got)
	}
}
