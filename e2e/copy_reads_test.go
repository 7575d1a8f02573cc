package e2e

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"google.golang.org/api/googleapi"

	"cloud.google.com/go/storage"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/server"
)

// This file: on a route with fence_reads, a copy's source is a read,
// authorized against the worker's prefixes and fenced with its token as a
// GET of it is (issue 41). Each store's copies are tried: from outside the
// prefixes (403), from a source fenced above the token (409), and inside
// them with a current token; the store is read to see that a refused copy
// wrote nothing.

// prefixIdentity is the route's authenticated identity, limited to one
// resource prefix (as an API key's or client certificate's prefixes are:
// the gateway checks them the same way, Identity.Allows).
type prefixIdentity string

func (p prefixIdentity) Authenticate(*http.Request) (gateway.Identity, error) {
	return gateway.Identity{Owner: "worker-a", Prefixes: []string{string(p)}}, nil
}

// copyReadsGateway serves the routes of routesYAML (each with fence_reads)
// in this process, over a bbolt fence; prefix, if set, is the identity's
// on each route in place of the routes' auth section.
func copyReadsGateway(t *testing.T, routesYAML, prefix string) string {
	t.Helper()
	cfg, err := config.Parse("copyreads.yaml", []byte("gateway:\n  routes:\n"+routesYAML))
	if err != nil {
		t.Fatal(err)
	}
	st, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	routes, err := server.BuildRoutes(cfg, log, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range routes {
		if !rt.Fences(http.MethodGet) {
			t.Fatalf("route %s does not fence reads", rt.Name)
		}
		if prefix != "" {
			// The route's own authentication (S3 signatures, Azure
			// keys) leaves the identity's prefixes to route auth,
			// which would read the same Authorization header.
			rt.Auth = prefixIdentity(prefix)
		}
	}
	g := gateway.New(gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), gateway.Options{Logger: log})
	g.SetRoutes(routes)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv.URL
}

// wantStatus fails unless err is the store's answer with status.
func wantStatus(t *testing.T, what string, err error, status int) {
	t.Helper()
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != status {
		t.Fatalf("%s: %v; want %d", what, err, status)
	}
}

func TestS3CopySourceIsAReadOnFenceReadsRoutes(t *testing.T) {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, osBucket)
	ctx := context.Background()
	route := s3RouteYAML("objects", "", srv.Endpoint, srv, "", "30s") + "      fence_reads: true\n"
	gw := copyReadsGateway(t, route, osBucket+"/mine/")
	direct := s3Worker(srv.Endpoint, srv.AccessKey, srv.SecretKey, awsfence.Fixed(0))
	b := aws.String(osBucket)
	for key, body := range map[string]string{"other/secret": "not yours", "mine/src": "source body"} {
		if _, err := direct.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String(key), Body: strings.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}
	absent := func(key string) {
		t.Helper()
		if _, err := direct.HeadObject(ctx, &s3.HeadObjectInput{Bucket: b, Key: aws.String(key)}); err == nil {
			t.Fatalf("%s exists in the store: a refused copy wrote it", key)
		}
	}
	worker := func(token int64) *s3.Client { return s3Worker(gw, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(token)) }
	// The newer holder reads mine/src with token 9: a read of it with
	// an older token is refused from now on.
	if _, err := worker(9).HeadObject(ctx, &s3.HeadObjectInput{Bucket: b, Key: aws.String("mine/src")}); err != nil {
		t.Fatal(err)
	}
	if _, err := worker(7).GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: aws.String("mine/src")}); err == nil {
		t.Fatal("a GET with token 7 after a read with 9 passed: the route does not fence reads")
	}

	_, err := worker(10).CopyObject(ctx, &s3.CopyObjectInput{Bucket: b, Key: aws.String("mine/stolen"), CopySource: aws.String(osBucket + "/other/secret")})
	wantStatus(t, "CopyObject from outside the prefixes", err, 403)
	absent("mine/stolen")
	_, err = worker(7).CopyObject(ctx, &s3.CopyObjectInput{Bucket: b, Key: aws.String("mine/stale"), CopySource: aws.String(osBucket + "/mine/src")})
	wantStatus(t, "CopyObject with token 7 from a source read with 9", err, 409)
	absent("mine/stale")

	// UploadPartCopy: the upload is opened inside the prefixes, its
	// parts may not copy what the worker may not read.
	up, err := worker(10).CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: b, Key: aws.String("mine/mp")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = worker(10).UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: b, Key: aws.String("mine/mp"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), CopySource: aws.String(osBucket + "/other/secret")})
	wantStatus(t, "UploadPartCopy from outside the prefixes", err, 403)
	parts, err := direct.ListParts(ctx, &s3.ListPartsInput{Bucket: b, Key: aws.String("mine/mp"), UploadId: up.UploadId})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts.Parts) != 0 {
		t.Fatalf("the upload holds %d parts after a refused UploadPartCopy", len(parts.Parts))
	}

	// Inside the prefixes, with a current token: the copy is made.
	if _, err := worker(10).CopyObject(ctx, &s3.CopyObjectInput{Bucket: b, Key: aws.String("mine/ok"), CopySource: aws.String(osBucket + "/mine/src"),
		MetadataDirective: types.MetadataDirectiveCopy}); err != nil {
		t.Fatalf("CopyObject inside the prefixes with token 10: %v", err)
	}
	out, err := direct.GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: aws.String("mine/ok")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(got) != "source body" {
		t.Fatalf("mine/ok holds %q; want the source's body", got)
	}
}

