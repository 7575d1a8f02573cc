package e2e

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// examples/node/azure_blob_worker.js, with the @azure/storage-blob that
// scripts/tools.sh installs, takes its lease from the coordinator and
// writes through the gateway (the JavaScript SDK sends the blob name's
// "/" as is, azblob as %2F: one blob, one fence); run again with its old
// token after a newer owner wrote, it is refused stale, stops with exit 3,
// and the blob in Azurite keeps the newer owner's content.
func TestExampleNodeAzureWorker(t *testing.T) {
	modules := testenv.NodeModules(t)
	srv := testenv.Azurite(t)
	srv.CreateContainer(t, azContainer)
	p := startFencegate(t, s3GatewayYAML(azRouteYAML("blobs", "", srv.Endpoint, "etag", "30s"))+
		"coordinator: {enabled: true, listen: $COORDINATOR}\n")
	e := &azEnv{Az: srv, Proc: p, GW: p.URL("gateway")}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	run := func(token, value string) (int, string) {
		cmd := exec.Command("node", filepath.Join(root, "examples", "node", "azure_blob_worker.js"), azContainer, "node/dir/job", value)
		cmd.Env = append(cmd.Environ(), "NODE_PATH="+modules,
			"FENCEGATE_COORDINATOR="+p.URL("coordinator"), "FENCEGATE_URL="+e.GW, "FENCING_TOKEN="+token,
			"AZURE_STORAGE_ACCOUNT="+azWorkerAccount, "AZURE_STORAGE_KEY="+azWorkerKey)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := run("", "from-node"); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	got, first := e.stored(t, "node/dir/job")
	if got != "from-node" || first == "" {
		t.Fatalf("Azurite holds %q stamp %q; want from-node stamped", got, first)
	}
	l := newerOwner(t, p, azContainer+"/node/dir/job")
	// The newer owner writes with azblob (%2F in the name).
	if err := azPut(azWorker(t, e.GW, func() int64 { return l.Token }), "node/dir/job", "newer"); err != nil {
		t.Fatal(err)
	}
	code, out := run(first, "zombie")
	if code != 3 || !strings.Contains(out, "stale_fencing_token") {
		t.Fatalf("stale upload (newer token %d): exit %d:\n%s\nwant 3 and stale_fencing_token", l.Token, code, out)
	}
	if got, _ := e.stored(t, "node/dir/job"); got != "newer" {
		t.Fatalf("Azurite holds %q after the stale upload; want newer", got)
	}
}
