package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// `precondition: etag` when the gateway dies after S3 applied a write but
// before the write's ETag was recorded (kill -9 while S3's answer is held
// back by a proxy). The object is marked unknown before each write is
// forwarded, so after the restart the next write learns the current ETag
// and lands; had the record kept the replaced version's ETag, every later
// write to the object would fail its precondition forever. A bypassing
// write made after that is still detected.
func TestS3PreconditionGatewayKilledAfterWrite(t *testing.T) {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	proxy := testenv.Toxiproxy(t).Proxy(t, "s3", strings.TrimPrefix(srv.Endpoint, "http://"))
	// "localhost" goes through the proxy, 127.0.0.1 straight to S3; both
	// routes share the fence and the ETag records.
	p := startFencegate(t, s3GatewayYAML(
		s3RouteYAML("held", "localhost", "http://"+proxy.Listen, srv, "etag", "30s"),
		s3RouteYAML("direct", "", srv.Endpoint, srv, "etag", "30s")))
	gw := p.URL("gateway")
	e := &s3Env{S3: srv, Proc: p, GW: gw}
	w := s3Worker(gw, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(1))

	if err := putObject(t, w, "out", "v1"); err != nil {
		t.Fatal(err)
	}
	// S3's answers through the proxy are held back (longer than the test
	// runs); the requests pass.
	proxy.AddToxic(t, testenv.Toxic{Name: "hold", Type: "latency", Stream: "downstream",
		Attributes: map[string]any{"latency": 60000}})
	held := s3Worker(strings.Replace(gw, "127.0.0.1", "localhost", 1), s3WorkerKey, s3WorkerSecret, awsfence.Fixed(1))
	done := make(chan error, 1)
	go func() { done <- putObject(t, held, "out", "v2") }()
	deadline := time.Now().Add(15 * time.Second)
	for e.objectBody(t, "out") != "v2" {
		if time.Now().After(deadline) {
			t.Fatal("the held write never reached S3")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Contains(p.Log(), `"route":"held"`) {
		t.Fatalf("the held write was answered before the kill:\n%s", p.Log())
	}
	p.Kill9()
	if err := <-done; err == nil {
		t.Fatal("the held write was answered although the gateway was killed")
	}
	p.Restart()

	if err := putObject(t, w, "out", "v3"); err != nil {
		t.Fatalf("write after the restart: %v (the object is wedged on a stale ETag record)", err)
	}
	if got := e.objectBody(t, "out"); got != "v3" {
		t.Fatalf("object = %q; want v3", got)
	}
	if err := putObject(t, e.direct(), "out", "bypass"); err != nil {
		t.Fatal(err)
	}
	for range 2 { // refused, and refused again: the refusal keeps the record
		wantRefusal(t, putObject(t, w, "out", "v4"), "precondition_failed", http.StatusPreconditionFailed)
	}
	if got := e.objectBody(t, "out"); got != "bypass" {
		t.Fatalf("object = %q; want the bypassing write left alone", got)
	}
}
