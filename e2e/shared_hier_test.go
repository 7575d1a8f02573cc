package e2e

// Hierarchical keys in fence mode shared: two real fencegate replicas over
// one PostgreSQL, in front of real Apache mod_dav and VersityGW, checked on
// the files and objects the upstream holds.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// sharedDAVYAML is one replica of a WebDAV route (route: davRouteYAML,
// naming COPY and MOVE, or davDefaultRouteYAML) in fence mode shared on
// dbURL.
func sharedDAVYAML(route string, dbURL string) string {
	return "gateway:\n  listen: $GATEWAY\n  routes:\n" + route + fmt.Sprintf(`store:
  postgres: {url: %q, timeout: 2s}
fence: {mode: shared, verify_tokens: false}
admin: {listen: $ADMIN}
`, dbURL)
}

// davExists reports whether the server holds name (a file or a
// collection), read on its disk.
func davExists(t *testing.T, s davServer, name string) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(s.root, name))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

// sharedDAVReplicas starts Apache and two replicas of a WebDAV route
// (route, as sharedDAVYAML takes it) in fence mode shared.
func sharedDAVReplicas(t *testing.T, route func(davServer) string) (davServer, []*Proc, string, string) {
	pg := testenv.Postgres(t)
	s := apacheDAV(t)
	r := sharedReplicas(t, 2, sharedDAVYAML(route(s), pg.URL))
	return s, r, "http://" + r[0].addrs["gateway"], "http://" + r[1].addrs["gateway"]
}

// sharedDAVColl starts Apache and two replicas of a WebDAV route in fence
// mode shared, and makes the collection /coll/ with token 2 through the
// first.
func sharedDAVColl(t *testing.T, route func(davServer) string) (davServer, []*Proc, string, string) {
	s, r, gw1, gw2 := sharedDAVReplicas(t, route)
	if st, body := dav(t, "MKCOL", gw1, "/coll/", "2", "", ""); st/100 != 2 {
		t.Fatalf("MKCOL: %d %s", st, body)
	}
	return s, r, gw1, gw2
}

// TestSharedDAVHierarchy: on a WebDAV route shared by two replicas, a
// stale collection DELETE or MOVE on replica 2 after a member write with a
// newer token on replica 1 is refused and the member's file stays on
// Apache; after the collection's owner moved it with a newer token on
// replica 2, a member write with an older token on replica 1 is refused.
func TestSharedDAVHierarchy(t *testing.T) {
	s, _, gw1, gw2 := sharedDAVColl(t, davWebDAVRoute)
	if st, body := dav(t, "PUT", gw1, "/coll/m", "9", "", "member"); st/100 != 2 {
		t.Fatalf("member PUT on replica 1: %d %s", st, body)
	}
	// Token 2 is the collection's own, accepted before the member's 9
	// (its below level refuses it); 3 would advance it (the advance reads
	// the members).
	for _, tc := range []struct{ method, token, dest string }{{"DELETE", "2", ""}, {"DELETE", "3", ""}, {"MOVE", "2", "/coll2/"}, {"MOVE", "3", "/coll2/"}} {
		st, body := dav(t, tc.method, gw2, "/coll/", tc.token, tc.dest, "")
		if st != http.StatusConflict || refusalCode(body) != "stale_fencing_token" {
			t.Fatalf("stale %s of the collection with %s on replica 2: %d %s; want 409 stale_fencing_token", tc.method, tc.token, st, body)
		}
		if got := davFile(t, s, "coll/m"); got != "member" {
			t.Fatalf("after a stale %s of the collection on replica 2, coll/m = %q", tc.method, got)
		}
	}
	if got := davFile(t, s, "coll2"); got != "<absent>" {
		t.Fatalf("coll2 exists after a refused MOVE")
	}

	if st, body := dav(t, "MOVE", gw2, "/coll/", "10", "/coll3/", ""); st/100 != 2 {
		t.Fatalf("collection owner's MOVE with token 10 on replica 2: %d %s", st, body)
	}
	for _, path := range []string{"/coll/m", "/coll3/m", "/coll3/new"} {
		st, body := dav(t, "PUT", gw1, path, "9", "", "late")
		if st != http.StatusConflict || refusalCode(body) != "stale_fencing_token" {
			t.Fatalf("member PUT %s with 9 on replica 1 after the collection's 10: %d %s; want 409 stale_fencing_token", path, st, body)
		}
	}
	if got, gone, new := davFile(t, s, "coll3/m"), davFile(t, s, "coll/m"), davFile(t, s, "coll3/new"); got != "member" || gone != "<absent>" || new != "<absent>" {
		t.Fatalf("coll3/m = %q, coll/m = %q, coll3/new = %q after refused member writes", got, gone, new)
	}
	if st, body := dav(t, "PUT", gw1, "/coll3/m", "10", "", "owner"); st/100 != 2 {
		t.Fatalf("member PUT with the collection's token: %d %s", st, body)
	}
	if got := davFile(t, s, "coll3/m"); got != "owner" {
		t.Fatalf("coll3/m = %q; want the owner's write", got)
	}
}

// davWebDAVRoute is davRouteYAML without a precondition.
func davWebDAVRoute(s davServer) string { return davRouteYAML(s, "") }

// TestSharedDAVDefaultRouteTrees is TestDAVDefaultRouteTrees in fence mode
// shared: two replicas over one PostgreSQL in front of Apache, with the
// default fenced_methods; the member is written through replica 1, the
// collection through replica 2.
func TestSharedDAVDefaultRouteTrees(t *testing.T) {
	s, _, gw1, gw2 := sharedDAVReplicas(t, davDefaultRouteYAML)
	davCollTrees(t, s, gw1, gw2)
}

