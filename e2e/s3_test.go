package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
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
	out, err := e.direct().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String(key)})
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

// Seed test 1 on an object: A wrote with token 1 and paused past its lease;
// B writes with token 2; A resumes and writes. A is refused with an S3 XML
// error carrying stale_fencing_token, and S3 holds B's object.
func TestS3Seed1PausedOwnerRefused(t *testing.T) {
	e := startS3Env(t, "")
	a, b := e.worker(tokenOf(1)), e.worker(tokenOf(2))
	if err := putObject(t, a, "reports/q1.csv", "A1"); err != nil {
		t.Fatalf("A's first write: %v", err)
	}
	if err := putObject(t, b, "reports/q1.csv", "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	wantRefusal(t, putObject(t, a, "reports/q1.csv", "A2"), "stale_fencing_token", http.StatusConflict)
	if got := e.objectBody(t, "reports/q1.csv"); got != "B" {
		t.Fatalf("object = %q; want B's", got)
	}
	// Reads pass through, authenticated with the worker's key.
	out, err := a.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("reports/q1.csv")})
	if err != nil {
		t.Fatalf("GetObject through the gateway: %v", err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(got) != "B" {
		t.Fatalf("GetObject through the gateway = %q", got)
	}
	list, err := a.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(s3Bucket)})
	if err != nil || len(list.Contents) != 1 {
		t.Fatalf("ListObjectsV2 through the gateway: %v %v", list, err)
	}
}

