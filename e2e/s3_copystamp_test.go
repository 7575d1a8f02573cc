package e2e

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// startS3Stamping starts VersityGW with osBucket and a gateway whose route
// stamps writes.
func startS3Stamping(t *testing.T) (*testenv.S3Server, *Proc) {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, osBucket)
	route := strings.Replace(s3RouteYAML("objects", "", srv.Endpoint, srv, "", "30s"),
		"        timeout: 30s\n", "        timeout: 30s\n        stamp: true\n", 1)
	p := startFencegate(t, s3GatewayYAMLStore(s3BoltStore, route))
	return srv, p
}

// A CopyObject with the default COPY metadata directive carries the copy
// request's token, not the source's: S3 copies the source's metadata,
// stamp included, so the gateway sends the copy as REPLACE with the
// source's metadata and content headers and its own stamp. Before, a
// destination fenced at 9 rebuilt (`fence rebuild`) from the source's
// stamp 5, and a holder of token 8 could write it again.
func TestS3CopyObjectStampsCopyToken(t *testing.T) {
	srv, p := startS3Stamping(t)
	ctx := context.Background()
	worker := func(token int64) *s3.Client {
		return s3Worker(p.URL("gateway"), s3WorkerKey, s3WorkerSecret, awsfence.Fixed(token))
	}
	direct := s3Worker(srv.Endpoint, srv.AccessKey, srv.SecretKey, awsfence.Fixed(0))
	b := aws.String(osBucket)
	put := func(c *s3.Client, key, body string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String(key), Body: strings.NewReader(body),
			ContentType: aws.String("text/csv"), ContentLanguage: aws.String("de"),
			Metadata: map[string]string{"owner": "src-owner", "fencing-token": "999"}})
		return err
	}
	if err := put(worker(5), "src", "source body"); err != nil {
		t.Fatal(err)
	}
	if err := put(worker(9), "dst", "old dst"); err != nil {
		t.Fatal(err)
	}
	copyTo := func(token int64, key string, in s3.CopyObjectInput) error {
		in.Bucket, in.Key, in.CopySource = b, aws.String(key), aws.String(osBucket+"/src")
		_, err := worker(token).CopyObject(ctx, &in)
		return err
	}
	head := func(key string) *s3.HeadObjectOutput {
		t.Helper()
		h, err := direct.HeadObject(ctx, &s3.HeadObjectInput{Bucket: b, Key: aws.String(key)})
		if err != nil {
			t.Fatalf("direct HeadObject %s: %v", key, err)
		}
		return h
	}
	src := head("src")
	if got := lowerKeys(src.Metadata, func(v string) string { return v }); got["fencing-token"] != "5" {
		t.Fatalf("source metadata %v; want stamp 5", got)
	}

	// A worker's copy-source condition on another version of the source
	// is answered as S3 answers it (412), the destination unchanged.
	err := copyTo(9, "dst", s3.CopyObjectInput{CopySourceIfMatch: aws.String(`"0123456789abcdef0123456789abcdef"`)})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "PreconditionFailed" {
		t.Fatalf("copy on a source condition that fails: %v; want PreconditionFailed", err)
	}
	if h := head("dst"); aws.ToString(h.ETag) == aws.ToString(src.ETag) {
		t.Fatal("the failed copy changed the destination")
	}

	// The copy, with the worker's own (holding) condition on the source.
	if err := copyTo(9, "dst", s3.CopyObjectInput{CopySourceIfMatch: src.ETag}); err != nil {
		t.Fatalf("copy with token 9: %v", err)
	}
	dst := head("dst")
	meta := lowerKeys(dst.Metadata, func(v string) string { return v })
	if meta["fencing-token"] != "9" || meta["owner"] != "src-owner" || len(meta) != 2 ||
		aws.ToString(dst.ContentType) != "text/csv" || aws.ToString(dst.ContentLanguage) != "de" {
		t.Fatalf("destination metadata %v, Content-Type %q, Content-Language %q; want the source's, stamped 9",
			meta, aws.ToString(dst.ContentType), aws.ToString(dst.ContentLanguage))
	}
	out, err := direct.GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: aws.String("dst")})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(body) != "source body" {
		t.Fatalf("destination holds %q; want the source's body", body)
	}

	// The stamps rebuild the destination's fence at 9: token 8 is refused.
	rebuildFrom(t, p, "--bucket", osBucket, 2, `{"resource":"fenced/dst","highest":9`)
	p.Restart()
	err = copyTo(8, "dst", s3.CopyObjectInput{})
	osS3.wantStale(t, "token 8 on the copied destination", err)
	if h := head("dst"); aws.ToString(h.ETag) != aws.ToString(dst.ETag) ||
		lowerKeys(h.Metadata, func(v string) string { return v })["fencing-token"] != "9" {
		t.Fatalf("destination changed by token 8: %+v", h)
	}
}

// A stamped COPY-directive CopyObject sent as REPLACE keeps S3's meaning
// of x-amz-website-redirect-location, which neither directive copies
// from the source: the destination gets the copy request's own value, or
// none. Before, the gateway dropped the worker's value and sent the
// source's. The store's own copy, made directly, is the oracle.
func TestS3CopyStampRedirectAsTheStore(t *testing.T) {
	srv, p := startS3Stamping(t)
	ctx := context.Background()
	worker := s3Worker(p.URL("gateway"), s3WorkerKey, s3WorkerSecret, awsfence.Fixed(9))
	direct := s3Worker(srv.Endpoint, srv.AccessKey, srv.SecretKey, awsfence.Fixed(0))
	b := aws.String(osBucket)
	if _, err := worker.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String("src"), Body: strings.NewReader("page"),
		WebsiteRedirectLocation: aws.String("/src-page")}); err != nil {
		t.Fatal(err)
	}
	redirect := func(key string) string {
		t.Helper()
		h, err := direct.HeadObject(ctx, &s3.HeadObjectInput{Bucket: b, Key: aws.String(key)})
		if err != nil {
			t.Fatalf("direct HeadObject %s: %v", key, err)
		}
		return aws.ToString(h.WebsiteRedirectLocation)
	}
	if got := redirect("src"); got != "/src-page" {
		t.Fatalf("the source's redirect: %q; the store keeps none, the test cannot tell", got)
	}
	for _, own := range []string{"", "/dst-page"} {
		in := func(key string) *s3.CopyObjectInput {
			c := &s3.CopyObjectInput{Bucket: b, Key: aws.String(key), CopySource: aws.String(osBucket + "/src")}
			if own != "" {
				c.WebsiteRedirectLocation = aws.String(own)
			}
			return c
		}
		if _, err := direct.CopyObject(ctx, in("oracle")); err != nil {
			t.Fatal(err)
		}
		if _, err := worker.CopyObject(ctx, in("dst")); err != nil {
			t.Fatal(err)
		}
		if got, want := redirect("dst"), redirect("oracle"); got != want {
			t.Errorf("copy with redirect %q: the destination's is %q; the store's own copy has %q", own, got, want)
		}
	}
}