// TestSharedDAVCollectionWaitsForMember proves I2 across levels and
// replicas on Apache, on a route with the default fenced_methods: a
// collection DELETE with a newer token on replica 2 is not forwarded while
// an older member PUT (its body still arriving) is in flight on replica 1;
// Apache applies the PUT first, then the DELETE.
func TestSharedDAVCollectionWaitsForMember(t *testing.T) {
	s, r, gw1, gw2 := sharedDAVColl(t, davDefaultRouteYAML)
	// The member PUT streams its body (unknown length): it is in flight
	// from its admission until Apache answers.
	pr, pw := io.Pipe()
	putDone := startRequest("PUT", gw1+"/coll/m", "9", pr)
	if _, err := pw.Write([]byte("slow ")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		_, body := call(t, "GET", r[0].URL("admin")+"/v1/fences?resource=/coll/m", "")
		return strings.Contains(body, `"highest":9`)
	})
	// The fence row says 9 from the member's advance on, before its
	// admission; Apache's file (mod_dav_fs streams into a temporary file
	// in the collection) says the PUT was admitted and forwarded.
	waitFor(t, func() bool {
		entries, err := os.ReadDir(filepath.Join(s.root, "coll"))
		return err == nil && len(entries) > 0
	})
	delDone := startRequest("DELETE", gw2+"/coll/", "10", nil)
	select {
	case d := <-delDone:
		pw.Close()
		t.Fatalf("collection DELETE answered (%d %s %v) while the older member PUT was in flight on the other replica", d.status, d.body, d.err)
	case <-time.After(time.Second):
	}
	if !davExists(t, s, "coll") {
		t.Fatal("the collection is gone from Apache while the member PUT is in flight")
	}
	if _, err := pw.Write([]byte("member")); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	put := <-putDone
	if put.err != nil || put.status != http.StatusCreated {
		t.Fatalf("member PUT: %d %s %v; want 201 (Apache stored it before the DELETE)", put.status, put.body, put.err)
	}
	del := <-delDone
	if del.err != nil || del.status/100 != 2 {
		t.Fatalf("collection DELETE after the member landed: %d %s %v", del.status, del.body, del.err)
	}
	if del.at.Before(put.at) {
		t.Fatalf("the DELETE was answered before the member PUT")
	}
	if davExists(t, s, "coll") || davExists(t, s, "coll/m") {
		t.Fatalf("after the DELETE the collection or its member is still on Apache; want both gone (the DELETE applied last)")
	}
	// And the member's older token is refused from now on.
	if st, body := dav(t, "PUT", gw1, "/coll/m", "9", "", "late"); st != http.StatusConflict || refusalCode(body) != "stale_fencing_token" {
		t.Fatalf("member PUT with 9 after the collection's DELETE with 10: %d %s; want 409 stale_fencing_token", st, body)
	}
}

// answer is a request's answer, and when it came.
type answer struct {
	status int
	body   string
	at     time.Time
	err    error
}

// startRequest sends a fenced request in the background.
func startRequest(method, url, token string, body io.Reader) <-chan answer {
	done := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(method, url, body)
		req.Header.Set("Fencing-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- answer{err: err, at: time.Now()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- answer{status: resp.StatusCode, body: string(b), at: time.Now()}
	}()
	return done
}

// TestSharedS3BucketWritesFenced: bucket-level writes on a {bucket}/{key}
// route in fence mode shared, two replicas over VersityGW: a DeleteBucket
// on replica 2 older than an object write on replica 1 is refused and the
// bucket stays on the store; the newest is admitted; an object write on
// replica 2 older than a bucket write on replica 1 is refused and never
// reaches the store.
func TestSharedS3BucketWritesFenced(t *testing.T) {
	pg := testenv.Postgres(t)
	srv := testenv.Versity(t)
	e := &s3Env{S3: srv}
	yaml := s3GatewayYAMLStore(s3PostgresStore(pg.URL, "shared"), s3RouteYAML("objects", "", srv.Endpoint, srv, "", "30s"))
	r := sharedReplicas(t, 2, yaml)
	ctx := context.Background()
	with := func(p *Proc, n int64) *s3.Client {
		return s3Worker(p.URL("gateway"), s3WorkerKey, s3WorkerSecret, awsfence.Fixed(n))
	}
	const b = "sharedtree"
	if _, err := with(r[0], 1).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
		t.Fatalf("CreateBucket through replica 1: %v", err)
	}
	if !e.bucketExists(t, b) {
		t.Fatal("CreateBucket answered but the bucket is not on the store")
	}
	put := func(c *s3.Client, key, body string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String(key), Body: strings.NewReader(body)})
		return err
	}
	if err := put(with(r[0], 5), "x", "five"); err != nil {
		t.Fatal(err)
	}
	if _, err := with(r[0], 5).DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	_, err := with(r[1], 3).DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(b)})
	wantRefusal(t, err, "stale_fencing_token", http.StatusConflict)
	if !e.bucketExists(t, b) {
		t.Fatal("a stale DeleteBucket on replica 2 deleted the bucket")
	}
	if _, err := with(r[1], 5).DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(b)}); err != nil {
		t.Fatalf("DeleteBucket with the newest token on replica 2: %v", err)
	}
	if e.bucketExists(t, b) {
		t.Fatal("DeleteBucket answered but the bucket is still on the store")
	}
	if _, err := with(r[0], 6).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, put(with(r[1], 4), "y", "four"), "stale_fencing_token", http.StatusConflict)
	if _, err := e.direct().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("y")}); err == nil {
		t.Fatal("an object write older than the bucket's fence reached the store")
	}
	if err := put(with(r[1], 6), "y", "six"); err != nil {
		t.Fatalf("object write with the bucket's token on replica 2: %v", err)
	}
}
