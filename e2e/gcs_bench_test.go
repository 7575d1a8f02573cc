package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"

	"github.com/fencegate/fencegate/internal/testenv"
)

// BenchmarkGCSUpload writes objects with the official client's multipart
// upload, straight to fake-gcs-server and through a gateway (stamping, no
// precondition) in front of it: the ratio of the two is the gateway's cost.
//
//	go test -run '^$' -bench BenchmarkGCSUpload -benchtime 200x ./e2e/
func BenchmarkGCSUpload(b *testing.B) {
	srv := testenv.FakeGCS(b)
	srv.CreateBucket(b, gcsBucket)
	p := startFencegate(b, s3GatewayYAML(gcsRouteYAML("objects", "", srv.Endpoint, "", "30s")))
	direct, err := storage.NewClient(context.Background(), option.WithEndpoint(srv.Endpoint+"/storage/v1/"), option.WithoutAuthentication())
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	gw := gcsWorker(b, p.URL("gateway"), func() int64 { return 1 })
	for _, size := range []int{4 << 10, 16 << 20} {
		data := bytes.Repeat([]byte("x"), size)
		for _, c := range []struct {
			name string
			c    *storage.Client
		}{{"direct", direct}, {"gateway", gw}} {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, c.name), func(b *testing.B) {
				b.SetBytes(int64(size))
				for i := 0; b.Loop(); i++ {
					w := c.c.Bucket(gcsBucket).Object(fmt.Sprintf("bench-%d", i%8)).NewWriter(context.Background())
					w.ChunkSize = 0
					if _, err := io.Copy(w, bytes.NewReader(data)); err != nil {
						b.Fatal(err)
					}
					if err := w.Close(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
