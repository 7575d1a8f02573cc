package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
)

// s3Shape is one request a worker could send, written out raw: the
// oracle signs it with the worker's key and sends it as is.
type s3Shape struct {
	name   string
	method string
	vhost  string // Host for virtual-hosted addressing ("" path style)
	path   string // escaped, as on the wire
	query  string
	header map[string]string
	body   string
	// want is the refusal code the gateway must answer with ("stale":
	// stale_fencing_token; "" any refusal of the gateway's own).
	want string
}

// The seeded state: every object below is written through the gateway
// with token 100 (its fence), and a multipart upload of "a" is open.
var oracleObjects = []struct{ bucket, key, body string }{
	{"fenced", "a", "A"},
	{"fenced", "src", "source"},
	{"fenced", "dir/b", "B"},
	{"fenced", "K", "K"},
	{"fenced", "D/", ""},
	{"fenced", "sp ace", "space"},
	{"fenced", "ü", "u-umlaut"},
	{"locked", "L", "L"},
}

const oracleUploadID = "$UPLOAD" // replaced by the open upload's id

// oracleShapes are the write shapes of the black-box oracle: every S3
// write operation, on the seeded objects and buckets, in the spellings a
// worker could choose (path and virtual-host style, encoded keys, dot
// segments, trailing slashes, parameter case, duplicates, empty
// conditions, bodies naming objects). Each is sent with token 5.
func oracleShapes() []s3Shape {
	const vh = "fenced.s3.internal"
	xmlTags := `<Tagging><TagSet><Tag><Key>by</Key><Value>stale</Value></Tag></TagSet></Tagging>`
	retention := `<Retention><Mode>GOVERNANCE</Mode><RetainUntilDate>` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `</RetainUntilDate></Retention>`
	hold := `<LegalHold><Status>ON</Status></LegalHold>`
	del := func(keys ...string) string {
		var b strings.Builder
		b.WriteString(`<Delete>`)
		for _, k := range keys {
			b.WriteString(`<Object><Key>` + k + `</Key></Object>`)
		}
		return b.String() + `</Delete>`
	}
	complete := `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"x"</ETag></Part></CompleteMultipartUpload>`
	copyFrom := func(src string) map[string]string { return map[string]string{"X-Amz-Copy-Source": src} }
	up := "uploadId=" + oracleUploadID
	return []s3Shape{
		// PutObject and its spellings.
		{name: "PutObject", method: "PUT", path: "/fenced/a", body: "stale", want: "stale"},
		{name: "PutObject x-id", method: "PUT", path: "/fenced/a", query: "x-id=PutObject", body: "stale", want: "stale"},
		{name: "PutObject vhost", method: "PUT", vhost: vh, path: "/a", body: "stale", want: "stale"},
		{name: "PutObject vhost upper-case host", method: "PUT", vhost: "FENCED.S3.INTERNAL", path: "/a", body: "stale", want: "stale"},
		{name: "PutObject encoded key", method: "PUT", path: "/fenced/%61", body: "stale", want: "stale"},
		{name: "PutObject nested", method: "PUT", path: "/fenced/dir/b", body: "stale", want: "stale"},
		{name: "PutObject encoded slash", method: "PUT", path: "/fenced/dir%2Fb", body: "stale", want: "invalid_resource"},
		{name: "PutObject double slash", method: "PUT", path: "/fenced/dir//b", body: "stale", want: "InvalidArgument"},
		{name: "PutObject dot segment", method: "PUT", path: "/fenced/dir/./b", body: "stale", want: "InvalidArgument"},
		{name: "PutObject dot-dot segment", method: "PUT", path: "/fenced/dir/../a", body: "stale", want: "invalid_resource"},
		{name: "PutObject encoded dot-dot", method: "PUT", path: "/fenced/dir/%2E%2E/a", body: "stale", want: "invalid_resource"},
		{name: "PutObject space", method: "PUT", path: "/fenced/sp%20ace", body: "stale", want: "stale"},
		{name: "PutObject unicode", method: "PUT", path: "/fenced/%C3%BC", body: "stale", want: "stale"},
		{name: "PutObject folder marker", method: "PUT", path: "/fenced/D/", want: "stale"},
		{name: "PutObject x-amz-tagging", method: "PUT", path: "/fenced/a", header: map[string]string{"X-Amz-Tagging": "by=stale"}, body: "stale", want: "stale"},
		{name: "PutObject forged stamp", method: "PUT", path: "/fenced/a", header: map[string]string{"X-Amz-Meta-Fencing-Token": "1000"}, body: "stale", want: "stale"},
		{name: "PutObject empty If-Match", method: "PUT", path: "/fenced/a", header: map[string]string{"If-Match": ""}, body: "stale", want: "InvalidArgument"},
		{name: "PutObject ?Tagging (case)", method: "PUT", path: "/fenced/a", query: "Tagging", body: xmlTags, want: "InvalidArgument"},
		{name: "PutObject ?torrent (unknown)", method: "PUT", path: "/fenced/a", query: "torrent", body: "stale", want: "NotImplemented"},
		{name: "PutObject header in query", method: "PUT", path: "/fenced/a", query: "x-amz-copy-source=fenced%2Fsrc", want: "NotImplemented"},
		{name: "PATCH object", method: "PATCH", path: "/fenced/a", body: "stale", want: "NotImplemented"},

		// Object settings, and the trailing-slash fold.
		{name: "PutObjectTagging", method: "PUT", path: "/fenced/a", query: "tagging", body: xmlTags, want: "stale"},
		{name: "PutObjectTagging twice", method: "PUT", path: "/fenced/a", query: "tagging&tagging", body: xmlTags, want: "InvalidArgument"},
		{name: "PutObjectTagging K/", method: "PUT", path: "/fenced/K/", query: "tagging", body: xmlTags, want: "stale"},
		{name: "PutObjectTagging D", method: "PUT", path: "/fenced/D", query: "tagging", body: xmlTags, want: "stale"},
		{name: "PutObjectTagging vhost", method: "PUT", vhost: vh, path: "/a", query: "tagging", body: xmlTags, want: "stale"},
		{name: "DeleteObjectTagging", method: "DELETE", path: "/fenced/a", query: "tagging", want: "stale"},
		{name: "DeleteObjectTagging K/", method: "DELETE", path: "/fenced/K/", query: "tagging", want: "stale"},
		{name: "DeleteObjectTagging ?TAGGING", method: "DELETE", path: "/fenced/a", query: "TAGGING", want: "InvalidArgument"},
		{name: "PutObjectAcl", method: "PUT", path: "/fenced/a", query: "acl", header: map[string]string{"X-Amz-Acl": "public-read"}, want: "stale"},
		{name: "PutObjectRetention", method: "PUT", path: "/locked/L", query: "retention", body: retention, want: "stale"},
		{name: "PutObjectRetention L/", method: "PUT", path: "/locked/L/", query: "retention", body: retention, want: "stale"},
		{name: "PutObjectLegalHold", method: "PUT", path: "/locked/L", query: "legal-hold", body: hold, want: "stale"},
		{name: "PutObjectLegalHold L/", method: "PUT", path: "/locked/L/", query: "legal-hold", body: hold, want: "stale"},
		{name: "RestoreObject", method: "POST", path: "/fenced/a", query: "restore", body: `<RestoreRequest><Days>1</Days></RestoreRequest>`, want: "stale"},

		// Deletes.
		{name: "DeleteObject", method: "DELETE", path: "/fenced/a", want: "stale"},
		{name: "DeleteObject vhost", method: "DELETE", vhost: vh, path: "/dir/b", want: "stale"},
		{name: "DeleteObject versionId", method: "DELETE", path: "/fenced/a", query: "versionId=null", want: "stale"},
		{name: "DeleteObject folder marker", method: "DELETE", path: "/fenced/D/", want: "stale"},
		{name: "DeleteObject ?acl (unknown)", method: "DELETE", path: "/fenced/a", query: "acl", want: "NotImplemented"},
		{name: "DeleteObjects", method: "POST", path: "/fenced", query: "delete", body: del("a", "dir/b"), want: "stale"},
		{name: "DeleteObjects vhost", method: "POST", vhost: vh, path: "/", query: "delete", body: del("K"), want: "stale"},
		{name: "DeleteObjects dot-dot key", method: "POST", path: "/fenced", query: "delete", body: del("x/../a"), want: "InvalidArgument"},
		{name: "DeleteObjects ?Delete (case)", method: "POST", path: "/fenced", query: "Delete", body: del("a"), want: "InvalidArgument"},

		// CopyObject: the destination is fenced whatever the source.
		{name: "CopyObject", method: "PUT", path: "/fenced/a", header: copyFrom("fenced/src"), want: "stale"},
		{name: "CopyObject leading slash source", method: "PUT", path: "/fenced/a", header: copyFrom("/fenced/src"), want: "stale"},
		{name: "CopyObject encoded source", method: "PUT", path: "/fenced/a", header: copyFrom("fenced/%73rc"), want: "stale"},
		{name: "CopyObject dot-segment source", method: "PUT", path: "/fenced/a", header: copyFrom("fenced/dir/../src"), want: "stale"},
		{name: "CopyObject source versionId", method: "PUT", path: "/fenced/dir/b", header: copyFrom("fenced/src?versionId=null"), want: "stale"},
		{name: "CopyObject onto itself REPLACE", method: "PUT", path: "/fenced/a",
			header: map[string]string{"X-Amz-Copy-Source": "fenced/a", "X-Amz-Metadata-Directive": "REPLACE", "X-Amz-Meta-By": "stale"}, want: "stale"},
		{name: "CopyObject vhost", method: "PUT", vhost: vh, path: "/sp%20ace", header: copyFrom("fenced/src"), want: "stale"},
		{name: "CopyObject empty copy-source condition", method: "PUT", path: "/fenced/a",
			header: map[string]string{"X-Amz-Copy-Source": "fenced/src", "X-Amz-Copy-Source-If-Match": ""}, want: "InvalidArgument"},

		// Multipart uploads.
		{name: "CreateMultipartUpload", method: "POST", path: "/fenced/a", query: "uploads", want: "stale"},
		{name: "CreateMultipartUpload ?Uploads (case)", method: "POST", path: "/fenced/a", query: "Uploads", want: "InvalidArgument"},
		{name: "UploadPart", method: "PUT", path: "/fenced/a", query: "partNumber=2&" + up, body: "stale part", want: "stale"},
		{name: "UploadPartCopy", method: "PUT", path: "/fenced/a", query: "partNumber=3&" + up, header: copyFrom("fenced/src"), want: "stale"},
		{name: "UploadPart uploadId twice", method: "PUT", path: "/fenced/a", query: "partNumber=2&" + up + "&UploadId=x", body: "stale", want: "InvalidArgument"},
		{name: "CompleteMultipartUpload", method: "POST", path: "/fenced/a", query: up, body: complete, want: "stale"},
		{name: "CompleteMultipartUpload ?select", method: "POST", path: "/fenced/a", query: "select&" + up, body: complete, want: "NotImplemented"},
		{name: "AbortMultipartUpload", method: "DELETE", path: "/fenced/a", query: up, want: "stale"},
		{name: "AbortMultipartUpload vhost", method: "DELETE", vhost: vh, path: "/a", query: up, want: "stale"},

		// Bucket writes: fenced on the bucket, hierarchically with its
		// objects (fenced at 100).
		{name: "DeleteBucket", method: "DELETE", path: "/fenced", want: "stale"},
		{name: "DeleteBucket trailing slash", method: "DELETE", path: "/fenced/", want: "stale"},
		{name: "DeleteBucket vhost", method: "DELETE", vhost: vh, path: "/", want: "stale"},
		{name: "CreateBucket existing", method: "PUT", path: "/fenced", want: "stale"},
		{name: "PutBucketTagging", method: "PUT", path: "/fenced", query: "tagging", body: xmlTags, want: "stale"},
		{name: "DeleteBucketTagging", method: "DELETE", path: "/fenced", query: "tagging", want: "stale"},
		{name: "PutBucketVersioning", method: "PUT", path: "/fenced", query: "versioning", body: `<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>`, want: "stale"},
		{name: "PutBucketPolicy", method: "PUT", path: "/fenced", query: "policy", body: `{"Version":"2012-10-17","Statement":[]}`, want: "stale"},
		{name: "DeleteBucketPolicy", method: "DELETE", path: "/fenced", query: "policy", want: "stale"},
		{name: "PutBucketCors", method: "PUT", path: "/fenced", query: "cors",
			body: `<CORSConfiguration><CORSRule><AllowedMethod>GET</AllowedMethod><AllowedOrigin>*</AllowedOrigin></CORSRule></CORSConfiguration>`, want: "stale"},
		{name: "PutBucketLifecycle", method: "PUT", path: "/fenced", query: "lifecycle",
			body: `<LifecycleConfiguration><Rule><ID>x</ID><Status>Enabled</Status><Filter/><Expiration><Days>1</Days></Expiration></Rule></LifecycleConfiguration>`, want: "stale"},
		{name: "PutBucketAcl", method: "PUT", path: "/fenced", query: "acl", header: map[string]string{"X-Amz-Acl": "public-read"}, want: "stale"},
		{name: "PutBucketOwnershipControls", method: "PUT", path: "/fenced", query: "ownershipControls",
			body: `<OwnershipControls><Rule><ObjectOwnership>BucketOwnerPreferred</ObjectOwnership></Rule></OwnershipControls>`, want: "stale"},
		{name: "PutObjectLockConfiguration", method: "PUT", path: "/locked", query: "object-lock",
			body: `<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention><Mode>GOVERNANCE</Mode><Days>1</Days></DefaultRetention></Rule></ObjectLockConfiguration>`, want: "stale"},
		{name: "PutBucketTagging vhost", method: "PUT", vhost: vh, path: "/", query: "tagging", body: xmlTags, want: "stale"},
		{name: "PutBucketVersioning ?Versioning (case)", method: "PUT", path: "/fenced", query: "Versioning", want: "InvalidArgument"},
		{name: "PutBucketPolicy and tagging", method: "PUT", path: "/fenced", query: "policy&tagging", want: "NotImplemented"},
		{name: "bucket ?frobnicate (unknown)", method: "PUT", path: "/fenced", query: "frobnicate", want: "NotImplemented"},
		{name: "POST object form", method: "POST", path: "/fenced", body: "key=a", want: "NotImplemented"},
	}
}

