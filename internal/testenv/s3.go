package testenv

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// S3Server is a versitygw S3 gateway over a posix directory.
type S3Server struct {
	Endpoint  string // http://127.0.0.1:PORT, path-style addressing
	AccessKey string
	SecretKey string
	Region    string // us-east-1
	Dir       string // bucket directories live here
}

// Versity starts versitygw (posix backend, root credentials, 127.0.0.1 only)
// and stops it at the end of the test.
func Versity(t testing.TB) *S3Server {
	t.Helper()
	bin := tool(t, "versitygw", "versitygw")
	s := &S3Server{
		AccessKey: "fencegate-test",
		SecretKey: "fencegate-test-secret-key",
		Region:    "us-east-1",
		Dir:       t.TempDir(),
	}
	env := []string{"ROOT_ACCESS_KEY=" + s.AccessKey, "ROOT_SECRET_KEY=" + s.SecretKey}
	_, ports := startServer(t, "versitygw", 1, env, bin,
		func(p []int) []string {
			return []string{"--port", fmt.Sprintf("127.0.0.1:%d", p[0]), "--region", s.Region, "--quiet", "posix", s.Dir}
		},
		func(ctx context.Context, p *process, ports []int) error {
			return waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/", ports[0]), 30*time.Second, p.done)
		})
	s.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	return s
}

// CreateBucket creates a bucket through the S3 API.
func (s *S3Server) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	resp, body := s.Do(t, http.MethodPut, "/"+bucket, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("testenv: create bucket %s: %s: %s", bucket, resp.Status, body)
	}
}

// Do sends a SigV4-signed request for path ("/bucket/key", already escaped as
// it should appear on the wire) with the root credentials and returns the
// response with its body read.
func (s *S3Server) Do(t testing.TB, method, path string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.Endpoint+path, strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	req.ContentLength = int64(len(body))
	signV4(req, body, s.AccessKey, s.SecretKey, s.Region, time.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("testenv: %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("testenv: %s %s: %v", method, path, err)
	}
	return resp, b
}

// signV4 signs req for service s3 (AWS Signature Version 4, header form).
// Only what test requests need: no query-string signing of exotic values.
func signV4(req *http.Request, body []byte, access, secret, region string, now time.Time) {
	now = now.UTC()
	amzDate := now.Format("20060102T150405Z")
	day := now.Format("20060102")
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Date", amzDate)
	req.Header.Set("X-Amz-Content-Sha256", payload)
	req.Header.Set("Host", req.URL.Host)

	names := []string{"host", "x-amz-content-sha256", "x-amz-date"}
	if req.ContentLength > 0 {
		req.Header.Set("Content-Length", strconv.FormatInt(req.ContentLength, 10))
	}
	sort.Strings(names)
	var canonHeaders strings.Builder
	for _, n := range names {
		v := req.Header.Get(n)
		if n == "host" {
			v = req.URL.Host
		}
		canonHeaders.WriteString(n + ":" + strings.TrimSpace(v) + "\n")
	}
	signed := strings.Join(names, ";")
	q := req.URL.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var cq []string
	for _, k := range keys {
		for _, v := range q[k] {
			cq = append(cq, awsEscape(k)+"="+awsEscape(v))
		}
	}
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	canon := strings.Join([]string{req.Method, path, strings.Join(cq, "&"), canonHeaders.String(), signed, payload}, "\n")
	scope := day + "/" + region + "/s3/aws4_request"
	ch := sha256.Sum256([]byte(canon))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(ch[:])
	k := hmacSHA256([]byte("AWS4"+secret), day)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, "s3")
	k = hmacSHA256(k, "aws4_request")
	sig := hex.EncodeToString(hmacSHA256(k, toSign))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+access+"/"+scope+", SignedHeaders="+signed+", Signature="+sig)
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// awsEscape is RFC 3986 percent-encoding of everything but unreserved characters.
func awsEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
