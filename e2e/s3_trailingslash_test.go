package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// lockedBucket has object lock enabled, so retention and legal hold can be
// set on its objects.
const lockedBucket = "locked"

// objectSettings is what the store holds as an object's settings, read
// directly: its tags, retention mode and legal hold.
func (e *s3Env) objectSettings(t *testing.T, bucket, key string) string {
	t.Helper()
	ctx := context.Background()
	c := e.direct()
	var b strings.Builder
	tg, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("direct GetObjectTagging %s: %v", key, err)
	}
	b.WriteString("tags=")
	for _, x := range tg.TagSet {
		b.WriteString(aws.ToString(x.Key) + ":" + aws.ToString(x.Value) + ",")
	}
	b.WriteString(" retention=")
	if r, err := c.GetObjectRetention(ctx, &s3.GetObjectRetentionInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err == nil {
		b.WriteString(string(r.Retention.Mode))
	}
	b.WriteString(" legalhold=")
	if l, err := c.GetObjectLegalHold(ctx, &s3.GetObjectLegalHoldInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err == nil {
		b.WriteString(string(l.LegalHold.Status))
	}
	return b.String()
}

// settingsWrites are the object-settings writes VersityGW's posix backend
// applies to the file of the key's path, where "K/" and "K" are one file.
func settingsWrites(c *s3.Client, bucket, key string) map[string]func() error {
	ctx := context.Background()
	b, k := aws.String(bucket), aws.String(key)
	return map[string]func() error{
		"PutObjectTagging": func() error {
			_, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: b, Key: k,
				Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("by"), Value: aws.String("stale")}}}})
			return err
		},
		"DeleteObjectTagging": func() error {
			_, err := c.DeleteObjectTagging(ctx, &s3.DeleteObjectTaggingInput{Bucket: b, Key: k})
			return err
		},
		"PutObjectRetention": func() error {
			_, err := c.PutObjectRetention(ctx, &s3.PutObjectRetentionInput{Bucket: b, Key: k,
				Retention: &types.ObjectLockRetention{Mode: types.ObjectLockRetentionModeGovernance, RetainUntilDate: aws.Time(time.Now().Add(time.Hour))}})
			return err
		},
		"PutObjectLegalHold": func() error {
			_, err := c.PutObjectLegalHold(ctx, &s3.PutObjectLegalHoldInput{Bucket: b, Key: k,
				LegalHold: &types.ObjectLockLegalHold{Status: types.ObjectLockLegalHoldStatusOn}})
			return err
		},
	}
}

// startLockedS3Env is VersityGW with an object-lock bucket and a gateway
// (a fencegate process) whose S3 route has the extra s3 settings extra
// (indented YAML lines).
func startLockedS3Env(t testing.TB, extra string) *s3Env {
	t.Helper()
	return startLockedS3EnvWith(t, extra, func(t testing.TB, yaml string) string {
		return startFencegate(t, yaml).URL("gateway")
	})
}

