package e2e

// Fence state surviving the loss of its store (docs/recovery.md): export,
// lose the store, the refusal to start on the empty one, import, and the
// zombie refused again; the coordinator's tokens stay above every imported
// fence.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/coordinator/client"
)

func recoveryYAML(upstream string) string {
	return gatewayYAML(upstream) + "coordinator: {enabled: true, listen: $COORDINATOR}\nlog: {level: warn}\n"
}

// fencegateCmd runs a fencegate subcommand to its end.
func fencegateCmd(t *testing.T, p *Proc, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(p.bin, args...)
	cmd.Dir = p.Dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// serveRefused runs `fencegate serve` on p's config and returns its output
// once it exited; it fails the test if it keeps running.
func serveRefused(t *testing.T, p *Proc) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p.bin, "serve", "-c", p.CfgPath).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("serve did not refuse to start on the lost store:\n%s", out)
	}
	if err == nil {
		t.Fatalf("serve exited 0 on the lost store:\n%s", out)
	}
	return string(out)
}

func TestFenceExportImportAfterStoreLoss(t *testing.T) {
	rec, up := newUpstream(t)
	p := startFencegate(t, recoveryYAML(up))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw := p.URL("gateway")
	opts := client.Options{TTL: time.Minute}

	// A holds the lease and writes, then loses it (released here; a pause
	// past the TTL is the same to the fence); B takes over and writes.
	a, err := coordinatorClient(p, "A").AcquireOnce(ctx, "/orders/7", opts)
	if err != nil {
		t.Fatal(err)
	}
	ta := strconv.FormatInt(a.Token, 10)
	if st, body := write(t, "PUT", gw+"/orders/7", ta, "A1"); st != 200 {
		t.Fatalf("A's write: %d %s", st, body)
	}
	if _, err := coordinatorClient(p, "A").Release(ctx, "/orders/7", a.Token); err != nil {
		t.Fatal(err)
	}
	b, err := coordinatorClient(p, "B").AcquireOnce(ctx, "/orders/7", opts)
	if err != nil {
		t.Fatal(err)
	}
	tb := strconv.FormatInt(b.Token, 10)
	if st, body := write(t, "PUT", gw+"/orders/7", tb, "B1"); st != 200 {
		t.Fatalf("B's write: %d %s", st, body)
	}
	p.Stop()

	export := filepath.Join(p.Dir, "fences.jsonl")
	if out, err := fencegateCmd(t, p, "fence", "export", "-c", p.CfgPath, "-o", export); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	lines, _ := os.ReadFile(export)
	if want := fmt.Sprintf(`{"resource":"/orders/7","highest":%d,"owner":"B"}`, b.Token); !strings.Contains(string(lines), want) {
		t.Fatalf("export:\n%s\nwant a line %s", lines, want)
	}

	// The store is lost. The gateway refuses to start on the empty one
	// that would take its place.
	if err := os.Remove(filepath.Join(p.Dir, "fencegate.db")); err != nil {
		t.Fatal(err)
	}
	if out := serveRefused(t, p); !strings.Contains(out, "fence store lost") || !strings.Contains(out, "fence import") {
		t.Fatalf("serve on the lost store:\n%s\nwant the fence store lost refusal naming fence import", out)
	}

	// An import that would lower a fence is ignored (max-merge); then the
	// export.
	low := filepath.Join(p.Dir, "low.jsonl")
	os.WriteFile(low, []byte(`{"resource":"/orders/7","highest":1}`+"\n"), 0o600)
	for _, f := range []string{export, low} {
		if out, err := fencegateCmd(t, p, "fence", "import", "-c", p.CfgPath, f); err != nil {
			t.Fatalf("import %s: %v\n%s", f, err, out)
		}
	}
	p.Restart()

	// A, the zombie, is refused; B's token is still current.
	if st, body := write(t, "PUT", gw+"/orders/7", ta, "A2"); st != 409 || !strings.Contains(body, "stale_fencing_token") {
		t.Fatalf("zombie A after import: %d %s; want 409 stale_fencing_token", st, body)
	}
	if st, body := write(t, "PUT", gw+"/orders/7", tb, "B2"); st != 200 {
		t.Fatalf("B after import: %d %s", st, body)
	}
	// The coordinator's counter was lost with the store: the import raised
	// it, so the next owner's token is above B's and its write lands.
	c, err := coordinatorClient(p, "C").AcquireOnce(ctx, "/orders/7", opts)
	if err != nil {
		t.Fatal(err)
	}
	if c.Token <= b.Token {
		t.Fatalf("token after import = %d; want above the imported fence %d", c.Token, b.Token)
	}
	if st, body := write(t, "PUT", gw+"/orders/7", strconv.FormatInt(c.Token, 10), "C1"); st != 200 {
		t.Fatalf("C's write: %d %s", st, body)
	}
	if got, want := applied(rec, "/orders/7"), fmt.Sprintf("PUT A1@%d, PUT B1@%d, PUT B2@%d, PUT C1@%d", a.Token, b.Token, b.Token, c.Token); got != want {
		t.Fatalf("upstream applied %q; want %q", got, want)
	}
}

// Starting on an empty store is refused until the operator says the loss
// is accepted; the flag adopts the new store, so later starts need it no
// more.
func TestServeRefusesEmptyStoreUntilAccepted(t *testing.T) {
	_, up := newUpstream(t)
	p := startFencegate(t, gatewayYAML(up))
	if st, body := write(t, "PUT", p.URL("gateway")+"/orders/7", "5", "v"); st != 200 {
		t.Fatalf("write: %d %s", st, body)
	}
	p.Stop()
	if err := os.Remove(filepath.Join(p.Dir, "fencegate.db")); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the refusal does not adopt the empty store it created
		if out := serveRefused(t, p); !strings.Contains(out, "--accept-empty-store") {
			t.Fatalf("serve on an empty store:\n%s", out)
		}
	}
	p.serveArgs = []string{"--accept-empty-store"}
	p.Restart()
	if !strings.Contains(p.Log(), "accept-empty-store") {
		t.Fatalf("no warning about the accepted loss:\n%s", p.Log())
	}
	p.Stop()
	p.serveArgs = nil
	p.Restart()
}
