package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

const (
	s3Bucket       = "fenced"
	s3WorkerKey    = "worker"
	s3WorkerSecret = "worker-secret-key-0123456789"
)

// s3Env is a versitygw server with one bucket and a fencegate in front.
type s3Env struct {
	S3   *testenv.S3Server
	Proc *Proc
	GW   string // gateway base URL
}

// s3RouteYAML is one S3 route; endpoint is the S3 server (or a proxy to it).
func s3RouteYAML(name, host, endpoint string, s *testenv.S3Server, precondition, timeout string) string {
	match := "{path_prefix: /}"
	if host != "" {
		match = fmt.Sprintf("{host: %s, path_prefix: /}", host)
	}
	pre := ""
	if precondition != "" {
		pre = "      precondition: " + precondition + "\n"
	}
	return fmt.Sprintf(`    - name: %s
      match: %s
      s3:
        endpoint: %s
        region: us-east-1
        access_key_id: %s
        secret_access_key: %s
        timeout: %s
        clients:
          - {access_key_id: %s, secret_access_key: %s}
      resource: "{bucket}/{key}"
%s`, name, match, endpoint, s.AccessKey, s.SecretKey, timeout, s3WorkerKey, s3WorkerSecret, pre)
}

// s3BoltStore is the store section of the S3 tests unless they say
// otherwise: the embedded bbolt store.
const s3BoltStore = `store:
  embedded: {path: $DIR/fencegate.db}
`

// s3PostgresStore keeps fences (and ETags) in PostgreSQL, in fence mode
// local or shared.
func s3PostgresStore(url, mode string) string {
	// The S3 tests' tokens are not the coordinator's.
	return fmt.Sprintf("store:\n  postgres: {url: %q, timeout: 2s}\nfence: {mode: %s, verify_tokens: false}\n", url, mode)
}

func s3GatewayYAML(routes ...string) string { return s3GatewayYAMLStore(s3BoltStore, routes...) }

func s3GatewayYAMLStore(store string, routes ...string) string {
	return `
gateway:
  listen: $GATEWAY
  routes:
` + strings.Join(routes, "") + store + `admin: {listen: $ADMIN}
`
}

func startS3Env(t *testing.T, precondition string) *s3Env {
	t.Helper()
	return startS3EnvStore(t, s3BoltStore, precondition)
}

func startS3EnvStore(t *testing.T, store, precondition string) *s3Env {
	t.Helper()
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	p := startFencegate(t, s3GatewayYAMLStore(store, s3RouteYAML("objects", "", srv.Endpoint, srv, precondition, "30s")))
	return &s3Env{S3: srv, Proc: p, GW: p.URL("gateway")}
}

// s3Worker is an aws-sdk-go-v2 client with default settings, signing with
// the worker's own key, pointed at endpoint, sending token().
func s3Worker(endpoint, access, secret string, token func() int64) *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
		// Refusals must surface at once, not after retries.
		RetryMaxAttempts: 1,
	}, awsfence.WithToken(token))
}

// direct reads the durable state from the S3 server itself, with its root
// keys, never through the gateway.
func (e *s3Env) direct() *s3.Client {
	return s3Worker(e.S3.Endpoint, e.S3.AccessKey, e.S3.SecretKey, awsfence.Fixed(0))
}

func (e *s3Env) worker(token *atomic.Int64) *s3.Client {
	return s3Worker(e.GW, s3WorkerKey, s3WorkerSecret, token.Load)
}

func tokenOf(n int64) *atomic.Int64 {
	var a atomic.Int64
	a.Store(n)
	return &a
}

func putObject(t *testing.T, c *s3.Client, key, body string) error {
	t.Helper()
	_, err := c.PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(s3Bucket), Key: aws.String(key), Body: strings.NewReader(body),
	})
	return err
}

// objectBody returns the object's content read directly from S3, or
// "<absent>".
func (e *s3Env) objectBody(t *testing.T, key string) string {
	t.Helper()
	return e.objectIn(t, s3Bucket, key)
}

