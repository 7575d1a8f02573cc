package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// stampedS3Gateway starts VersityGW and a gateway whose S3 route has
// `stamp: true`.
func stampedS3Gateway(t *testing.T) (*s3Env, *Proc) {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	route := strings.Replace(s3RouteYAML("objects", "", srv.Endpoint, srv, "", "30s"),
		"        timeout: 30s\n", "        timeout: 30s\n        stamp: true\n", 1)
	p := startFencegate(t, s3GatewayYAML(route))
	return &s3Env{S3: srv, Proc: p, GW: p.URL("gateway")}, p
}

// `stamp: true` writes each admitted write's token into the object's
// metadata (signed by the gateway with the rest of the request; a worker's
// own copy of the header is replaced, not trusted). After the store is
// lost, `fence rebuild` raises the fences from the stamps and the zombie's
// write is refused again.
func TestS3StampRebuildAfterStoreLoss(t *testing.T) {
	e, p := stampedS3Gateway(t)
	zombie := s3Worker(e.GW, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(41))
	owner := s3Worker(e.GW, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(42))
	ctx := context.Background()

	if err := putObject(t, zombie, "report", "A"); err != nil {
		t.Fatal(err)
	}
	// The owner's write tries to forge a higher stamp; the gateway's wins.
	if _, err := owner.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("report"),
		Body: strings.NewReader("B"), Metadata: map[string]string{"fencing-token": "999999"}}); err != nil {
		t.Fatal(err)
	}
	if err := putObject(t, owner, "other/7", "B"); err != nil {
		t.Fatal(err)
	}
	h, err := e.direct().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("report")})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Metadata["fencing-token"]; got != "42" {
		t.Fatalf("stamp of report = %q (metadata %v); want 42", got, h.Metadata)
	}
	// An object written around the gateway has no stamp and is skipped.
	if err := putObject(t, e.direct(), "unstamped", "x"); err != nil {
		t.Fatal(err)
	}
	loseStore(t, p)
	out, err := fencegateCmd(t, p, "fence", "rebuild", "-c", p.CfgPath, "-bucket", s3Bucket)
	if err != nil {
		t.Fatalf("rebuild: %v\n%s", err, out)
	}
	if !strings.Contains(out, "scanned 2 stamped object(s) (1 without a stamp), raised or created 2 fence(s)") {
		t.Fatalf("rebuild said:\n%s", out)
	}
	p.Restart()

	wantRefusal(t, putObject(t, zombie, "report", "A2"), "stale_fencing_token", http.StatusConflict)
	wantRefusal(t, putObject(t, zombie, "other/7", "A2"), "stale_fencing_token", http.StatusConflict)
	if err := putObject(t, owner, "report", "B2"); err != nil {
		t.Fatalf("owner after rebuild: %v", err)
	}
	if got := e.objectBody(t, "report"); got != "B2" {
		t.Fatalf("report = %q; want B2", got)
	}
}

// loseStore stops p and deletes its store: serve then refuses to start,
// naming fence rebuild among the ways out.
func loseStore(t *testing.T, p *Proc) {
	t.Helper()
	p.Stop()
	if err := os.Remove(filepath.Join(p.Dir, "fencegate.db")); err != nil {
		t.Fatal(err)
	}
	if out := serveRefused(t, p); !strings.Contains(out, "fence rebuild") {
		t.Fatalf("serve on the lost store:\n%s", out)
	}
}

// A stamp is only as trustworthy as the bucket's credentials: an object
// written around the gateway can carry the largest token as its stamp. The
// rebuild's ceiling (fence.max_advance, as for import) keeps it from
// raising a fence out of every worker's reach; the operator decides with
// --prefix or --max-advance.
func TestS3RebuildCeiling(t *testing.T) {
	e, p := stampedS3Gateway(t)
	zombie := s3Worker(e.GW, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(41))
	owner := s3Worker(e.GW, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(42))
	ctx := context.Background()
	if err := putObject(t, owner, "report", "B"); err != nil {
		t.Fatal(err)
	}
	// Listed before "report": the rebuild meets it first.
	if _, err := e.direct().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("forged"),
		Body: strings.NewReader("x"), Metadata: map[string]string{"fencing-token": "9223372036854775807"}}); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	if err := os.Remove(filepath.Join(p.Dir, "fencegate.db")); err != nil {
		t.Fatal(err)
	}

	out, err := fencegateCmd(t, p, "fence", "rebuild", "-c", p.CfgPath, "--bucket", s3Bucket)
	if err == nil || !strings.Contains(out, "object "+s3Bucket+"/forged") || !strings.Contains(out, "--max-advance -1") ||
		!strings.Contains(out, "0 fence(s) raised before it") {
		t.Fatalf("rebuild over a forged stamp: err %v\n%s", err, out)
	}
	if out := serveRefused(t, p); !strings.Contains(out, "fence rebuild") {
		t.Fatalf("serve after the stopped rebuild:\n%s", out)
	}
	if out, err := fencegateCmd(t, p, "fence", "rebuild", "-c", p.CfgPath, "--bucket", s3Bucket, "--max-advance", "0"); err == nil ||
		!strings.Contains(out, "--max-advance 0") {
		t.Fatalf("rebuild --max-advance 0: err %v\n%s", err, out)
	}
	out, err = fencegateCmd(t, p, "fence", "rebuild", "-c", p.CfgPath, "--bucket", s3Bucket, "--prefix", "rep")
	if err != nil || !strings.Contains(out, "scanned 1 stamped object(s) (0 without a stamp), raised or created 1 fence(s)") {
		t.Fatalf("rebuild --prefix rep: err %v\n%s", err, out)
	}
	p.Restart()
	wantRefusal(t, putObject(t, zombie, "report", "A"), "stale_fencing_token", http.StatusConflict)
	if err := putObject(t, owner, "forged", "B"); err != nil {
		t.Fatalf("owner on the object whose forged stamp was skipped: %v", err)
	}
	if got := e.objectBody(t, "forged"); got != "B" {
		t.Fatalf("forged = %q; want B (the owner's write)", got)
	}

	// Forged again; the operator's decision this time: no ceiling for this
	// run. The object's fence is then out of every worker's reach, as asked.
	if _, err := e.direct().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("forged"),
		Body: strings.NewReader("x"), Metadata: map[string]string{"fencing-token": "9223372036854775807"}}); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	out, err = fencegateCmd(t, p, "fence", "rebuild", "-c", p.CfgPath, "--bucket", s3Bucket, "--max-advance", "-1")
	if err != nil || !strings.Contains(out, "raised or created 1 fence(s)") {
		t.Fatalf("rebuild --max-advance -1: err %v\n%s", err, out)
	}
	p.Restart()
	wantRefusal(t, putObject(t, owner, "forged", "C"), "stale_fencing_token", http.StatusConflict)
	if got := e.objectBody(t, "forged"); got != "x" {
		t.Fatalf("forged = %q; want x (the refused write never reached S3)", got)
	}
}