// oracleRefusal is the part of an S3 error document the oracle reads.
type oracleRefusal struct {
	Code          string `xml:"Code"`
	FencegateCode string `xml:"FencegateCode"`
	Route         string `xml:"Route"`
}

// startS3Oracle is the oracle's store and gateway: VersityGW with the
// buckets "fenced" and "locked" (object lock), each object of
// oracleObjects written and tagged through the gateway with token 100, and
// a multipart upload of fenced/a open with one part. The gateway's route
// fences bucket configuration writes and takes virtual-hosted requests
// under s3.internal; start starts it (startLockedS3EnvWith). It returns
// the upload's id.
func startS3Oracle(t testing.TB, start func(t testing.TB, yaml string) string) (*s3Env, string) {
	t.Helper()
	e := startLockedS3EnvWith(t, "        bucket_config: fence\n        virtual_host_suffix: s3.internal\n", start)
	ctx := context.Background()
	owner := s3Worker(e.GW, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(100))
	// The buckets are created and tagged directly: their own fences stay
	// unset, so each shape meets only the fences of the objects it names
	// (and, for a bucket write, of the objects below it).
	if _, err := e.direct().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("fenced")}); err != nil {
		t.Fatal(err)
	}
	for _, o := range oracleObjects {
		if _, err := owner.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(o.bucket), Key: aws.String(o.key),
			Body: strings.NewReader(o.body)}); err != nil {
			t.Fatalf("seed %s/%s: %v", o.bucket, o.key, err)
		}
		if _, err := owner.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String(o.bucket), Key: aws.String(o.key),
			Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("by"), Value: aws.String("owner")}}}}); err != nil {
			t.Fatalf("seed tags of %s/%s: %v", o.bucket, o.key, err)
		}
	}
	if _, err := e.direct().PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String("fenced"),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("by"), Value: aws.String("owner")}}}}); err != nil {
		t.Fatal(err)
	}
	mpu, err := owner.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("fenced"), Key: aws.String("a")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("fenced"), Key: aws.String("a"), UploadId: mpu.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("part one")}); err != nil {
		t.Fatal(err)
	}
	return e, aws.ToString(mpu.UploadId)
}

