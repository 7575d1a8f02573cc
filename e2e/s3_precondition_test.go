package e2e

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// serve refuses to start on a store that answers 200 to everything (as
// stores that ignore conditional writes do) when the route has
// precondition: etag and s3.check_bucket: S3's start-up check of the
// doctor's probe (the doctor itself: TestObjectStoreContract/s3/Doctor).
func TestS3ServeRefusesStoreIgnoringConditions(t *testing.T) {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	ignoring := httptest.NewServer(osS3.ignoring)
	t.Cleanup(ignoring.Close)
	bin := testenv.BuildBinary(t, "./cmd/fencegate")
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
}
