package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/fencegate/fencegate/coordinator/client/gcsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

const (
	gcsBucket    = "fenced"
	gcsWorkerKey = "gcs-worker-key-0123456789"
)

// gcsEnv is a fake-gcs-server with one bucket and a fencegate in front.
type gcsEnv struct {
	GCS  *testenv.GCSServer
	Proc *Proc
	GW   string
}

// gcsRouteYAML is one GCS route to endpoint; extra lines go into its gcs
// section.
func gcsRouteYAML(name, host, endpoint, precondition, timeout string, extra ...string) string {
	match := "{path_prefix: /}"
	if host != "" {
		match = fmt.Sprintf("{host: %s, path_prefix: /}", host)
	}
	pre := ""
	if precondition != "" {
		pre = "      precondition: " + precondition + "\n"
	}
	sum := sha256.Sum256([]byte(gcsWorkerKey))
	ex := ""
	for _, l := range extra {
		ex += "        " + l + "\n"
	}
	return fmt.Sprintf(`    - name: %s
      match: %s
      gcs:
        endpoint: %s
        no_auth: true
        timeout: %s
        stamp: true
%s      auth:
        api_keys: [{owner: worker, sha256: %s}]
      resource: "{bucket}/{object}"
%s`, name, match, endpoint, timeout, ex, hex.EncodeToString(sum[:]), pre)
}

func startGCSEnv(t *testing.T, precondition string) *gcsEnv {
	t.Helper()
	srv := testenv.FakeGCS(t)
	srv.CreateBucket(t, gcsBucket)
	p := startFencegate(t, s3GatewayYAML(gcsRouteYAML("objects", "", srv.Endpoint, precondition, "30s")))
	return &gcsEnv{GCS: srv, Proc: p, GW: p.URL("gateway")}
}