// The write-set oracle, black-box form (issue 41): VersityGW's whole
// durable state (its posix directory: every bucket, object, folder,
// multipart upload and part, with content and every extended attribute,
// which hold metadata, tags, ACLs, policies, retention and legal hold) is
// read before and after each of oracleShapes, sent with token 5 to objects
// and buckets whose fences are at 100. Each must be refused by the gateway
// (an S3 XML error of its own, with the code the shape expects) and leave
// the state exactly as it was. A control write with token 100 must change
// the state (the snapshot sees writes).
func TestS3Oracle(t *testing.T) {
	e, uploadID := startS3Oracle(t, func(t testing.TB, yaml string) string {
		return startFencegate(t, yaml).URL("gateway")
	})
	ctx := context.Background()
	shapes := oracleShapes()
	if len(shapes) < 40 {
		t.Fatalf("%d shapes; the oracle needs at least 40", len(shapes))
	}
	gw := strings.TrimPrefix(e.GW, "http://")
	before := versityState(t, e.S3.Dir)
	for _, s := range shapes {
		s.query = strings.ReplaceAll(s.query, oracleUploadID, uploadID)
		status, body, err := sendShape(gw, s, 5)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		var ref oracleRefusal
		xml.Unmarshal(body, &ref)
		t.Logf("%-40s %d %s", s.name, status, ref.Code)
		gatewayOwn := ref.Code == "stale_fencing_token" || ref.FencegateCode != "" || ref.Route != ""
		switch {
		case !gatewayOwn:
			t.Errorf("%s: forwarded with a stale token (answer %d %s)", s.name, status, bytes.TrimSpace(body))
		case s.want == "stale" && ref.Code != "stale_fencing_token",
			s.want != "" && s.want != "stale" && ref.Code != s.want:
			t.Errorf("%s: refused %d %s; want %s", s.name, status, ref.Code, s.want)
		}
		if after := versityState(t, e.S3.Dir); !slices.Equal(before, after) {
			t.Errorf("%s changed the store:\n%s", s.name, stateDiff(before, after))
			before = after
		}
	}

	// The control: the owner's own write shows in the state.
	owner := s3Worker(e.GW, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(100))
	if _, err := owner.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("fenced"), Key: aws.String("K/"),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("by"), Value: aws.String("control")}}}}); err != nil {
		t.Fatal(err)
	}
	if after := versityState(t, e.S3.Dir); slices.Equal(before, after) {
		t.Fatal("the owner's PutObjectTagging left the state unchanged: the snapshot does not see writes")
	}
}

