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
				e, got := s3DelayedForward(t, s3PostgresStore(pg.URL, mode), "etag")
				if got != "B" {
					t.Fatalf("object = %q; want B's (the delayed write must fail its precondition at S3)", got)
				}
				etag, token := s3PostgresETag(t, pg.URL, s3Bucket+"/job")
				if want := e.directETag(t, "job"); etag != want || token != 2 {
					t.Fatalf("fence row: etag %q (token %d); want S3's %q recorded by token 2", etag, token, want)
				}
			})
			t.Run("bypass", func(t *testing.T) {
				pg := testenv.Postgres(t)
				e := startS3EnvStore(t, s3PostgresStore(pg.URL, mode), "etag")
				s3PreconditionBypass(t, e)
				// The refused write left the record as it was: the
				// gateway's last write (v2), not the bypassing version.
				etag, _ := s3PostgresETag(t, pg.URL, s3Bucket+"/k")
				if etag == "" || etag == "?" || etag == e.directETag(t, "k") {
					t.Fatalf("fence row etag %q; want v2's, not the bypassing object's", etag)
				}
				// Deleting through the gateway (If-Match on the recorded
				// ETag) also fails, and the bypassing object stays.
				_, err := e.worker(tokenOf(1)).DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("k")})
				wantRefusal(t, err, "precondition_failed", http.StatusPreconditionFailed)
				if got := e.objectBody(t, "k"); got != "bypass" {
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

// directETag is the object's ETag as S3 itself reports it, unquoted.
func (e *s3Env) directETag(t *testing.T, key string) string {
	t.Helper()
	out, err := e.direct().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("direct HeadObject %s: %v", key, err)
	}
	return strings.Trim(aws.ToString(out.ETag), `"`)
}