// gcsWorker is the official client pointed at endpoint with the worker's
// key, sending token().
func gcsWorker(t testing.TB, endpoint string, token func() int64) *storage.Client {
	t.Helper()
	c, err := storage.NewClient(context.Background(), option.WithEndpoint(endpoint+"/storage/v1/"),
		gcsfence.WithToken(gcsWorkerKey, token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (e *gcsEnv) worker(t testing.TB, token *atomic.Int64) *storage.Client {
	return gcsWorker(t, e.GW, token.Load)
}

// direct reads the durable state from fake-gcs-server itself, never
// through the gateway.
func (e *gcsEnv) direct(t testing.TB) *storage.Client { return gcsDirect(t, e.GCS.Endpoint) }

// gcsDirect is the official client talking to fake-gcs-server at
// endpoint itself, unauthenticated.
func gcsDirect(t testing.TB, endpoint string) *storage.Client {
	t.Helper()
	c, err := storage.NewClient(context.Background(), option.WithEndpoint(endpoint+"/storage/v1/"), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// gcsPut writes an object with the client's default Writer (a multipart
// upload for small objects; chunkSize > 0 and a larger body: resumable).
func gcsPut(c *storage.Client, object, body string, chunkSize int) error {
	w := c.Bucket(gcsBucket).Object(object).NewWriter(context.Background())
	w.ChunkSize = chunkSize
	if _, err := io.Copy(w, strings.NewReader(body)); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// stored returns the object's content and stamp read from fake-gcs-server,
// or "<absent>".
func (e *gcsEnv) stored(t *testing.T, object string) (body, stamp string) {
	t.Helper()
	bkt := e.direct(t).Bucket(gcsBucket)
	attrs, err := bkt.Object(object).Attrs(context.Background())
	if errors.Is(err, storage.ErrObjectNotExist) {
		return "<absent>", ""
	}
	if err != nil {
		t.Fatalf("attrs of %s: %v", object, err)
	}
	return readDirect(t, bkt, object), attrs.Metadata["fencing-token"]
}

// gcsRaw sends one JSON API request to the gateway with the worker's key
// and token (0: none).
func gcsRaw(t *testing.T, method, url string, token int64, hdr map[string]string, body []byte) (*http.Response, string) {
	t.Helper()
	return gcsSend(t, method, url, token, hdr, bytes.NewReader(body))
}

// gcsSend is gcsRaw with the body read from body: sent with a length if
// net/http knows it (a bytes or strings reader), chunked otherwise.
func gcsSend(t *testing.T, method, url string, token int64, hdr map[string]string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+gcsWorkerKey)
	if token > 0 {
		req.Header.Set("Fencing-Token", fmt.Sprint(token))
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A resumable session belongs to the token that opened it. The session
// URL the store answered on its own address is handed out on the
// gateway's; a newer token's write supersedes the session, whose next
// chunk is refused stale and never committed; a chunk with another token
// than the session's and a forged session URL are refused too.
func TestGCSResumableSessionSuperseded(t *testing.T) {
	e := startGCSEnv(t, "")
	open := func(token int64) string {
		resp, body := gcsRaw(t, http.MethodPost, e.GW+"/upload/storage/v1/b/"+gcsBucket+"/o?uploadType=resumable&name=dir%2Fbig", token,
			map[string]string{"Content-Type": "application/json"}, []byte(`{"contentType":"text/plain"}`))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("open session: %s %s", resp.Status, body)
		}
		loc := resp.Header.Get("Location")
		if !strings.HasPrefix(loc, e.GW+"/") {
			t.Fatalf("session URL %q is not on the gateway %s: its chunks would go around the fence", loc, e.GW)
		}
		return loc
	}
	chunk := make([]byte, 256<<10)
	for i := range chunk {
		chunk[i] = 'a'
	}
	loc := open(41)
	resp, body := gcsRaw(t, http.MethodPut, loc, 41, map[string]string{"Content-Range": fmt.Sprintf("bytes 0-%d/*", len(chunk)-1)}, chunk)
	if resp.StatusCode != http.StatusPermanentRedirect {
		t.Fatalf("first chunk: %s %s", resp.Status, body)
	}
	// Another token on this session: refused, whichever is newer.
	resp, body = gcsRaw(t, http.MethodPut, loc, 43, map[string]string{"Content-Range": fmt.Sprintf("bytes %d-%d/%d", len(chunk), len(chunk)+1, len(chunk)+2)}, []byte("zz"))
	wantCode(t, "chunk with another token", resp.StatusCode, body, http.StatusBadRequest, "invalid_fencing_token")
	// A forged binding: refused.
	forged := strings.Replace(loc, "fencegate_session=41.", "fencegate_session=44.", 1)
	resp, body = gcsRaw(t, http.MethodPut, forged, 44, map[string]string{"Content-Range": "bytes */*"}, nil)
	wantCode(t, "forged session", resp.StatusCode, body, http.StatusNotFound, "invalid_request")

	if err := gcsPut(e.worker(t, tokenOf(42)), "dir/big", "B", 0); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	resp, body = gcsRaw(t, http.MethodPut, loc, 41, map[string]string{"Content-Range": fmt.Sprintf("bytes %d-%d/%d", len(chunk), len(chunk)+1, len(chunk)+2)}, []byte("zz"))
	wantCode(t, "last chunk of the superseded session", resp.StatusCode, body, http.StatusConflict, "stale_fencing_token")
	if got, stamp := e.stored(t, "dir/big"); got != "B" || stamp != "42" {
		t.Fatalf("stored %.20q stamp %q; want B stamped 42", got, stamp)
	}

	// A session of the current token completes, stamped at its start.
	loc = open(42)
	resp, body = gcsRaw(t, http.MethodPut, loc, 42, map[string]string{"Content-Range": "bytes 0-1/2"}, []byte("C!"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("session of the current token: %s %s", resp.Status, body)
	}
	if got, stamp := e.stored(t, "dir/big"); got != "C!" || stamp != "42" {
		t.Fatalf("stored %q stamp %q; want C! stamped 42", got, stamp)
	}
}

// Refusals are in the JSON API's error format, which the official client
// reads into a googleapi.Error whose reason is fencegate's code.
func TestGCSRefusalFormat(t *testing.T) {
	e := startGCSEnv(t, "")
	if err := gcsPut(e.worker(t, tokenOf(42)), "r", "B", 0); err != nil {
		t.Fatal(err)
	}
	err := gcsPut(e.worker(t, tokenOf(41)), "r", "A", 0)
	var ge *googleapi.Error
	if !errors.As(err, &ge) || ge.Code != http.StatusConflict || len(ge.Errors) != 1 || ge.Errors[0].Reason != "stale_fencing_token" {
		t.Fatalf("err = %#v; want a googleapi.Error 409 with reason stale_fencing_token", err)
	}
	se, _ := gcsfence.Stale(err)
	if se == nil || se.Resource != gcsBucket+"/r" || se.Token != 41 || se.Highest != 42 || se.Route != "objects" {
		t.Fatalf("stale error %+v; want resource %s/r, token 41, highest 42, route objects", se, gcsBucket)
	}
	// A missing token and a missing key, in the same format.
	resp, body := gcsRaw(t, http.MethodDelete, e.GW+"/storage/v1/b/"+gcsBucket+"/o/r", 0, nil, nil)
	if resp.StatusCode != http.StatusPreconditionRequired || !strings.Contains(body, `"reason":"missing_fencing_token"`) {
		t.Fatalf("no token: %s %s", resp.Status, body)
	}
	req, _ := http.NewRequest(http.MethodDelete, e.GW+"/storage/v1/b/"+gcsBucket+"/o/r", nil)
	req.Header.Set("Fencing-Token", "50")
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r2.Body)
	r2.Body.Close()
	if r2.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), `"reason":"unauthorized"`) {
		t.Fatalf("no key: %s %s", r2.Status, b)
	}
	if got, _ := e.stored(t, "r"); got != "B" {
		t.Fatalf("stored %q; want B", got)
	}
	// Writes the gateway cannot name the objects of are refused: batch,
	// the XML API, an object path with a raw "/".
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/batch/storage/v1"},
		{http.MethodPut, "/" + gcsBucket + "/r"},
		{http.MethodDelete, "/storage/v1/b/" + gcsBucket + "/o/dir/r"},
	} {
		resp, body := gcsRaw(t, c.method, e.GW+c.path, 50, nil, nil)
		if resp.StatusCode != http.StatusNotImplemented {
			t.Errorf("%s %s: %s %s; want 501", c.method, c.path, resp.Status, body)
		}
	}
}