// sendShape signs s with the worker's key (aws-sdk-go-v2's signer, every
// header signed) and sends it to the gateway at addr with token.
func sendShape(addr string, s s3Shape, token int64) (int, []byte, error) {
	req, err := shapeRequest(addr, s, token, s3WorkerKey, s3WorkerSecret)
	if err != nil {
		return 0, nil, err
	}
	resp, err := oracleClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// shapeRequest is s as a request to addr with token, signed with the key
// access (aws-sdk-go-v2's signer, every header signed).
func shapeRequest(addr string, s s3Shape, token int64, access, secret string) (*http.Request, error) {
	u := "http://" + addr + s.path
	if s.query != "" {
		u += "?" + s.query
	}
	req, err := http.NewRequest(s.method, u, strings.NewReader(s.body))
	if err != nil {
		return nil, err
	}
	if s.vhost != "" {
		_, port, _ := strings.Cut(addr, ":")
		req.Host = s.vhost + ":" + port
	}
	for k, v := range s.header {
		req.Header[http.CanonicalHeaderKey(k)] = []string{v}
	}
	if s.body != "" {
		// Some writes need it (retention, legal hold, DeleteObjects):
		// without it the store would refuse a forwarded shape itself.
		m := md5.Sum([]byte(s.body))
		req.Header.Set("Content-Md5", base64.StdEncoding.EncodeToString(m[:]))
	}
	req.Header.Set("Fencing-Token", fmt.Sprint(token))
	sum := sha256.Sum256([]byte(s.body))
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := signer.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: access, SecretAccessKey: secret},
		req, hash, "s3", "us-east-1", time.Now()); err != nil {
		return nil, err
	}
	return req, nil
}