// Seed test 7 on objects: every write path of the S3 API (PutObject,
// CopyObject, multipart create/part/complete/abort, DeleteObject,
// DeleteObjects) refuses a stale token, and the worker's keys do not work
// at S3 itself, so there is no way around the gateway.
func TestS3Seed7EveryWritePathFenced(t *testing.T) {
	e := startS3Env(t, "")
	ctx := context.Background()
	cur, stale := e.worker(tokenOf(5)), e.worker(tokenOf(4))
	for _, k := range []string{"obj", "src", "mp"} {
		if err := putObject(t, cur, k, "current-"+k); err != nil {
			t.Fatalf("seed %s: %v", k, err)
		}
	}
	// An upload the stale worker started while it still held the lease:
	// parts may still be uploaded, but nothing can complete it now.
	tests := []struct {
		name string
		do   func() error
	}{
		{"PutObject", func() error { return putObject(t, stale, "obj", "stale") }},
		{"CopyObject", func() error {
			_, err := stale.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("obj"), CopySource: aws.String(s3Bucket + "/src")})
			return err
		}},
		{"CreateMultipartUpload", func() error {
			_, err := stale.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s3Bucket), Key: aws.String("mp")})
			return err
		}},
		{"DeleteObject", func() error {
			_, err := stale.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("obj")})
			return err
		}},
		{"DeleteObjects", func() error {
			_, err := stale.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(s3Bucket), Delete: &types.Delete{
				Objects: []types.ObjectIdentifier{{Key: aws.String("obj")}, {Key: aws.String("src")}}}})
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantRefusal(t, tc.do(), "stale_fencing_token", http.StatusConflict)
		})
	}
	// The worker's own key cannot write to S3 directly.
	err := putObject(t, s3Worker(e.S3.Endpoint, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(9)), "obj", "bypass")
	if err == nil {
		t.Fatal("the worker's key wrote to S3 directly")
	}
	for _, k := range []string{"obj", "src", "mp"} {
		if got := e.objectBody(t, k); got != "current-"+k {
			t.Errorf("%s = %q after stale writes; want current-%s", k, got, k)
		}
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

// Seed test 2 with `precondition: etag`: A's write is handed to S3 but
// delayed in the network (toxiproxy) past the gateway's timeout; B then
// writes with a newer token. When A's request finally reaches S3 it carries
// If-Match on the version B replaced, and S3 refuses it with 412. Without
// the precondition the same timing lets A overwrite B: the window docs/design.md
// calls irreducible, closed by the conditional write.
func TestS3PreconditionDelayedForward(t *testing.T) {
	for _, tc := range []struct {
		precondition string
		want         string
	}{
		{"etag", "B"},
		{"none", "A-late"}, // control: shows the test can fail
	} {
		t.Run(tc.precondition, func(t *testing.T) {
			if _, got := s3DelayedForward(t, s3BoltStore, tc.precondition); got != tc.want {
				t.Fatalf("object = %q; want %q", got, tc.want)
			}
		})
	}
}

// s3DelayedForward runs the delayed-forward race of seed test 2 with the
// given store section and returns the object's content read from S3 after
// A's delayed request has reached it.
func s3DelayedForward(t *testing.T, store, precondition string) (*s3Env, string) {
	t.Helper()
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	tp := testenv.Toxiproxy(t)
	proxy := tp.Proxy(t, "s3", strings.TrimPrefix(srv.Endpoint, "http://"))
	// Two routes to one bucket and one fence: requests to "localhost" go
	// through the delaying proxy, to 127.0.0.1 straight to S3.
	p := startFencegate(t, s3GatewayYAMLStore(store,
		s3RouteYAML("slow", "localhost", "http://"+proxy.Listen, srv, precondition, "1s"),
		s3RouteYAML("fast", "", srv.Endpoint, srv, precondition, "30s")))
	gw := p.URL("gateway")
	slowURL := strings.Replace(gw, "127.0.0.1", "localhost", 1)
	e := &s3Env{S3: srv, Proc: p, GW: gw}

	if err := putObject(t, s3Worker(gw, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(1)), "job", "A-first"); err != nil {
		t.Fatalf("A's first write: %v", err)
	}
	proxy.AddToxic(t, testenv.Toxic{Name: "delay", Type: "latency", Stream: "upstream",
		Attributes: map[string]any{"latency": 3000}})
	sent := time.Now()
	err := putObject(t, s3Worker(slowURL, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(1)), "job", "A-late")
	wantRefusal(t, err, "upstream_timeout", http.StatusGatewayTimeout)
	if err := putObject(t, s3Worker(gw, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(2)), "job", "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	// Wait until A's delayed request has been delivered to S3 and answered
	// there (the latency plus a margin), then read the durable state.
	time.Sleep(time.Until(sent.Add(5 * time.Second)))
	return e, e.objectBody(t, "job")
}

// A write that bypassed the gateway (here: the root key, directly) makes the
// gateway's next conditional write fail with 412 precondition_failed; the
// bypassing version is not overwritten blindly.
func TestS3PreconditionDetectsBypass(t *testing.T) {
	s3PreconditionBypass(t, startS3Env(t, "etag"))
}

func s3PreconditionBypass(t *testing.T, e *s3Env) {
	t.Helper()
	w := e.worker(tokenOf(1))
	if err := putObject(t, w, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := putObject(t, w, "k", "v2"); err != nil {
		t.Fatalf("second write with the recorded ETag: %v", err)
	}
	if err := putObject(t, e.direct(), "k", "bypass"); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, putObject(t, w, "k", "v3"), "precondition_failed", http.StatusPreconditionFailed)
	if got := e.objectBody(t, "k"); got != "bypass" {
		t.Fatalf("object = %q; want the bypassing write left alone", got)
	}
	// An object the gateway never wrote but that exists is not overwritten
	// either (If-None-Match: *).
	if err := putObject(t, e.direct(), "pre-existing", "x"); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, putObject(t, w, "pre-existing", "y"), "precondition_failed", http.StatusPreconditionFailed)
	// The refusal is logged right after it is answered.
	waitFor(t, func() bool { return strings.Contains(e.Proc.Log(), `"msg":"precondition_failed"`) })
}

// Bad input: unsigned, malformed, wrongly keyed and clock-skewed signatures
// are refused with 403 S3 XML; hostile keys with 400; a write without a
// token with 428. None of them reaches S3.
func TestS3BadInput(t *testing.T) {
	e := startS3Env(t, "")
	ctx := context.Background()

	raw := func(method, path string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(method, e.GW+path, strings.NewReader("x"))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		code string
	}{
		{"unsigned", map[string]string{"Fencing-Token": "1"}, "AccessDenied"},
		{"garbage", map[string]string{"Authorization": "AWS4-HMAC-SHA256 nonsense", "Fencing-Token": "1"}, "AuthorizationHeaderMalformed"},
		{"sigv2", map[string]string{"Authorization": "AWS worker:abc", "Fencing-Token": "1"}, "AccessDenied"},
		{"bad signature", map[string]string{
			"Authorization":        "AWS4-HMAC-SHA256 Credential=worker/20260101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=" + strings.Repeat("0", 64),
			"X-Amz-Date":           time.Now().UTC().Format("20060102T150405Z"),
			"X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD", "Fencing-Token": "1"}, "AuthorizationHeaderMalformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := raw("PUT", "/"+s3Bucket+"/k", tc.hdr)
			if st != http.StatusForbidden || !strings.Contains(body, "<Code>"+tc.code+"</Code>") {
				t.Fatalf("%d %s; want 403 %s", st, body, tc.code)
			}
		})
	}

	t.Run("wrong secret", func(t *testing.T) {
		err := putObject(t, s3Worker(e.GW, s3WorkerKey, "not-the-secret", awsfence.Fixed(1)), "k", "x")
		wantRefusal(t, err, "SignatureDoesNotMatch", http.StatusForbidden)
	})
	t.Run("unknown key", func(t *testing.T) {
		err := putObject(t, s3Worker(e.GW, "intruder", s3WorkerSecret, awsfence.Fixed(1)), "k", "x")
		wantRefusal(t, err, "InvalidAccessKeyId", http.StatusForbidden)
	})
	t.Run("gateway's own key", func(t *testing.T) {
		err := putObject(t, s3Worker(e.GW, e.S3.AccessKey, e.S3.SecretKey, awsfence.Fixed(1)), "k", "x")
		wantRefusal(t, err, "InvalidAccessKeyId", http.StatusForbidden)
	})
	t.Run("clock skew", func(t *testing.T) {
		// Signed by the SDK's own signer, 20 minutes in the past.
		req, _ := http.NewRequest("PUT", e.GW+"/"+s3Bucket+"/k", strings.NewReader("x"))
		req.Header.Set("Fencing-Token", "1")
		req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: s3WorkerKey, SecretAccessKey: s3WorkerSecret},
			req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now().Add(-20*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "<Code>RequestTimeTooSkewed</Code>") {
			t.Fatalf("%d %s; want 403 RequestTimeTooSkewed", resp.StatusCode, b)
		}
	})
	t.Run("missing token", func(t *testing.T) {
		wantRefusal(t, putObject(t, e.worker(tokenOf(0)), "k", "x"), "missing_fencing_token", http.StatusPreconditionRequired)
	})

	w := e.worker(tokenOf(1))
	for _, tc := range []struct {
		name, key string
	}{
		{"dot-dot", "a/../k"},
		{"dot", "a/./k"},
		{"double slash", "a//k"},
		{"leading slash", "/k"},
		{"control char", "a\x01k"},
		{"too long", strings.Repeat("k", 1025)},
	} {
		t.Run("key "+tc.name, func(t *testing.T) {
			err := putObject(t, w, tc.key, "x")
			var re *awshttp.ResponseError
			if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusBadRequest {
				t.Fatalf("put %q: %v; want 400", tc.key, err)
			}
		})
	}
	t.Run("key encoded slash", func(t *testing.T) {
		// SDKs never encode the slashes of a key; a hand-made %2F is
		// refused (S3-compatible stores disagree on it) before any
		// signature check can matter.
		st, _ := raw("PUT", "/"+s3Bucket+"/a%2Fk", map[string]string{"Fencing-Token": "1"})
		if st != http.StatusBadRequest && st != http.StatusForbidden {
			t.Fatalf("status %d", st)
		}
	})
	list, err := e.direct().ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s3Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Contents) != 0 {
		var keys []string
		for _, o := range list.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
		t.Fatalf("bad requests reached S3: %q", keys)
	}
	// A sane key with every character an SDK escapes still works.
	if err := putObject(t, w, "dir/ü space+plus&amp=;,$@~!'()*.txt", "ok"); err != nil {
		t.Fatalf("legitimate odd key: %v", err)
	}
	if got := e.objectBody(t, "dir/ü space+plus&amp=;,$@~!'()*.txt"); got != "ok" {
		t.Fatalf("odd key = %q", got)
	}
}

