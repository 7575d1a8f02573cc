package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// wantS3Error checks that err is the store's own S3 error: its code is
// one of S3's, never the gateway's precondition_failed.
func wantS3Error(t *testing.T, err error, code string, status int) {
	t.Helper()
	wantRefusal(t, err, code, status)
}

// A worker's own S3 conditions meet the gateway's `precondition: etag` on
// one request (VersityGW). The store must see one valid set, answer the
// worker's condition as it would directly, and the gateway must not call
// the store's 412 to the worker's condition a bypass. A write that did
// bypass the gateway is still caught under the same worker conditions.
func TestS3WorkerConditions(t *testing.T) {
	e := startS3Env(t, "etag")
	w := e.worker(tokenOf(1))
	ctx := context.Background()
	bypassLogged := func() bool { return strings.Contains(e.Proc.Log(), `"msg":"precondition_failed"`) }

	// If-Match: * on a key the gateway has not written: the gateway's
	// If-None-Match: * must not go beside it (VersityGW: 501 "Multiple
	// conditional request headers"); S3 answers 404 NoSuchKey.
	_, err := w.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("fresh"),
		Body: strings.NewReader("x"), IfMatch: aws.String("*")})
	wantS3Error(t, err, "NoSuchKey", http.StatusNotFound)
	if got := e.objectBody(t, "fresh"); got != "<absent>" {
		t.Fatalf("fresh = %q; want absent", got)
	}

	// DeleteObject with the worker's size and modification-time
	// conditions, which fail: the store's 412 PreconditionFailed, the
	// object kept, no bypass logged.
	if err := putObject(t, w, "k", "four"); err != nil {
		t.Fatal(err)
	}
	_, err = w.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("k"), IfMatchSize: aws.Int64(9999)})
	wantS3Error(t, err, "PreconditionFailed", http.StatusPreconditionFailed)
	_, err = w.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("k"),
		IfMatchLastModifiedTime: aws.Time(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))})
	wantS3Error(t, err, "PreconditionFailed", http.StatusPreconditionFailed)
	if got := e.objectBody(t, "k"); got != "four" {
		t.Fatalf("k = %q; want it kept", got)
	}
	// The gateway's record is intact: the next write is made conditional
	// on it and passes.
	if err := putObject(t, w, "k", "more"); err != nil {
		t.Fatalf("write after the worker's failed conditions: %v", err)
	}
	if _, err := w.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("k"), IfMatchSize: aws.Int64(4)}); err != nil {
		t.Fatalf("DeleteObject with the right size: %v", err)
	}
	if got := e.objectBody(t, "k"); got != "<absent>" {
		t.Fatalf("k = %q; want deleted", got)
	}
	// If-Match: * on an object the gateway wrote holds.
	if err := putObject(t, w, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("k"),
		Body: strings.NewReader("v2"), IfMatch: aws.String("*")}); err != nil {
		t.Fatalf("If-Match: * on the gateway's own version: %v", err)
	}
	if bypassLogged() {
		t.Fatalf("a 412 of the worker's own condition was logged as a bypass:\n%s", e.Proc.Log())
	}

	// A bypassing write of the same size: the worker's size condition
	// holds, the gateway's does not; refused as precondition_failed.
	if err := putObject(t, e.direct(), "k", "BY"); err != nil {
		t.Fatal(err)
	}
	_, err = w.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("k"), IfMatchSize: aws.Int64(2)})
	wantRefusal(t, err, "precondition_failed", http.StatusPreconditionFailed)
	if got := e.objectBody(t, "k"); got != "BY" {
		t.Fatalf("k = %q; want the bypassing version kept", got)
	}
	// An object created around the gateway, If-Match: *: the worker's
	// condition holds, the gateway's (absent) does not.
	if err := putObject(t, e.direct(), "around", "x"); err != nil {
		t.Fatal(err)
	}
	_, err = w.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("around"),
		Body: strings.NewReader("y"), IfMatch: aws.String("*")})
	wantRefusal(t, err, "precondition_failed", http.StatusPreconditionFailed)
	if got := e.objectBody(t, "around"); got != "x" {
		t.Fatalf("around = %q; want the bypassing version kept", got)
	}
}
