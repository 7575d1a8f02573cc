package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	s3adapter "github.com/fencegate/fencegate/adapters/s3"
)

// The write-set oracle, white-box form (issue 41): each of oracleShapes is
// sent straight to VersityGW, on the seeded state restored before each,
// and the store's state before and after tells what it changed; the S3
// adapter's classification of the same request (Inspect: the objects it
// names, or the bucket as a whole) must cover every change, or refuse the
// request. A changed file of the store is the object of its path, a
// directory with an ETag the folder marker of its path + "/"; a bucket
// directory's own
// attributes are the bucket's settings, covered only by a bucket write; a
// directory that is no object (an implicit parent, created or removed with
// an object below it) is covered by a named object below it; an upload's
// files under .sgwtmp/multipart/<SHA-256 of the key> by that key. The black-box form
// (TestS3Oracle) checks the gateway as a whole; this one checks that the
// black-box answers are not refusals by luck: what the store would do with
// each shape is what the gateway fences.
func TestS3OracleWhiteBox(t *testing.T) {
	e, uploadID := startS3Oracle(t, func(t testing.TB, yaml string) string {
		return startFencegate(t, yaml).URL("gateway")
	})
	u, err := s3adapter.New(context.Background(), s3adapter.Options{
		Route: "objects", Resource: "{bucket}/{key}", Endpoint: e.S3.Endpoint,
		AccessKeyID: e.S3.AccessKey, SecretAccessKey: e.S3.SecretKey,
		Clients:           []s3adapter.Client{{AccessKeyID: s3WorkerKey, SecretAccessKey: s3WorkerSecret}},
		VirtualHostSuffix: "s3.internal", FenceBucketConfig: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(t.TempDir(), "seed")
	copyTree(t, e.S3.Dir, seed)
	direct := strings.TrimPrefix(e.S3.Endpoint, "http://")
	changedShapes := 0
	for _, s := range oracleShapes() {
		s.query = strings.ReplaceAll(s.query, oracleUploadID, uploadID)
		restoreTree(t, seed, e.S3.Dir)
		before := stateByPath(versityState(t, e.S3.Dir))

		// The store's reading: the shape path-style, straight to it.
		ds := s
		if s.vhost != "" {
			ds.vhost, ds.path = "", "/fenced"+s.path
			if s.path == "/" {
				ds.path = "/fenced"
			}
		}
		req, err := shapeRequest(direct, ds, 5, e.S3.AccessKey, e.S3.SecretKey)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		resp, err := oracleClient.Do(req)
		if err != nil {
			t.Fatalf("%s, sent to the store: %v", s.name, err)
		}
		resp.Body.Close()
		after := stateByPath(versityState(t, e.S3.Dir))
		var changed []string
		for p, lines := range before {
			if !sameState(lines, after[p]) {
				changed = append(changed, p)
			}
		}
		for p := range after {
			if _, ok := before[p]; !ok {
				changed = append(changed, p)
			}
		}
		if len(changed) == 0 {
			continue
		}
		changedShapes++

		// The gateway's reading of the same request.
		gwReq, err := shapeRequest("127.0.0.1:8080", s, 5, s3WorkerKey, s3WorkerSecret)
		if err != nil {
			t.Fatal(err)
		}
		insp, err := u.Inspect(gwReq, 5)
		if err != nil {
			continue // refused: covers whatever the store would do
		}
		objects := insp.Objects
		if objects == nil {
			objects = []map[string]string{insp.Vars}
		}
		for _, p := range changed {
			if !covered(p, before[p], after[p], insp.WritesCollection, insp.Collection["bucket"], objects) {
				t.Errorf("%s: the store changed %s, which the gateway's classification (objects %v, bucket write %v) does not cover:\n%s",
					s.name, p, objects, insp.WritesCollection, stateDiff(before[p], after[p]))
			}
		}
	}
	// The control: the shapes are writes the store carries out.
	if changedShapes < 20 {
		t.Fatalf("only %d shapes changed the store when sent to it directly; the oracle tests nothing", changedShapes)
	}
	t.Logf("%d of %d shapes change the store when sent to it directly", changedShapes, len(oracleShapes()))
}

// covered reports whether the gateway's classification covers a change of
// the store's path p (lines before and after).
func covered(p string, before, after []string, bucketWrite bool, bucket string, objects []map[string]string) bool {
	b, rest, _ := strings.Cut(p, "/")
	if bucketWrite && b == bucket {
		return true
	}
	if rest == "" {
		return false // a bucket's own settings, or the bucket itself
	}
	if tmp, ok := strings.CutPrefix(rest, ".sgwtmp"); ok {
		// VersityGW's uploads: .sgwtmp/multipart/<hex SHA-256 of the
		// key>/<upload id>/<part>; the directories above are shared.
		segs := strings.Split(strings.TrimPrefix(tmp, "/"), "/")
		for _, o := range objects {
			sum := sha256.Sum256([]byte(o["key"]))
			if o["bucket"] == b && o["key"] != "" && (len(segs) < 2 || segs[1] == hex.EncodeToString(sum[:])) {
				return true
			}
		}
		return false
	}
	isObject := func(lines []string) bool {
		for _, l := range lines {
			if strings.Contains(l, " xattr user.etag=") {
				return true
			}
		}
		return false
	}
	dir := len(before) > 0 && isDirLine(before[0]) || len(after) > 0 && isDirLine(after[0])
	for _, o := range objects {
		if o["bucket"] != b {
			continue
		}
		k := o["key"]
		switch {
		case !dir && k == rest:
			return true // a file: the object of its path
		case dir && (isObject(before) || isObject(after)) && k == rest+"/":
			return true // a directory with an ETag: the folder marker
		case dir && !isObject(before) && !isObject(after) && strings.HasPrefix(k, rest+"/"):
			return true // an implicit parent of the object named
		}
	}
	return false
}

// copyTree copies the directory src to dst with modes, times and extended
// attributes (cp -a).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", src, dst, err, out)
	}
}

// restoreTree makes dir hold exactly what seed holds.
func restoreTree(t *testing.T, seed, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if err := os.RemoveAll(filepath.Join(dir, en.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", "-a", seed+"/.", dir+"/").CombinedOutput(); err != nil {
		t.Fatalf("restore %s: %v\n%s", dir, err, out)
	}
}