// PutObject of a small and a 100 MiB+ object through the gateway; the
// gateway's peak RSS stays far below the object size (bodies stream).
func TestS3LargePutStreams(t *testing.T) {
	e := startS3Env(t, "etag")
	w := e.worker(tokenOf(1))
	if err := putObject(t, w, "small", "tiny"); err != nil {
		t.Fatal(err)
	}
	base := vmHWM(t, e.Proc)
	const size = 112 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>13)
	}
	_, err := w.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("large"),
		Body: bytes.NewReader(data)})
	if err != nil {
		t.Fatalf("large put: %v", err)
	}
	peak := vmHWM(t, e.Proc)
	t.Logf("gateway peak RSS: %d MiB after a small put, %d MiB after a %d MiB put", base>>20, peak>>20, size>>20)
	if peak-base > 48<<20 {
		t.Errorf("gateway peak RSS grew by %d MiB for a %d MiB object: the body is buffered", (peak-base)>>20, size>>20)
	}
	head, err := e.direct().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("large")})
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(data)
	if aws.ToInt64(head.ContentLength) != size || strings.Trim(aws.ToString(head.ETag), `"`) != hex.EncodeToString(sum[:]) {
		t.Fatalf("stored object: %d bytes, ETag %s; want %d bytes, md5 %x", aws.ToInt64(head.ContentLength), aws.ToString(head.ETag), size, sum)
	}
}

