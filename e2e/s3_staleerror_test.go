package e2e

import (
	"errors"
	"testing"

	"github.com/aws/smithy-go"
	"github.com/fencegate/fencegate/coordinator/client"
)

// An S3 stale refusal from the real gateway in front of versitygw reaches
// aws-sdk-go-v2 (with awsfence.WithToken) as an error that errors.As turns
// into *client.StaleError with the resource and the highest token, while
// the SDK's own smithy.APIError stays in the chain.
func TestS3StaleRefusalIsStaleError(t *testing.T) {
	e := startS3Env(t, "")
	if err := putObject(t, e.worker(tokenOf(7)), "stale/err", "B"); err != nil {
		t.Fatal(err)
	}
	err := putObject(t, e.worker(tokenOf(6)), "stale/err", "A")
	var stale *client.StaleError
	if !errors.As(err, &stale) {
		t.Fatalf("error %v (%T) is not a *client.StaleError", err, err)
	}
	if stale.Resource != s3Bucket+"/stale/err" || stale.Token != 6 || stale.Highest != 7 {
		t.Fatalf("StaleError %+v; want resource %s/stale/err, token 6, highest 7", stale, s3Bucket)
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "stale_fencing_token" {
		t.Fatalf("the SDK's APIError is gone from %v", err)
	}
	if got := e.objectBody(t, "stale/err"); got != "B" {
		t.Fatalf("S3 holds %q; want B", got)
	}
}