func TestGCSCopySourceIsAReadOnFenceReadsRoutes(t *testing.T) {
	gw, direct := gcsFenceReadsGateway(t)
	ctx := context.Background()
	absent := func(object string) {
		t.Helper()
		if _, err := direct.Bucket(gcsBucket).Object(object).Attrs(ctx); !errors.Is(err, storage.ErrObjectNotExist) {
			t.Fatalf("%s: %v; want it absent from the store: a refused copy wrote it", object, err)
		}
	}
	wantCode := func(what string, err error, code int) {
		t.Helper()
		var ge *googleapi.Error
		if !errors.As(err, &ge) || ge.Code != code {
			t.Fatalf("%s: %v; want %d", what, err, code)
		}
	}
	worker := func(token int64) *storage.BucketHandle {
		return gcsWorker(t, gw, func() int64 { return token }).Bucket(gcsBucket)
	}
	// The newer holder writes mine/src with token 9 (GETs on such a
	// route: TestGCSReadsOnFenceReadsRoutes).
	if err := gcsPut(gcsWorker(t, gw, func() int64 { return 9 }), "mine/src", "source body", 0); err != nil {
		t.Fatal(err)
	}

	// rewriteTo (the client's Copier).
	_, err := worker(10).Object("mine/stolen").CopierFrom(worker(10).Object("other/secret")).Run(ctx)
	wantCode("rewriteTo from outside the prefixes", err, 403)
	absent("mine/stolen")
	_, err = worker(7).Object("mine/stale").CopierFrom(worker(7).Object("mine/src")).Run(ctx)
	wantCode("rewriteTo with token 7 from a source read with 9", err, 409)
	absent("mine/stale")
	// copyTo.
	resp, body := gcsRaw(t, http.MethodPost, gw+"/storage/v1/b/"+gcsBucket+"/o/other%2Fsecret/copyTo/b/"+gcsBucket+"/o/mine%2Fstolen", 10,
		map[string]string{"Content-Type": "application/json"}, []byte("{}"))
	if resp.StatusCode != 403 {
		t.Fatalf("copyTo from outside the prefixes: %d %s; want 403", resp.StatusCode, body)
	}
	absent("mine/stolen")
	// compose reads the sources its body names
	// (TestGCSComposeSourcesAreReadsOnFenceReadsRoutes).
	_, err = worker(10).Object("mine/composed").ComposerFrom(worker(10).Object("other/secret")).Run(ctx)
	wantCode("compose from outside the prefixes", err, 403)
	absent("mine/composed")

	// Inside the prefixes, with a current token.
	if _, err := worker(10).Object("mine/ok").CopierFrom(worker(10).Object("mine/src")).Run(ctx); err != nil {
		t.Fatalf("rewriteTo inside the prefixes with token 10: %v", err)
	}
	r, err := direct.Bucket(gcsBucket).Object("mine/ok").NewReader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "source body" {
		t.Fatalf("mine/ok holds %q; want the source's body", got)
	}
}

