package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Seed test 2 with `precondition: etag`: A's write is handed to S3 but
// delayed in the network (toxiproxy) past the gateway's timeout; B then
// writes with a newer token. When A's request finally reaches S3 it carries
// If-Match on the version B replaced, and S3 refuses it with 412. Without
// the precondition the same timing lets A overwrite B: the window docs/design.md
// calls irreducible, closed by the conditional write.
func TestS3PreconditionDelayedForward(t *testing.T) {
	for _, tc := range []struct {
		precondition string
		want         string
	}{
		{"etag", "B"},
		{"none", "A-late"}, // control: shows the test can fail
	} {
		t.Run(tc.precondition, func(t *testing.T) {
			if _, got := s3DelayedForward(t, s3BoltStore, tc.precondition); got != tc.want {
				t.Fatalf("object = %q; want %q", got, tc.want)
			}
		})
	}
}

// s3DelayedForward runs the delayed-forward race of seed test 2 with the
// given store section and returns the object's content read from S3 after
// A's delayed request has reached it.
func s3DelayedForward(t *testing.T, store, precondition string) (*s3Env, string) {
	t.Helper()
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	tp := testenv.Toxiproxy(t)
	proxy := tp.Proxy(t, "s3", strings.TrimPrefix(srv.Endpoint, "http://"))
	// Two routes to one bucket and one fence: requests to "localhost" go
	// through the delaying proxy, to 127.0.0.1 straight to S3.
	p := startFencegate(t, s3GatewayYAMLStore(store,
		s3RouteYAML("slow", "localhost", "http://"+proxy.Listen, srv, precondition, "1s"),
		s3RouteYAML("fast", "", srv.Endpoint, srv, precondition, "30s")))
	gw := p.URL("gateway")
	slowURL := strings.Replace(gw, "127.0.0.1", "localhost", 1)
	e := &s3Env{S3: srv, Proc: p, GW: gw}

	if err := putObject(t, s3Worker(gw, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(1)), "job", "A-first"); err != nil {
		t.Fatalf("A's first write: %v", err)
	}
	proxy.AddToxic(t, testenv.Toxic{Name: "delay", Type: "latency", Stream: "upstream",
		Attributes: map[string]any{"latency": 3000}})
	sent := time.Now()
	err := putObject(t, s3Worker(slowURL, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(1)), "job", "A-late")
	wantRefusal(t, err, "upstream_timeout", http.StatusGatewayTimeout)
	if err := putObject(t, s3Worker(gw, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(2)), "job", "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	// Wait until A's delayed request has been delivered to S3 and answered
	// there (the latency plus a margin), then read the durable state.
	time.Sleep(time.Until(sent.Add(5 * time.Second)))
	return e, e.objectBody(t, "job")
}

// A write that bypassed the gateway (here: the root key, directly) makes the
// gateway's next conditional write fail with 412 precondition_failed; the
// bypassing version is not overwritten blindly.
func TestS3PreconditionDetectsBypass(t *testing.T) {
	s3PreconditionBypass(t, startS3Env(t, "etag"))
}

func s3PreconditionBypass(t *testing.T, e *s3Env) {
	t.Helper()
	w := e.worker(tokenOf(1))
	if err := putObject(t, w, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := putObject(t, w, "k", "v2"); err != nil {
		t.Fatalf("second write with the recorded ETag: %v", err)
	}
	if err := putObject(t, e.direct(), "k", "bypass"); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, putObject(t, w, "k", "v3"), "precondition_failed", http.StatusPreconditionFailed)
	if got := e.objectBody(t, "k"); got != "bypass" {
		t.Fatalf("object = %q; want the bypassing write left alone", got)
	}
	// An object the gateway never wrote but that exists is not overwritten
	// either (If-None-Match: *).
	if err := putObject(t, e.direct(), "pre-existing", "x"); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, putObject(t, w, "pre-existing", "y"), "precondition_failed", http.StatusPreconditionFailed)
	// The refusal is logged right after it is answered.
	waitFor(t, func() bool { return strings.Contains(e.Proc.Log(), `"msg":"precondition_failed"`) })
}

// `fencegate doctor` passes on versitygw, which honours If-Match and
// If-None-Match, and fails on a store that answers 200 to everything (as
// stores that ignore conditional writes do); serve refuses to start on it
// when the route has precondition: etag and s3.check_bucket.
func TestS3Doctor(t *testing.T) {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	ignoring := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("ETag", `"d41d8cd98f00b204e9800998ecf8427e"`)
	}))
	t.Cleanup(ignoring.Close)
	bin := testenv.BuildBinary(t, "./cmd/fencegate")
	for _, tc := range []struct {
		name, endpoint string
		wantExit       int
	}{
		{"versitygw", srv.Endpoint, 0},
		{"ignores conditions", ignoring.URL, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
			y := strings.ReplaceAll(s3GatewayYAML(s3RouteYAML("objects", "", tc.endpoint, srv, "etag", "5s")), "$GATEWAY", "127.0.0.1:1")
			y = strings.ReplaceAll(y, "$DIR", t.TempDir())
			y = strings.ReplaceAll(y, "$ADMIN", "127.0.0.1:2")
			if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "doctor", "-c", cfg, "-bucket", s3Bucket).CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantExit {
				t.Fatalf("doctor exit %d; want %d:\n%s", code, tc.wantExit, out)
			}
		})
	}
	t.Run("serve refuses to start", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
		y := s3GatewayYAML(s3RouteYAML("objects", "", ignoring.URL, srv, "etag", "5s"))
		y = strings.Replace(y, "        clients:", "        check_bucket: "+s3Bucket+"\n        clients:", 1)
		y = strings.ReplaceAll(y, "$GATEWAY", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
		y = strings.ReplaceAll(y, "$ADMIN", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
		y = strings.ReplaceAll(y, "$DIR", t.TempDir())
		if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "serve", "-c", cfg)
		done := make(chan error, 1)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(out.String(), "ignores conditional writes") {
				t.Fatalf("serve: %v\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatal("serve started on an upstream that ignores conditional writes")
		}
	})
}
