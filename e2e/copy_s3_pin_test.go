package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// A stamped COPY-directive copy is pinned on the source's ETag, not its
// version: a metadata-only change of the source between the gateway's
// HEAD and the copy keeps the ETag, so the copy goes on with the metadata
// the HEAD read. This is not a mixed state: the same ETag is the same
// content, so the destination holds the content and the metadata the
// source held at the HEAD, one state of the source, as if the copy came
// before the change (which it overlapped). Pinning on a versionId would
// name that same state. VersityGW holds both objects.
func TestS3CopyPinnedOnETagCopiesOneState(t *testing.T) {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, osBucket)
	ctx := context.Background()
	direct := s3Worker(srv.Endpoint, srv.AccessKey, srv.SecretKey, awsfence.Fixed(0))
	b := aws.String(osBucket)
	// Between the gateway and VersityGW: when armed, the source's
	// metadata is replaced right after the gateway's HEAD of it.
	var armed atomic.Bool
	store, _ := url.Parse(srv.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(store)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead || !strings.HasSuffix(r.URL.Path, "/"+osBucket+"/src") || !armed.Swap(false) {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		if _, err := direct.CopyObject(ctx, &s3.CopyObjectInput{Bucket: b, Key: aws.String("src"), CopySource: aws.String(osBucket + "/src"),
			MetadataDirective: types.MetadataDirectiveReplace, Metadata: map[string]string{"owner": "new-owner"}}); err != nil {
			t.Error(err)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
	}))
	defer proxy.Close()
	route := strings.Replace(s3RouteYAML("objects", "", proxy.URL, srv, "", "30s"),
		"        timeout: 30s\n", "        timeout: 30s\n        stamp: true\n", 1)
	p := startFencegate(t, s3GatewayYAMLStore(s3BoltStore, route))
	worker := s3Worker(p.URL("gateway"), s3WorkerKey, s3WorkerSecret, awsfence.Fixed(9))
	if _, err := direct.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String("src"), Body: strings.NewReader("source body"),
		Metadata: map[string]string{"owner": "old-owner"}}); err != nil {
		t.Fatal(err)
	}
	head := func(key string) *s3.HeadObjectOutput {
		t.Helper()
		h, err := direct.HeadObject(ctx, &s3.HeadObjectInput{Bucket: b, Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	before := head("src")

	armed.Store(true)
	if _, err := worker.CopyObject(ctx, &s3.CopyObjectInput{Bucket: b, Key: aws.String("dst"), CopySource: aws.String(osBucket + "/src")}); err != nil {
		t.Fatalf("copy with token 9: %v", err)
	}
	if armed.Load() {
		t.Fatal("the gateway did not read the source")
	}
	after := head("src")
	if aws.ToString(after.ETag) != aws.ToString(before.ETag) || after.Metadata["owner"] != "new-owner" {
		t.Fatalf("the source's metadata change: ETag %s -> %s, metadata %v: the test cannot tell",
			aws.ToString(before.ETag), aws.ToString(after.ETag), after.Metadata)
	}
	dst := head("dst")
	out, err := direct.GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: aws.String("dst")})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(out.Body)
	out.Body.Close()
	meta := lowerKeys(dst.Metadata, func(v string) string { return v })
	if string(body) != "source body" || meta["owner"] != "old-owner" || meta["fencing-token"] != "9" || len(meta) != 2 {
		t.Fatalf("the destination holds %q with metadata %v; want the source's state at the HEAD (old-owner), stamped 9", body, meta)
	}
}
