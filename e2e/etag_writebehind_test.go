package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
)

// The embedded store keeps `precondition: etag` records in memory and
// writes them behind (adapters/bolt/etag.go, docs/design.md "ETag records
// written behind"). A kill -9 loses acknowledged records: the file must then
// say unknown (never an older ETag, which would wedge the object), the next
// write re-learns with a HEAD and lands, the late write the dead gateway had
// forwarded (If-Match on the ETag it knew) is refused by S3, and the record
// of a refused write, made durable at once, keeps refusing after another
// kill -9.
func TestS3PreconditionETagsWrittenBehindKill9(t *testing.T) {
	e := startS3Env(t, "etag")
	ctx := context.Background()
	old := e.worker(tokenOf(1))
	for _, v := range []string{"v1", "v2"} {
		if err := putObject(t, old, "out", v); err != nil {
			t.Fatal(err)
		}
	}
	late := e.directETag(t, "out") // what the old owner's next write carries
	e.Proc.Kill9()

	// The file as the dead gateway left it: unknown, not v1's or v2's ETag.
	st, err := bolt.Open(filepath.Join(e.Proc.Dir, "fencegate.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.LoadFence(ctx, s3Bucket+"/out")
	st.Close()
	if err != nil || rec.ETag != fencegate.ETagUnknown {
		t.Fatalf("record after kill -9: %+v, %v; want ETag %q", rec, err, fencegate.ETagUnknown)
	}

	e.Proc.Restart()
	cur := e.worker(tokenOf(2))
	if err := putObject(t, cur, "out", "v3"); err != nil {
		t.Fatalf("write after the kill: %v (wedged on a stale record?)", err)
	}
	// The old owner's write that was on its way when the gateway died
	// carries If-Match on v2: S3 refuses it.
	_, err = e.direct().PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s3Bucket), Key: aws.String("out"), Body: strings.NewReader("late"),
		IfMatch: aws.String(`"` + late + `"`),
	})
	if err == nil || !strings.Contains(err.Error(), "412") && !strings.Contains(err.Error(), "PreconditionFailed") {
		t.Fatalf("late write with If-Match on v2: %v; want 412", err)
	}
	if got := e.objectBody(t, "out"); got != "v3" {
		t.Fatalf("object = %q; want v3", got)
	}

	if err := putObject(t, e.direct(), "out", "bypass"); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, putObject(t, cur, "out", "v4"), "precondition_failed", http.StatusPreconditionFailed)
	e.Proc.Kill9()
	e.Proc.Restart()
	wantRefusal(t, putObject(t, cur, "out", "v4"), "precondition_failed", http.StatusPreconditionFailed)
	if got := e.objectBody(t, "out"); got != "bypass" {
		t.Fatalf("object = %q; want the bypassing write left alone", got)
	}
}
