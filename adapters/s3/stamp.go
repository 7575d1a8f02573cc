package s3

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/adapters/objectstore"
)

// client is an SDK client with the gateway's credentials, for the
// gateway's own requests (doctor probes, stamp scans).
func (u *Upstream) client(attempts int) *awss3.Client {
	return awss3.New(awss3.Options{
		Region: u.region, BaseEndpoint: aws.String(u.endpoint.String()), UsePathStyle: true,
		Credentials: u.creds, HTTPClient: &http.Client{Transport: u.transport}, RetryMaxAttempts: attempts,
	})
}

// ScanStamps lists bucket under prefix (ListObjectsV2) and calls fn with the
// stamp of every object that has one (HeadObject), with the gateway's
// credentials. Objects without a stamp (written before stamping was on, or
// around the gateway) are skipped and counted in unstamped; a malformed
// stamp is an error, not a guess. Memory is bounded by one listing page.
func (u *Upstream) ScanStamps(ctx context.Context, bucket, prefix string, fn func(objectstore.Stamp) error) (unstamped int, err error) {
	header := u.stampHeader
	meta := strings.TrimPrefix(header, "x-amz-meta-")
	scan := &objectstore.StampScan{Collection: bucket, Key: header, Fn: fn}
	c := u.client(3)
	p := awss3.NewListObjectsV2Paginator(c, &awss3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return scan.Unstamped, fmt.Errorf("list %s/%s: %w", bucket, prefix, err)
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			h, err := c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				return scan.Unstamped, fmt.Errorf("head %s/%s: %w", bucket, key, err)
			}
			v, ok := objectstore.MetaValue(h.Metadata, meta)
			if err := scan.Object(key, v, ok); err != nil {
				return scan.Unstamped, err
			}
		}
	}
	return scan.Unstamped, nil
}
