package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/testenv"
)

// `precondition: etag` with the ETags kept in PostgreSQL (fence.etag,
// fence.etag_token), in both fence modes: the delayed-forward race is
// closed, a bypassing write is detected, and the row holds the ETag of the
// object S3 has.
func TestS3PreconditionPostgres(t *testing.T) {
	for _, mode := range []string{"local", "shared"} {
		t.Run(mode, func(t *testing.T) {
			t.Run("delayed", func(t *testing.T) {
				pg := testenv.Postgres(t)
				e, got := osDelayedRace(t, osS3, s3PostgresStore(pg.URL, mode), "etag")
				if got != "B" {
					t.Fatalf("object = %q; want B's (the delayed write must fail its precondition at S3)", got)
				}
				etag, token := s3PostgresETag(t, pg.URL, s3Bucket+"/job")
				if want := strings.Trim(e.s.read(t, "job").Version, `"`); etag != want || token != 2 {
					t.Fatalf("fence row: etag %q (token %d); want S3's %q recorded by token 2", etag, token, want)
				}
			})
			t.Run("bypass", func(t *testing.T) {
				pg := testenv.Postgres(t)
				e := startOSStore(t, osS3, s3PostgresStore(pg.URL, mode), "etag")
				osBypassOn(t, e)
				// The refused write left the record as it was: the
				// gateway's last write (v2), not the bypassing version.
				etag, _ := s3PostgresETag(t, pg.URL, s3Bucket+"/k")
				if etag == "" || etag == "?" || etag == strings.Trim(e.s.read(t, "k").Version, `"`) {
					t.Fatalf("fence row etag %q; want v2's, not the bypassing object's", etag)
				}
				// Deleting through the gateway (If-Match on the recorded
				// ETag) also fails, and the bypassing object stays.
				w := s3Worker(e.GW, s3WorkerKey, s3WorkerSecret, tokenOf(1).Load)
				_, err := w.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("k")})
				wantRefusal(t, err, "precondition_failed", http.StatusPreconditionFailed)
				if got := e.s.read(t, "k").Body; got != "bypass" {
					t.Fatalf("object = %q after a refused delete", got)
				}
			})
		})
	}
}

// s3PostgresETag reads the ETag bookkeeping of resource from the fence
// table.
func s3PostgresETag(t *testing.T, url, resource string) (string, int64) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var etag string
	var token int64
	if err := conn.QueryRow(ctx, `SELECT etag, etag_token FROM fence WHERE resource = $1`, resource).Scan(&etag, &token); err != nil {
		t.Fatalf("fence row of %s: %v", resource, err)
	}
	return etag, token
}