// startLockedS3EnvWith is startLockedS3Env with the gateway started by
// start, which returns its base URL.
func startLockedS3EnvWith(t testing.TB, extra string, start func(t testing.TB, yaml string) string) *s3Env {
	t.Helper()
	srv := testenv.Versity(t)
	e := &s3Env{S3: srv}
	if _, err := e.direct().CreateBucket(context.Background(), &s3.CreateBucketInput{
		Bucket: aws.String(lockedBucket), ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	route := s3RouteYAML("objects", "", srv.Endpoint, srv, "", "30s")
	if extra != "" {
		route = strings.Replace(route, "        clients:", extra+"        clients:", 1)
	}
	e.GW = start(t, s3GatewayYAML(route))
	return e
}

// VersityGW's posix backend folds "K/" into "K" for object settings:
// tagging, retention and legal hold on "K/" change the object "K", and on
// "K" the object "K/". Fenced on the path's key alone, a stale owner of
// the other spelling rewrote a fenced object's settings (issue 41, 9). By
// default a settings write is admitted on the fences of both spellings:
// with K fenced at 100 (and D/ at 100), each settings write on K/ (on D)
// with token 5 is refused, and the store's settings of K (of D/) are
// unchanged; the current owner's are admitted and land.
func TestS3TrailingSlashSettings(t *testing.T) {
	e := startLockedS3Env(t, "")
	ctx := context.Background()
	with := func(n int64) *s3.Client { return s3Worker(e.GW, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(n)) }
	for _, c := range []struct{ fenced, other, body string }{
		{"K", "K/", "content"},
		{"D/", "D", ""}, // a folder marker: a directory on the posix backend
	} {
		if _, err := with(100).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(lockedBucket), Key: aws.String(c.fenced),
			Body: strings.NewReader(c.body)}); err != nil {
			t.Fatalf("fence %s at 100: %v", c.fenced, err)
		}
		// Tags set by the owner, so a stale DeleteObjectTagging would show.
		if _, err := e.direct().PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String(lockedBucket), Key: aws.String(c.fenced),
			Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("by"), Value: aws.String("owner")}}}}); err != nil {
			t.Fatal(err)
		}
		before := e.objectSettings(t, lockedBucket, c.fenced)
		for name, write := range settingsWrites(with(5), lockedBucket, c.other) {
			wantRefusal(t, write(), "stale_fencing_token", http.StatusConflict)
			if got := e.objectSettings(t, lockedBucket, c.fenced); got != before {
				t.Fatalf("a stale %s on %q changed %q's settings: %s -> %s", name, c.other, c.fenced, before, got)
			}
		}
		// The current owner's settings write on the other spelling is
		// admitted (and, on this store, lands on the fenced object).
		if err := settingsWrites(with(100), lockedBucket, c.other)["PutObjectLegalHold"](); err != nil {
			t.Fatalf("the current owner's PutObjectLegalHold on %q: %v", c.other, err)
		}
		if got := e.objectSettings(t, lockedBucket, c.fenced); !strings.HasSuffix(got, "legalhold=ON") {
			t.Fatalf("the current owner's legal hold on %q: %q holds %s", c.other, c.fenced, got)
		}
	}
}

// With s3.fold_trailing_slash: true, "K/" and "K" share one fence for
// every write: K fenced at 100, a settings write and a PutObject on "K/"
// with token 5 are refused and change nothing; the current owner's
// settings write on "K/" is admitted.
func TestS3FoldTrailingSlash(t *testing.T) {
	e := startLockedS3Env(t, "        fold_trailing_slash: true\n")
	ctx := context.Background()
	with := func(n int64) *s3.Client { return s3Worker(e.GW, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(n)) }
	put := func(c *s3.Client, key, body string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(lockedBucket), Key: aws.String(key), Body: strings.NewReader(body)})
		return err
	}
	if err := put(with(100), "K", "content"); err != nil {
		t.Fatal(err)
	}
	before := e.objectSettings(t, lockedBucket, "K")
	for name, write := range settingsWrites(with(5), lockedBucket, "K/") {
		wantRefusal(t, write(), "stale_fencing_token", http.StatusConflict)
		if got := e.objectSettings(t, lockedBucket, "K"); got != before {
			t.Fatalf("a stale %s on K/ changed K's settings: %s -> %s", name, before, got)
		}
	}
	wantRefusal(t, put(with(5), "K/", ""), "stale_fencing_token", http.StatusConflict)
	if got := e.objectIn(t, lockedBucket, "K"); got != "content" {
		t.Fatalf("K = %q after a stale PutObject on K/", got)
	}
	if err := settingsWrites(with(100), lockedBucket, "K/")["PutObjectTagging"](); err != nil {
		t.Fatalf("the current owner's PutObjectTagging on K/: %v", err)
	}
	if got := e.objectSettings(t, lockedBucket, "K"); !strings.HasPrefix(got, "tags=by:stale,") {
		t.Fatalf("the current owner's tagging on K/ did not land on K: %s", got)
	}
}