// objectIn is what the store holds at bucket/key, read directly.
func (e *s3Env) objectIn(t *testing.T, bucket, key string) string {
	t.Helper()
	out, err := e.direct().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	var nsk *types.NoSuchKey
	if errors.As(err, &nsk) {
		return "<absent>"
	}
	if err != nil {
		t.Fatalf("direct GetObject %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantRefusal checks that err is the gateway's S3 XML refusal with code.
func wantRefusal(t *testing.T, err error, code string, status int) {
	t.Helper()
	if err == nil {
		t.Fatalf("request succeeded; want refusal %s", code)
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != code {
		t.Fatalf("error %v; want code %s", err, code)
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() != status {
		t.Fatalf("status %d; want %d (%v)", re.HTTPStatusCode(), status, err)
	}
}

// A stale multipart completion is refused: A started an upload and sent its
// parts while it held the lease, B wrote with a newer token, A's
// CompleteMultipartUpload is refused and S3 keeps B's object.
func TestS3StaleMultipartCompletionRefused(t *testing.T) {
	e := startS3Env(t, "etag")
	ctx := context.Background()
	tokA := tokenOf(1)
	a, b := e.worker(tokA), e.worker(tokenOf(2))
	key := aws.String("big/upload.bin")
	up, err := a.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s3Bucket), Key: key})
	if err != nil {
		t.Fatalf("create upload: %v", err)
	}
	part := bytes.Repeat([]byte("a"), 5<<20)
	pr, err := a.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(s3Bucket), Key: key, UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader(part)})
	if err != nil {
		t.Fatalf("upload part: %v", err)
	}
	complete := func(c *s3.Client, id *string, etag *string) error {
		_, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(s3Bucket), Key: key, UploadId: id,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: etag}}}})
		return err
	}
	if err := putObject(t, b, *key, "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	wantRefusal(t, complete(a, up.UploadId, pr.ETag), "stale_fencing_token", http.StatusConflict)
	if got := e.objectBody(t, *key); got != "B" {
		t.Fatalf("object = %q; want B's", got)
	}
	// The current owner's multipart upload works end to end, abort too.
	up2, err := b.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s3Bucket), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	pr2, err := b.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(s3Bucket), Key: key, UploadId: up2.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader(part)})
	if err != nil {
		t.Fatal(err)
	}
	if err := complete(b, up2.UploadId, pr2.ETag); err != nil {
		t.Fatalf("B's completion: %v", err)
	}
	if got := e.objectBody(t, *key); got != string(part) {
		t.Fatalf("object after B's multipart upload has %d bytes; want %d", len(got), len(part))
	}
	// After a completion the gateway re-learns the ETag; a plain put still
	// passes its precondition.
	if err := putObject(t, b, *key, "B2"); err != nil {
		t.Fatalf("put after multipart completion: %v", err)
	}
	up3, err := b.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s3Bucket), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(s3Bucket), Key: key, UploadId: up3.UploadId}); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if got := e.objectBody(t, *key); got != "B2" {
		t.Fatalf("object = %q; want B2", got)
	}
}

// CopyObject fences its destination: a stale copy onto an object is refused,
// a current one lands; the copy source is only read.
func TestS3StaleCopyObjectRefused(t *testing.T) {
	e := startS3Env(t, "")
	ctx := context.Background()
	a, b := e.worker(tokenOf(1)), e.worker(tokenOf(2))
	if err := putObject(t, a, "src", "source"); err != nil {
		t.Fatal(err)
	}
	if err := putObject(t, b, "dst", "B"); err != nil {
		t.Fatal(err)
	}
	copyTo := func(c *s3.Client) error {
		_, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("dst"), CopySource: aws.String(s3Bucket + "/src")})
		return err
	}
	wantRefusal(t, copyTo(a), "stale_fencing_token", http.StatusConflict)
	if got := e.objectBody(t, "dst"); got != "B" {
		t.Fatalf("dst = %q after a stale copy; want B", got)
	}
	if err := copyTo(b); err != nil {
		t.Fatalf("current copy: %v", err)
	}
	if got := e.objectBody(t, "dst"); got != "source" {
		t.Fatalf("dst = %q; want the copied source", got)
	}
}

// DeleteObjects is refused whole unless every key passes its fence.
func TestS3DeleteObjectsAllOrNothing(t *testing.T) {
	e := startS3Env(t, "")
	ctx := context.Background()
	w3, w4 := e.worker(tokenOf(3)), e.worker(tokenOf(4))
	for _, k := range []string{"d/1", "d/2", "d/3"} {
		if err := putObject(t, w3, k, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := putObject(t, w4, "d/3", "newer"); err != nil {
		t.Fatal(err)
	}
	del := func(c *s3.Client, keys ...string) error {
		var ids []types.ObjectIdentifier
		for _, k := range keys {
			ids = append(ids, types.ObjectIdentifier{Key: aws.String(k)})
		}
		_, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(s3Bucket), Delete: &types.Delete{Objects: ids}})
		return err
	}
	wantRefusal(t, del(w3, "d/1", "d/2", "d/3"), "stale_fencing_token", http.StatusConflict)
	for _, k := range []string{"d/1", "d/2"} {
		if got := e.objectBody(t, k); got != k {
			t.Fatalf("%s = %q after a refused DeleteObjects; want it untouched", k, got)
		}
	}
	if err := del(w4, "d/1", "d/2", "d/3"); err != nil {
		t.Fatalf("current DeleteObjects: %v", err)
	}
	for _, k := range []string{"d/1", "d/2", "d/3"} {
		if got := e.objectBody(t, k); got != "<absent>" {
			t.Fatalf("%s = %q after DeleteObjects", k, got)
		}
	}
}
