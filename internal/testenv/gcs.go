package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// GCSServer is a fake-gcs-server (no authentication) serving the GCS JSON
// API.
type GCSServer struct {
	Endpoint string // http://127.0.0.1:PORT
	// Root is the directory of the filesystem backend ("" in memory), in
	// a directory of its own.
	Root string
	Pid  int // the server's process (its CPU: ProcCPU)
}

// FakeGCS starts fake-gcs-server on 127.0.0.1 with its memory backend and
// stops it at the end of the test.
func FakeGCS(t testing.TB) *GCSServer { return FakeGCSBackend(t, "memory") }

// FakeGCSBackend starts fake-gcs-server with the backend named: "memory",
// or "filesystem" (objects stored as files under a directory of the
// test's, named as their object names: a backend that cleans names as
// paths).
func FakeGCSBackend(t testing.TB, backend string) *GCSServer {
	t.Helper()
	bin := tool(t, "fake-gcs-server", "fake-gcs-server")
	root := ""
	if backend == "filesystem" {
		// A directory of its own inside the test's: a name the backend
		// cleans into "../x" lands beside it, not among other files.
		root = filepath.Join(t.TempDir(), "root")
	}
	proc, ports := startServer(t, "fake-gcs-server", 1, nil, bin,
		func(p []int) []string {
			addr := fmt.Sprintf("127.0.0.1:%d", p[0])
			args := []string{"-scheme", "http", "-host", "127.0.0.1", "-port", fmt.Sprint(p[0]),
				"-backend", backend, "-public-host", addr, "-external-url", "http://" + addr, "-log-level", "error"}
			if root != "" {
				args = append(args, "-filesystem-root", root)
			}
			return args
		},
		func(ctx context.Context, p *process, ports []int) error {
			return waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/_internal/healthcheck", ports[0]), 30*time.Second, p.done)
		})
	return &GCSServer{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), Root: root, Pid: proc.cmd.Process.Pid}
}

// CreateBucket creates a bucket through the JSON API.
func (s *GCSServer) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	resp, body := s.Do(t, http.MethodPost, "/storage/v1/b", `{"name":"`+bucket+`"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("testenv: create bucket %s: %s: %s", bucket, resp.Status, body)
	}
}

// Do sends a request straight to the server (path and query as they
// should appear on the wire) and returns the answer with its body read.
func (s *GCSServer) Do(t testing.TB, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.Endpoint+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
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