func TestAzureCopySourceIsAReadOnFenceReadsRoutes(t *testing.T) {
	srv := testenv.Azurite(t)
	srv.CreateContainer(t, azContainer)
	ctx := context.Background()
	route := azRouteYAML("blobs", "", srv.Endpoint, "", "30s") + "      fence_reads: true\n"
	gw := copyReadsGateway(t, route, azContainer+"/mine/")
	direct := srv.Client(t)
	if err := azPut(direct, "other/secret", "not yours"); err != nil {
		t.Fatal(err)
	}
	// The newer holder writes mine/src with token 9.
	if err := azPut(azWorker(t, gw, func() int64 { return 9 }), "mine/src", "source body"); err != nil {
		t.Fatal(err)
	}
	blobOf := func(c *azblob.Client, name string) *blob.Client {
		return c.ServiceClient().NewContainerClient(azContainer).NewBlobClient(name)
	}
	absent := func(name string) {
		t.Helper()
		_, err := blobOf(direct, name).GetProperties(ctx, nil)
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound {
			t.Fatalf("%s: %v; want it absent from the store: a refused copy wrote it", name, err)
		}
	}
	wantCode := func(what string, err error, status int) {
		t.Helper()
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != status {
			t.Fatalf("%s: %v; want %d", what, err, status)
		}
	}
	worker := func(token int64) *azblob.Client { return azWorker(t, gw, func() int64 { return token }) }
	src := func(name string) string { return gw + "/" + azContainer + "/" + name }

	// Copy Blob, on the gateway's address and on the store's own.
	_, err := blobOf(worker(10), "mine/stolen").StartCopyFromURL(ctx, src("other/secret"), nil)
	wantCode("Copy Blob from outside the prefixes", err, 403)
	_, err = blobOf(worker(10), "mine/stolen").StartCopyFromURL(ctx, srv.Endpoint+"/"+azContainer+"/other/secret", nil)
	wantCode("Copy Blob from outside the prefixes, on the store's address", err, 403)
	// Copy Blob From URL, Put Block From URL.
	_, err = blobOf(worker(10), "mine/stolen").CopyFromURL(ctx, src("other/secret"), nil)
	wantCode("Copy Blob From URL from outside the prefixes", err, 403)
	bb := worker(10).ServiceClient().NewContainerClient(azContainer).NewBlockBlobClient("mine/stolen")
	_, err = bb.StageBlockFromURL(ctx, "YmxvY2stMDAwMQ==", src("other/secret"), nil)
	wantCode("Put Block From URL from outside the prefixes", err, 403)
	absent("mine/stolen")
	// A source outside the account is no resource of the route.
	_, err = blobOf(worker(10), "mine/foreign").StartCopyFromURL(ctx, "http://127.0.0.1:1/otheraccount/c/b", nil)
	wantCode("Copy Blob from another account", err, 403)
	absent("mine/foreign")
	// Below the source's fence.
	_, err = blobOf(worker(7), "mine/stale").StartCopyFromURL(ctx, src("mine/src"), nil)
	wantCode("Copy Blob with token 7 from a source written with 9", err, 409)
	absent("mine/stale")

	// Inside the prefixes, with a current token.
	if _, err := blobOf(worker(10), "mine/ok").CopyFromURL(ctx, src("mine/src"), nil); err != nil {
		t.Fatalf("Copy Blob From URL inside the prefixes with token 10: %v", err)
	}
	r, err := blobOf(direct, "mine/ok").DownloadStream(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(got) != "source body" {
		t.Fatalf("mine/ok holds %q; want the source's body", got)
	}
}