// oracleClient bounds a request: a shape the gateway neither answers nor
// refuses in time is an error.
var oracleClient = &http.Client{Timeout: 20 * time.Second}

// versityState is VersityGW's durable state: one line per file and
// directory under its posix root (relative path, a tab, kind,
// modification time, SHA-256 of the content) and one per extended
// attribute (path, a tab, name and value, hashed when long), sorted.
func versityState(t testing.TB, root string) []string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s\t%s mtime=%d", rel, info.Mode().Type(), info.ModTime().UnixNano())
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " sha256=" + hex.EncodeToString(sum[:8])
		}
		lines = append(lines, line)
		for _, x := range xattrs(t, p) {
			lines = append(lines, rel+"\txattr "+x)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the store's state: %v", err)
	}
	slices.Sort(lines)
	return lines
}

// xattrs lists a file's extended attributes as "name=value" (values
// hashed when long).
func xattrs(t testing.TB, p string) []string {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := syscall.Listxattr(p, buf)
	if err != nil {
		t.Fatalf("listxattr %s: %v", p, err)
	}
	var out []string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 64<<10)
		m, err := syscall.Getxattr(p, name, v)
		if err != nil {
			t.Fatalf("getxattr %s %s: %v", p, name, err)
		}
		val := string(v[:m])
		if len(val) > 80 {
			sum := sha256.Sum256(v[:m])
			val = "sha256:" + hex.EncodeToString(sum[:8])
		}
		out = append(out, fmt.Sprintf("%s=%q", name, val))
	}
	return out
}

// stateDiff lists the lines only before has (-) and only after has (+).
func stateDiff(before, after []string) string {
	var b strings.Builder
	for _, l := range before {
		if !slices.Contains(after, l) {
			b.WriteString("  - " + l + "\n")
		}
	}
	for _, l := range after {
		if !slices.Contains(before, l) {
			b.WriteString("  + " + l + "\n")
		}
	}
	return b.String()
}
