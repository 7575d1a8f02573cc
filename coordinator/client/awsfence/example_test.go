package awsfence_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/fencegate/fencegate/coordinator/client/awsfence"
)

// A worker writes an object through the gateway with its lease's token
// (docs/s3.md). Its lease was lost while it paused and a newer owner's
// token 42 already reached the object: the SDK returns an error that
// errors.As turns into a *client.StaleError.
func ExampleWithToken() {
	gateway := staleGateway() // stands in for fencegate's S3 route
	defer gateway.Close()
	ctx := context.Background()
	lease := &client.Lease{Resource: "invoices/2026-11.csv", Token: 41} // from client.Acquire
	workerSecret := "worker-secret"

	s3c := s3.New(s3.Options{Region: "us-east-1"}, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(gateway.URL)
		o.UsePathStyle = true
		o.Credentials = credentials.NewStaticCredentialsProvider("worker", workerSecret, "")
	}, awsfence.WithToken(func() int64 { return lease.Token }))

	_, err := s3c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("invoices"), Key: aws.String("2026-11.csv"), Body: strings.NewReader("total,42"),
	})
	var stale *client.StaleError
	if errors.As(err, &stale) {
		// A newer owner's token reached the object; this write had no
		// effect. Stop the dependent work; do not retry with this token.
		fmt.Printf("fenced out of %s: token %d, highest %d\n", stale.Resource, stale.Token, stale.Highest)
	}
	// Output: fenced out of invoices/2026-11.csv: token 41, highest 42
}

// staleGateway answers every write as fencegate's S3 route does once a
// newer token was accepted (adapters/s3 WriteError).
func staleGateway() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, `<Error><Code>stale_fencing_token</Code><Message>token %s is older than 42 already accepted for invoices/2026-11.csv</Message>`+
			`<Resource>invoices/2026-11.csv</Resource><Token>%s</Token><Highest>42</Highest><Route>invoices</Route><RequestId>1</RequestId></Error>`,
			r.Header.Get("Fencing-Token"), r.Header.Get("Fencing-Token"))
	}))
}
