package e2e

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/fencegate/fencegate/internal/testenv"
)

// A Copy Blob or Copy Blob From URL on a stamping Azure route keeps the
// source's metadata and carries the copy's token: the gateway reads the
// source's metadata and sends it with the copy's stamp, on the condition
// that the source is still the version read. Before, the stamp alone was
// the copy's metadata, which Azure then takes instead of the source's:
// the users' metadata was lost. A source written between the gateway's
// read and the copy fails the copy (412), the destination unchanged.
func TestAzureCopyKeepsSourceMetadata(t *testing.T) {
	srv := testenv.Azurite(t)
	srv.CreateContainer(t, azContainer)
	direct := srv.Client(t)
	ctx := context.Background()
	// Between the gateway and Azurite: when armed, the source is written
	// anew right after the gateway's read of it.
	var armed atomic.Bool
	store, _ := url.Parse(srv.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: store.Scheme, Host: store.Host})
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead || !strings.HasSuffix(r.URL.Path, "/"+azContainer+"/src") || !armed.Swap(false) {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		if err := azPut(direct, "src", "changed source"); err != nil {
			t.Error(err)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
	}))
	defer proxy.Close()
	p := startFencegate(t, s3GatewayYAML(azRouteYAML("blobs", "", proxy.URL+store.Path, "", "30s")))
	var tok atomic.Int64
	worker := azWorker(t, p.URL("gateway"), tok.Load)
	e := &azEnv{Az: srv, Proc: p, GW: p.URL("gateway")}
	put := func(token int64, name, body string) {
		t.Helper()
		tok.Store(token)
		_, err := worker.UploadBuffer(ctx, azContainer, name, []byte(body), &azblob.UploadBufferOptions{
			HTTPHeaders: &blob.HTTPHeaders{BlobContentType: to("text/csv")},
			Metadata:    map[string]*string{"owner": to("src-owner"), "fencing_token": to("999")}})
		if err != nil {
			t.Fatalf("write %s with token %d: %v", name, token, err)
		}
	}
	put(5, "src", "source body")
	put(9, "dst", "old dst")
	put(9, "dst2", "old dst2")
	srcETag, srcMeta := e.props(t, "src")
	if meta(srcMeta, "fencing_token") != "5" {
		t.Fatalf("source metadata stamped %q; want 5", meta(srcMeta, "fencing_token"))
	}
	cc := worker.ServiceClient().NewContainerClient(azContainer)
	srcURL := cc.NewBlobClient("src").URL()
	dstClient := func(name string) *blockblob.Client { return cc.NewBlockBlobClient(name) }
	wantCopied := func(name, body string, token string) {
		t.Helper()
		b, stamp := e.stored(t, name)
		props, err := direct.ServiceClient().NewContainerClient(azContainer).NewBlobClient(name).GetProperties(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ct := ""
		if props.ContentType != nil {
			ct = *props.ContentType
		}
		if b != body || stamp != token || meta(props.Metadata, "owner") != "src-owner" || len(props.Metadata) != 2 || ct != "text/csv" {
			t.Fatalf("%s holds %q stamped %q, metadata %d entries (owner %q), Content-Type %q; want %q, the source's metadata, stamped %s",
				name, b, stamp, len(props.Metadata), meta(props.Metadata, "owner"), ct, body, token)
		}
	}
	wantStatus := func(what string, err error, status int) {
		t.Helper()
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != status {
			t.Fatalf("%s: %v; want status %d", what, err, status)
		}
	}

	// A worker's condition on another version of the source: 412, the
	// destination unchanged.
	tok.Store(9)
	dstETag, _ := e.props(t, "dst")
	_, err := dstClient("dst").StartCopyFromURL(ctx, srcURL, &blob.StartCopyFromURLOptions{
		SourceModifiedAccessConditions: &blob.SourceModifiedAccessConditions{SourceIfMatch: to(azcore.ETag(`"0x8D0000000000000"`))}})
	wantStatus("copy on a source condition that fails", err, http.StatusPreconditionFailed)
	if etag, _ := e.props(t, "dst"); etag != dstETag {
		t.Fatal("the failed copy changed the destination")
	}

	// Copy Blob, with the worker's holding condition, and Copy Blob From URL.
	if _, err := dstClient("dst").StartCopyFromURL(ctx, srcURL, &blob.StartCopyFromURLOptions{
		SourceModifiedAccessConditions: &blob.SourceModifiedAccessConditions{SourceIfMatch: &srcETag}}); err != nil {
		t.Fatalf("Copy Blob with token 9: %v", err)
	}
	wantCopied("dst", "source body", "9")
	if _, err := dstClient("dst2").CopyFromURL(ctx, srcURL, nil); err != nil {
		t.Fatalf("Copy Blob From URL with token 9: %v", err)
	}
	wantCopied("dst2", "source body", "9")

	// The source written between the gateway's read and the copy: 412,
	// the destination unchanged.
	dstETag, _ = e.props(t, "dst2")
	armed.Store(true)
	_, err = dstClient("dst2").StartCopyFromURL(ctx, srcURL, nil)
	wantStatus("copy of a source written after the gateway's read", err, http.StatusPreconditionFailed)
	if armed.Load() {
		t.Fatal("the gateway did not read the source")
	}
	if etag, _ := e.props(t, "dst2"); etag != dstETag {
		t.Fatal("the copy of a changed source changed the destination")
	}

	// The stamps rebuild the destination's fence at 9: token 8 is refused.
	// dst and dst2 (src, written around the gateway, has no stamp).
	rebuildFrom(t, p, "--container", azContainer, 2, `{"resource":"fenced/dst","highest":9`)
	p.Restart()
	tok.Store(8)
	_, err = dstClient("dst").StartCopyFromURL(ctx, srcURL, nil)
	wantAzStale(t, "token 8 on the copied destination", err)
	wantCopied("dst", "source body", "9")
}
