package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
)

// bucketExists asks the store directly.
func (e *s3Env) bucketExists(t *testing.T, bucket string) bool {
	t.Helper()
	_, err := e.direct().HeadBucket(context.Background(), &s3.HeadBucketInput{Bucket: aws.String(bucket)})
	var nf *types.NotFound
	switch {
	case err == nil:
		return true
	case errors.As(err, &nf):
		return false
	}
	t.Fatalf("direct HeadBucket %s: %v", bucket, err)
	return false
}

// Bucket-level writes on a {bucket}/{key} route are fenced on the bucket's
// key, hierarchically with its objects' keys (VersityGW): a bucket write
// is refused when an object in the bucket holds a newer token, and an
// object write is refused when the bucket's fence is newer. Bucket
// configuration writes are refused by default and, with
// s3.bucket_config: fence, fenced like the bucket. Each step is checked on
// the store.
func TestS3BucketWritesFenced(t *testing.T) {
	e := startS3Env(t, "")
	ctx := context.Background()
	with := func(n int64) *s3.Client { return s3Worker(e.GW, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(n)) }
	const b = "tree"

	if _, err := with(1).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
		t.Fatalf("CreateBucket through the gateway: %v", err)
	}
	if !e.bucketExists(t, b) {
		t.Fatal("CreateBucket answered but the bucket is not on the store")
	}
	put := func(c *s3.Client, key, body string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String(key), Body: strings.NewReader(body)})
		return err
	}
	if err := put(with(5), "x", "five"); err != nil {
		t.Fatal(err)
	}
	if _, err := with(5).DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	// An object below the bucket was written with token 5: deleting the
	// bucket with token 3 is stale.
	_, err := with(3).DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(b)})
	wantRefusal(t, err, "stale_fencing_token", http.StatusConflict)
	if !e.bucketExists(t, b) {
		t.Fatal("a stale DeleteBucket deleted the bucket")
	}
	if _, err := with(5).DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(b)}); err != nil {
		t.Fatalf("DeleteBucket with the newest token: %v", err)
	}
	if e.bucketExists(t, b) {
		t.Fatal("DeleteBucket answered but the bucket is still on the store")
	}
	// The bucket's fence is 6 now: an object write with 4 is stale, though
	// the object's own key has never been written.
	if _, err := with(6).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, put(with(4), "y", "four"), "stale_fencing_token", http.StatusConflict)
	if _, err := e.direct().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("y")}); err == nil {
		t.Fatal("a write older than the bucket's fence reached the store")
	}
	if err := put(with(6), "y", "six"); err != nil {
		t.Fatalf("object write with the bucket's token: %v", err)
	}

	// Configuration writes are refused by default, and nothing changes.
	tagging := &s3.PutBucketTaggingInput{Bucket: aws.String(b), Tagging: &types.Tagging{
		TagSet: []types.Tag{{Key: aws.String("owner"), Value: aws.String("stale")}}}}
	_, err = with(9).PutBucketTagging(ctx, tagging)
	wantRefusal(t, err, "AccessDenied", http.StatusForbidden)
	if _, err := e.direct().GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String(b)}); err == nil {
		t.Fatal("a refused PutBucketTagging tagged the bucket")
	}

	// With bucket_config: fence they are admitted on the bucket's key,
	// hierarchically: stale against an object's newer token, admitted
	// with the newest.
	yaml := s3GatewayYAML(strings.Replace(s3RouteYAML("objects", "", e.S3.Endpoint, e.S3, "", "30s"),
		"        clients:", "        bucket_config: fence\n        clients:", 1))
	p := startFencegate(t, yaml)
	cfgWith := func(n int64) *s3.Client {
		return s3Worker(p.URL("gateway"), s3WorkerKey, s3WorkerSecret, awsfence.Fixed(n))
	}
	if err := func() error {
		_, err := cfgWith(7).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String("z"), Body: strings.NewReader("seven")})
		return err
	}(); err != nil {
		t.Fatal(err)
	}
	_, err = cfgWith(6).PutBucketTagging(ctx, tagging)
	wantRefusal(t, err, "stale_fencing_token", http.StatusConflict)
	if _, err := e.direct().GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String(b)}); err == nil {
		t.Fatal("a stale PutBucketTagging tagged the bucket")
	}
	if _, err := cfgWith(7).PutBucketTagging(ctx, tagging); err != nil {
		t.Fatalf("PutBucketTagging with the newest token: %v", err)
	}
	if _, err := e.direct().GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String(b)}); err != nil {
		t.Fatalf("PutBucketTagging answered but the store has no tags: %v", err)
	}
}
