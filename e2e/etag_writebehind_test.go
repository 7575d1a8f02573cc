package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// The embedded store keeps `precondition: etag` records in memory and
// writes them behind (adapters/bolt/etag.go, docs/design.md "ETag records
// written behind"). A kill -9 loses acknowledged records: the file must then
// say unknown (never an older ETag, which would wedge the object), and the
// next write re-learns with a HEAD and lands. The old owner's write that
// the dead gateway had forwarded, with If-Match on the ETag its in-memory
// record held, is held in the network (toxiproxy) until after that write:
// S3 refuses it, so the object keeps the new owner's version. With
// `precondition: none` the same timing lets the late write overwrite it
// (the control). Then a write whose object changed behind the restarted
// gateway is refused by the If-Match the gateway adds from its record, and
// that record of a refused write, made durable at once, keeps refusing
// after another kill -9.
func TestS3PreconditionETagsWrittenBehindKill9(t *testing.T) {
	for _, tc := range []struct {
		precondition string
		want         string
	}{
		{"etag", "v3"},
		{"none", "late"}, // control: shows the test can fail
	} {
		t.Run(tc.precondition, func(t *testing.T) {
			const latency = 8 * time.Second
			srv := testenv.Versity(t)
			srv.CreateBucket(t, s3Bucket)
			proxy := testenv.Toxiproxy(t).Proxy(t, "s3", strings.TrimPrefix(srv.Endpoint, "http://"))
			// Two routes to one bucket and one fence: requests to
			// "localhost" go through the delaying proxy, to 127.0.0.1
			// straight to S3. Short timeouts keep the wait after the
			// kill -9 (the longest forward bound) well under the delay.
			p := startFencegate(t, s3GatewayYAML(
				s3RouteYAML("slow", "localhost", "http://"+proxy.Listen, srv, tc.precondition, "1s"),
				s3RouteYAML("fast", "", srv.Endpoint, srv, tc.precondition, "2s")))
			e := &s3Env{S3: srv, Proc: p, GW: p.URL("gateway")}
			old := e.worker(tokenOf(1))
			for _, v := range []string{"v1", "v2"} {
				if err := putObject(t, old, "out", v); err != nil {
					t.Fatal(err)
				}
			}
			proxy.AddToxic(t, testenv.Toxic{Name: "delay", Type: "latency", Stream: "upstream",
				Attributes: map[string]any{"latency": latency.Milliseconds()}})
			sent := time.Now()
			slow := s3Worker(strings.Replace(e.GW, "127.0.0.1", "localhost", 1), s3WorkerKey, s3WorkerSecret, awsfence.Fixed(1))
			// The gateway gives up on it after its timeout; the request
			// is on its way to S3 all the same.
			wantRefusal(t, putObject(t, slow, "out", "late"), "upstream_timeout", http.StatusGatewayTimeout)
			e.Proc.Kill9()

			if tc.precondition == "etag" {
				// The file as the dead gateway left it: unknown, not v1's
				// or v2's ETag.
				st, err := bolt.Open(filepath.Join(e.Proc.Dir, "fencegate.db"), bolt.Options{})
				if err != nil {
					t.Fatal(err)
				}
				rec, err := st.LoadFence(context.Background(), s3Bucket+"/out")
				st.Close()
				if err != nil || rec.ETag != fencegate.ETagUnknown {
					t.Fatalf("record after kill -9: %+v, %v; want ETag %q", rec, err, fencegate.ETagUnknown)
				}
			}

			e.Proc.Restart()
			cur := e.worker(tokenOf(2))
			if err := putObject(t, cur, "out", "v3"); err != nil {
				t.Fatalf("write after the kill: %v (wedged on a stale record?)", err)
			}
			if d := time.Since(sent); d >= latency {
				t.Fatalf("v3 landed %v after the late write was sent, not before it could arrive (%v): too slow to test", d, latency)
			}
			// Wait until the late request has reached S3 and been
			// answered there, then read the durable state. The control
			// waits for the late write to land (a loaded machine may
			// take longer than the 2s margin); the refusal leaves no trace
			// to wait for.
			time.Sleep(time.Until(sent.Add(latency + 2*time.Second)))
			for deadline := time.Now().Add(20 * time.Second); tc.want == "late" && e.objectBody(t, "out") != "late" && time.Now().Before(deadline); {
				time.Sleep(100 * time.Millisecond)
			}
			if got := e.objectBody(t, "out"); got != tc.want {
				t.Fatalf("object after the late write arrived = %q; want %q", got, tc.want)
			}
			if tc.precondition != "etag" {
				return
			}

			// The object changes behind the gateway: the If-Match from
			// its record (v3's ETag) makes S3 refuse the next write.
			if err := putObject(t, e.direct(), "out", "bypass"); err != nil {
				t.Fatal(err)
			}
			wantRefusal(t, putObject(t, cur, "out", "v4"), "precondition_failed", http.StatusPreconditionFailed)
			e.Proc.Kill9()
			e.Proc.Restart()
			wantRefusal(t, putObject(t, cur, "out", "v4"), "precondition_failed", http.StatusPreconditionFailed)
			if got := e.objectBody(t, "out"); got != "bypass" {
				t.Fatalf("object = %q; want the bypassing write left alone", got)
			}
		})
	}
}
