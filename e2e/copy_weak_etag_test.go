package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
)

// A stamped copy's condition on its source names the source's ETag as a
// weak validator (W/"..."): If-Match compares strongly (RFC 9110 13.1.1),
// so a weak tag never matches and the store refuses the copy (412). The
// gateway, which evaluates the worker's conditions against the source it
// read before replacing them with its own, must answer as the store does;
// before, it compared weakly, held the condition and made the copy. The
// store's own answer to the same copy, made directly, is the oracle, and
// the destination is read from the store.
func TestCopyWeakSourceETagAsTheStore(t *testing.T) {
	t.Run("s3", func(t *testing.T) {
		srv, p := startS3Stamping(t)
		ctx := context.Background()
		worker := s3Worker(p.URL("gateway"), s3WorkerKey, s3WorkerSecret, awsfence.Fixed(9))
		direct := s3Worker(srv.Endpoint, srv.AccessKey, srv.SecretKey, awsfence.Fixed(0))
		b := aws.String(osBucket)
		put := func(key, body string) string {
			out, err := worker.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String(key), Body: strings.NewReader(body)})
			if err != nil {
				t.Fatal(err)
			}
			return aws.ToString(out.ETag)
		}
		etag := put("src", "source body")
		dstETag := put("dst", "old dst")
		copyWeak := func(c *s3.Client, key string) error {
			_, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: b, Key: aws.String(key),
				CopySource: aws.String(osBucket + "/src"), CopySourceIfMatch: aws.String("W/" + etag)})
			return err
		}
		oracle := copyWeak(direct, "oracle")
		err := copyWeak(worker, "dst")
		h, herr := direct.HeadObject(ctx, &s3.HeadObjectInput{Bucket: b, Key: aws.String("dst")})
		if herr != nil {
			t.Fatal(herr)
		}
		if (oracle == nil) != (err == nil) || (oracle == nil) != (aws.ToString(h.ETag) != dstETag) {
			t.Fatalf("copy on W/%s: the store answers %v; the gateway %v, the destination changed: %v",
				etag, oracle, err, aws.ToString(h.ETag) != dstETag)
		}
	})
	t.Run("azure", func(t *testing.T) {
		e := startAzEnv(t, "")
		ctx := context.Background()
		worker := azWorker(t, e.GW, tokenOf(9).Load)
		if err := azPut(worker, "src", "source body"); err != nil {
			t.Fatal(err)
		}
		if err := azPut(worker, "dst", "old dst"); err != nil {
			t.Fatal(err)
		}
		etag, _ := e.props(t, "src")
		dstETag, _ := e.props(t, "dst")
		weak := azcore.ETag("W/" + string(etag))
		copyWeak := func(bc *blob.Client, source string) error {
			_, err := bc.StartCopyFromURL(ctx, source, &blob.StartCopyFromURLOptions{
				SourceModifiedAccessConditions: &blob.SourceModifiedAccessConditions{SourceIfMatch: &weak}})
			return err
		}
		oracle := copyWeak(e.direct(t).ServiceClient().NewContainerClient(azContainer).NewBlobClient("oracle"),
			e.Az.Endpoint+"/"+azContainer+"/src")
		err := copyWeak(worker.ServiceClient().NewContainerClient(azContainer).NewBlobClient("dst"), e.GW+"/"+azContainer+"/src")
		after, _ := e.props(t, "dst")
		if azStatus(oracle) != azStatus(err) || (oracle == nil) != (after != dstETag) {
			t.Fatalf("copy on %s: the store answers %v; the gateway %v, the destination changed: %v", weak, oracle, err, after != dstETag)
		}
	})
}