// vmHWM is the peak resident set size of the fencegate process.
func vmHWM(t *testing.T, p *Proc) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// `fencegate doctor` passes on versitygw, which honours If-Match and
// If-None-Match, and fails on a store that answers 200 to everything (as
// stores that ignore conditional writes do); serve refuses to start on it
// when the route has precondition: etag and s3.check_bucket.
func TestS3Doctor(t *testing.T) {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	ignoring := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("ETag", `"d41d8cd98f00b204e9800998ecf8427e"`)
	}))
	t.Cleanup(ignoring.Close)
	bin := testenv.BuildBinary(t, "./cmd/fencegate")
	for _, tc := range []struct {
		name, endpoint string
		wantExit       int
	}{
		{"versitygw", srv.Endpoint, 0},
		{"ignores conditions", ignoring.URL, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
			y := strings.ReplaceAll(s3GatewayYAML(s3RouteYAML("objects", "", tc.endpoint, srv, "etag", "5s")), "$GATEWAY", "127.0.0.1:1")
			y = strings.ReplaceAll(y, "$DIR", t.TempDir())
			y = strings.ReplaceAll(y, "$ADMIN", "127.0.0.1:2")
			if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "doctor", "-c", cfg, "-bucket", s3Bucket).CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantExit {
				t.Fatalf("doctor exit %d; want %d:\n%s", code, tc.wantExit, out)
			}
		})
	}
	t.Run("serve refuses to start", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
		y := s3GatewayYAML(s3RouteYAML("objects", "", ignoring.URL, srv, "etag", "5s"))
		y = strings.Replace(y, "        clients:", "        check_bucket: "+s3Bucket+"\n        clients:", 1)
		y = strings.ReplaceAll(y, "$GATEWAY", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
		y = strings.ReplaceAll(y, "$ADMIN", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
		y = strings.ReplaceAll(y, "$DIR", t.TempDir())
		if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "serve", "-c", cfg)
		done := make(chan error, 1)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(out.String(), "ignores conditional writes") {
				t.Fatalf("serve: %v\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatal("serve started on an upstream that ignores conditional writes")
		}
	})
}

