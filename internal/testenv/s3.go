package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
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
	Pid       int    // the server's process (its CPU: ProcCPU)
}

// Versity starts versitygw (posix backend, root credentials, 127.0.0.1 only)
// and stops it at the end of the test. flags are extra versitygw options
// (e.g. "--keep-alive"), given before the backend.
func Versity(t testing.TB, flags ...string) *S3Server {
	t.Helper()
	bin := tool(t, "versitygw", "versitygw")
	s := &S3Server{
		AccessKey: "fencegate-test",
		SecretKey: "fencegate-test-secret-key",
		Region:    "us-east-1",
		Dir:       t.TempDir(),
	}
	env := []string{"ROOT_ACCESS_KEY=" + s.AccessKey, "ROOT_SECRET_KEY=" + s.SecretKey}
	proc, ports := startServer(t, "versitygw", 1, env, bin,
		func(p []int) []string {
			args := []string{"--port", fmt.Sprintf("127.0.0.1:%d", p[0]), "--region", s.Region, "--quiet"}
			return append(append(args, flags...), "posix", s.Dir)
		},
		func(ctx context.Context, p *process, ports []int) error {
			return waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/", ports[0]), 30*time.Second, p.done)
		})
	s.Endpoint, s.Pid = fmt.Sprintf("http://127.0.0.1:%d", ports[0]), proc.cmd.Process.Pid
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
	SignV4(req, body, s.AccessKey, s.SecretKey, s.Region, time.Now())
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
