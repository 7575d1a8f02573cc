package s3

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/precondition"
)

// CheckConditionalWrites verifies that the upstream honours the conditional
// writes `precondition: etag` relies on. Some S3-compatible stores accept
// If-Match and If-None-Match on PutObject and silently ignore them, which
// would make the precondition a no-op. It writes, overwrites and deletes one
// probe object under fencegate-doctor/ in bucket, with the gateway's
// credentials.
func (u *Upstream) CheckConditionalWrites(ctx context.Context, bucket string) error {
	c := u.client(1)
	var rnd [8]byte
	rand.Read(rnd[:])
	key := aws.String("fencegate-doctor/probe-" + hex.EncodeToString(rnd[:]))
	put := func(body string, ifMatch, ifNoneMatch *string) (string, int, error) {
		out, err := c.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(bucket), Key: key,
			Body: strings.NewReader(body), IfMatch: ifMatch, IfNoneMatch: ifNoneMatch})
		var re *awshttp.ResponseError
		if errors.As(err, &re) {
			return "", re.HTTPStatusCode(), nil
		}
		if err != nil {
			return "", 0, fmt.Errorf("probe PutObject %s/%s: %w", bucket, *key, err)
		}
		return aws.ToString(out.ETag), http.StatusOK, nil
	}
	defer c.DeleteObject(context.WithoutCancel(ctx), &awss3.DeleteObjectInput{Bucket: aws.String(bucket), Key: key})

	etag, st, err := put("1", nil, aws.String("*"))
	if err != nil {
		return err
	}
	if st != http.StatusOK {
		return fmt.Errorf("probe PutObject with If-None-Match: * on an absent object answered %d, want 200", st)
	}
	for _, s := range []struct {
		what                 string
		ifMatch, ifNoneMatch *string
	}{
		{"If-None-Match: * on an existing object", nil, aws.String("*")},
		{"If-Match with a wrong ETag", aws.String(`"00000000000000000000000000000000"`), nil},
	} {
		_, st, err := put("2", s.ifMatch, s.ifNoneMatch)
		if err != nil {
			return err
		}
		if st != http.StatusPreconditionFailed {
			return fmt.Errorf("upstream ignores conditional writes: PutObject with %s answered %d, want 412 Precondition Failed", s.what, st)
		}
	}
	if _, st, err = put("3", aws.String(etag), nil); err != nil {
		return err
	}
	if st != http.StatusOK {
		return fmt.Errorf("probe PutObject with If-Match on the current ETag answered %d, want 200", st)
	}
	return nil
}

// ProbeRace runs the racing probe (precondition.Probe) against the
// upstream: n concurrent conditional PutObjects to one fresh probe object
// under fencegate-doctor/ in bucket, of which exactly one may win per
// round. It deletes the object afterwards.
func (u *Upstream) ProbeRace(ctx context.Context, bucket string, n int) error {
	var rnd [8]byte
	rand.Read(rnd[:])
	p := &s3Probe{c: u.client(1), bucket: bucket, key: "fencegate-doctor/race-" + hex.EncodeToString(rnd[:])}
	defer p.c.DeleteObject(context.WithoutCancel(ctx), &awss3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(p.key)})
	return precondition.Probe(ctx, p, n)
}

type s3Probe struct {
	c           *awss3.Client
	bucket, key string
}

func (p *s3Probe) Put(ctx context.Context, body, ifMatch string) (int, string, error) {
	in := &awss3.PutObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(p.key), Body: strings.NewReader(body)}
	if ifMatch != "" {
		in.IfMatch = aws.String(ifMatch)
	} else {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := p.c.PutObject(ctx, in)
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode(), "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("probe PutObject %s/%s: %w", p.bucket, p.key, err)
	}
	return http.StatusOK, aws.ToString(out.ETag), nil
}

func (p *s3Probe) Head(ctx context.Context) (string, error) {
	out, err := p.c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(p.key)})
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("probe HeadObject %s/%s: %w", p.bucket, p.key, err)
	}
	return aws.ToString(out.ETag), nil
}