// Signed aws-chunked bodies (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, and the
// -TRAILER variant with a signed checksum trailer, built by hand per AWS's
// spec since aws-sdk-go-v2 only sends the unsigned trailer form) are
// verified chunk by chunk and re-signed with the gateway's key: the S3
// server accepts the re-signed chunks and trailer signature, verifies the
// checksum and stores the decoded bytes; a tampered chunk or trailer is
// refused and nothing is stored.
func TestS3SignedChunkedUpload(t *testing.T) {
	e := startS3Env(t, "")
	payload := bytes.Repeat([]byte("0123456789abcdef"), 9000) // 144000 bytes: 3 chunks
	crc := crc32.ChecksumIEEE(payload)
	checksum := base64.StdEncoding.EncodeToString([]byte{byte(crc >> 24), byte(crc >> 16), byte(crc >> 8), byte(crc)})
	for _, tc := range []struct {
		name    string
		trailer bool
		tamper  string // "chunk", "trailer" or ""
	}{
		{"valid", false, ""},
		{"tampered", false, "chunk"},
		{"trailer-valid", true, ""},
		{"trailer-tampered-chunk", true, "chunk"},
		{"trailer-tampered-checksum", true, "trailer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "chunked-" + tc.name
			now := time.Now().UTC()
			chunks := [][]byte{payload[:65536], payload[65536:131072], payload[131072:], nil}
			hash := "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
			trailer := ""
			if tc.trailer {
				hash += "-TRAILER"
				trailer = "x-amz-checksum-crc32:" + checksum
			}
			size := 0
			for _, c := range chunks {
				size += len(fmt.Sprintf("%x;chunk-signature=%064d\r\n", len(c), 0)) + len(c) + 2
			}
			if tc.trailer {
				size += len(trailer) + 2 + len("x-amz-trailer-signature:") + 64 + 2
			}
			req, _ := http.NewRequest("PUT", e.GW+"/"+s3Bucket+"/"+key, nil)
			req.ContentLength = int64(size)
			req.Header.Set("Content-Encoding", "aws-chunked")
			req.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(len(payload)))
			req.Header.Set("X-Amz-Content-Sha256", hash)
			if tc.trailer {
				req.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32")
			}
			req.Header.Set("Fencing-Token", "1")
			err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: s3WorkerKey, SecretAccessKey: s3WorkerSecret},
				req, hash, "s3", "us-east-1", now)
			if err != nil {
				t.Fatal(err)
			}
			auth := req.Header.Get("Authorization")
			chain := testenv.NewChunkChain(s3WorkerSecret, now, "us-east-1", auth[strings.LastIndex(auth, "Signature=")+len("Signature="):])
			var body bytes.Buffer
			for i, c := range chunks {
				sig := chain.Chunk(c)
				data := c
				if tc.tamper == "chunk" && i == 1 {
					data = bytes.ToUpper(c)
				}
				fmt.Fprintf(&body, "%x;chunk-signature=%s\r\n", len(c), sig)
				body.Write(data)
				if len(c) > 0 || !tc.trailer {
					body.WriteString("\r\n")
				}
			}
			if tc.trailer {
				// The trailer's signature chains from the final chunk's
				// and covers the canonical trailer "name:value\n".
				sig := chain.Trailer(trailer)
				sent := trailer
				if tc.tamper == "trailer" {
					// Another valid CRC32, not the one the worker signed.
					sent = "x-amz-checksum-crc32:AAAAAA=="
				}
				fmt.Fprintf(&body, "%s\r\nx-amz-trailer-signature:%s\r\n\r\n", sent, sig)
			}
			if body.Len() != size {
				t.Fatalf("encoded %d bytes; computed %d", body.Len(), size)
			}
			req.Body = io.NopCloser(&body)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if tc.tamper != "" {
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "SignatureDoesNotMatch") {
					t.Fatalf("tampered %s: %d %s; want 403 SignatureDoesNotMatch", tc.tamper, resp.StatusCode, b)
				}
				if got := e.objectBody(t, key); got != "<absent>" {
					t.Fatalf("tampered upload stored %d bytes", len(got))
				}
				return
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("signed chunked upload: %d %s", resp.StatusCode, b)
			}
			if got := e.objectBody(t, key); got != string(payload) {
				t.Fatalf("stored %d bytes; want the %d decoded bytes", len(got), len(payload))
			}
			if tc.trailer {
				out, err := e.direct().HeadObject(context.Background(), &s3.HeadObjectInput{
					Bucket: aws.String(s3Bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled})
				if err != nil {
					t.Fatal(err)
				}
				if got := aws.ToString(out.ChecksumCRC32); got != checksum {
					t.Fatalf("S3 stored checksum %q; want the trailer's %q", got, checksum)
				}
			}
		})
	}
}

// Presigned URLs (query-string SigV4) are verified too; the fencing token
// header is part of what the worker signed.
func TestS3PresignedPut(t *testing.T) {
	e := startS3Env(t, "")
	ctx := context.Background()
	if err := putObject(t, e.worker(tokenOf(2)), "pre", "current"); err != nil {
		t.Fatal(err)
	}
	presigned := func(token int64, body string) (int, string) {
		ps := s3.NewPresignClient(e.worker(tokenOf(token)))
		r, err := ps.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("pre")})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(r.Method, r.URL, strings.NewReader(body))
		for k, vs := range r.SignedHeader {
			if !strings.EqualFold(k, "Host") {
				req.Header[k] = vs
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if st, b := presigned(1, "stale"); st != http.StatusConflict || !strings.Contains(b, "stale_fencing_token") {
		t.Fatalf("stale presigned put: %d %s", st, b)
	}
	if st, b := presigned(2, "presigned"); st != http.StatusOK {
		t.Fatalf("presigned put: %d %s", st, b)
	}
	if got := e.objectBody(t, "pre"); got != "presigned" {
		t.Fatalf("object = %q", got)
	}
}
