package e2e

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/googleapi"

	"github.com/fencegate/fencegate/internal/testenv"
)

// Seed test 2 on GCS with `precondition: generation`: A's upload is handed
// to the store but delayed in the network (toxiproxy) past the gateway's
// timeout; B then writes with a newer token. When A's request reaches the
// store it carries ifGenerationMatch on the generation B replaced, and the
// store refuses it. Without the precondition the same timing lets A
// overwrite B.
func TestGCSPreconditionDelayedForward(t *testing.T) {
	for _, tc := range []struct {
		precondition string
		want         string
	}{
		{"generation", "B"},
		{"none", "A-late"}, // control: shows the test can fail
	} {
		t.Run(tc.precondition, func(t *testing.T) {
			srv := testenv.FakeGCS(t)
			srv.CreateBucket(t, gcsBucket)
			tp := testenv.Toxiproxy(t)
			proxy := tp.Proxy(t, "gcs", strings.TrimPrefix(srv.Endpoint, "http://"))
			// Two routes to one bucket and one fence: requests to
			// "localhost" go through the delaying proxy.
			p := startFencegate(t, s3GatewayYAML(
				gcsRouteYAML("slow", "localhost", "http://"+proxy.Listen, tc.precondition, "1s"),
				gcsRouteYAML("fast", "", srv.Endpoint, tc.precondition, "30s")))
			gw := p.URL("gateway")
			e := &gcsEnv{GCS: srv, Proc: p, GW: gw}
			if err := gcsPut(gcsWorker(t, gw, tokenOf(1).Load), "job", "A-first", 0); err != nil {
				t.Fatalf("A's first write: %v", err)
			}
			proxy.AddToxic(t, testenv.Toxic{Name: "delay", Type: "latency", Stream: "upstream",
				Attributes: map[string]any{"latency": 3000}})
			sent := time.Now()
			err := gcsPut(gcsWorker(t, strings.Replace(gw, "127.0.0.1", "localhost", 1), tokenOf(1).Load), "job", "A-late", 0)
			var ge *googleapi.Error
			if !errors.As(err, &ge) || ge.Code != http.StatusGatewayTimeout {
				t.Fatalf("A's delayed write: %v; want 504 upstream_timeout", err)
			}
			if err := gcsPut(gcsWorker(t, gw, tokenOf(2).Load), "job", "B", 0); err != nil {
				t.Fatalf("B's write: %v", err)
			}
			time.Sleep(time.Until(sent.Add(5 * time.Second)))
			if got, _ := e.stored(t, "job"); got != tc.want {
				t.Fatalf("object = %q; want %q", got, tc.want)
			}
		})
	}
}

// A write that bypassed the gateway makes its next write under
// `precondition: generation` fail with precondition_failed: the bypassing
// version is not overwritten blindly.
func TestGCSPreconditionDetectsBypass(t *testing.T) {
	e := startGCSEnv(t, "generation")
	if err := gcsPut(e.worker(t, tokenOf(1)), "job", "mine", 0); err != nil {
		t.Fatal(err)
	}
	if err := gcsPut(e.direct(t), "job", "bypass", 0); err != nil {
		t.Fatal(err)
	}
	err := gcsPut(e.worker(t, tokenOf(1)), "job", "mine-again", 0)
	var ge *googleapi.Error
	if !errors.As(err, &ge) || ge.Code != http.StatusPreconditionFailed || len(ge.Errors) != 1 || ge.Errors[0].Reason != "precondition_failed" {
		t.Fatalf("write after a bypass: %v; want 412 precondition_failed", err)
	}
	if got, _ := e.stored(t, "job"); got != "bypass" {
		t.Fatalf("object = %q; want the bypassing version kept", got)
	}
	// A new object: ifGenerationMatch=0, created once.
	if err := gcsPut(e.worker(t, tokenOf(1)), "fresh", "new", 0); err != nil {
		t.Fatalf("create: %v", err)
	}
}

// fencegate doctor runs the ifGenerationMatch racing probe and the
// unread-body probe against the store of each GCS route: fake-gcs-server
// passes both; a store that ignores the condition fails the first, one
// that answers a write without reading its body the second.
func TestGCSDoctor(t *testing.T) {
	srv := testenv.FakeGCS(t)
	srv.CreateBucket(t, gcsBucket)
	ignoring := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodGet {
			w.Write([]byte(`{"generation":"7"}`))
			return
		}
		w.Write([]byte(`{"name":".fencegate-probe","generation":"7"}`))
	}))
	t.Cleanup(ignoring.Close)
	bin := testenv.BuildBinary(t, "./cmd/fencegate")
	for _, tc := range []struct {
		name, endpoint string
		wantExit       int
		wantOut        string
	}{
		{"fake-gcs-server", srv.Endpoint, 0, "honours ifGenerationMatch"},
		{"fake-gcs-server reads bodies", srv.Endpoint, 0, "reads a write's body (or closes the connection) before its next request"},
		{"ignores conditions", ignoring.URL, 1, "FAIL"},
		// GCS routes keep their connections across writes: a store that
		// takes an unread body for a request fails the route.
		{"answers unread", startEarlyUpstream(t), 1, "answers a write without reading its body and takes the body for a request of its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
			y := strings.ReplaceAll(s3GatewayYAML(gcsRouteYAML("objects", "", tc.endpoint, "generation", "5s")), "$GATEWAY", "127.0.0.1:1")
			y = strings.ReplaceAll(y, "$DIR", t.TempDir())
			y = strings.ReplaceAll(y, "$ADMIN", "127.0.0.1:2")
			if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "doctor", "-c", cfg, "-bucket", gcsBucket).CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantExit || !strings.Contains(string(out), tc.wantOut) {
				t.Fatalf("doctor exit %d; want %d with %q:\n%s", code, tc.wantExit, tc.wantOut, out)
			}
		})
	}
}
