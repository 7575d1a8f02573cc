package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

// azSnapshot is what Azurite holds of one blob: content, stamp, ETag and
// the whole metadata.
type azSnapshot struct {
	body, stamp string
	etag        azcore.ETag
	meta        map[string]string
}

func (e *azEnv) snapshot(t *testing.T, name string) azSnapshot {
	t.Helper()
	body, stamp := e.stored(t, name)
	etag, m := e.props(t, name)
	s := azSnapshot{body: body, stamp: stamp, etag: etag, meta: map[string]string{}}
	for k, v := range m {
		if v != nil {
			s.meta[strings.ToLower(k)] = *v
		}
	}
	return s
}

func (s azSnapshot) equal(o azSnapshot) bool {
	if s.body != o.body || s.stamp != o.stamp || s.etag != o.etag || len(s.meta) != len(o.meta) {
		return false
	}
	for k, v := range s.meta {
		if o.meta[k] != v {
			return false
		}
	}
	return true
}

// Azure stamps feed `fence rebuild` as S3's and GCS's do: after the store
// is lost, the fences are raised from the token stamps in the blobs'
// metadata (listed with the gateway's own Shared Key), and the zombie's
// writes are refused again, the blobs in Azurite unchanged (content,
// metadata, ETag).
func TestAzureStampRebuildAfterStoreLoss(t *testing.T) {
	e := startAzEnv(t, "")
	zombie, owner := e.worker(t, tokenOf(41)), e.worker(t, tokenOf(42))
	ctx := context.Background()
	if err := azPut(zombie, "report", "A"); err != nil {
		t.Fatal(err)
	}
	// The owner's write tries to forge a higher stamp; the gateway's wins.
	forged := "999999"
	if _, err := owner.UploadBuffer(ctx, azContainer, "report", []byte("B"),
		&azblob.UploadBufferOptions{Metadata: map[string]*string{"fencing_token": &forged}}); err != nil {
		t.Fatal(err)
	}
	if err := azPutBlocks(owner, "dir/7", "BBBBBBBB", 4); err != nil {
		t.Fatal(err)
	}
	if got, stamp := e.stored(t, "report"); got != "B" || stamp != "42" {
		t.Fatalf("report = %q stamp %q; want B stamped 42", got, stamp)
	}
	// A blob written around the gateway has no stamp and is skipped.
	if err := azPut(e.direct(t), "unstamped", "x"); err != nil {
		t.Fatal(err)
	}
	before := map[string]azSnapshot{"report": e.snapshot(t, "report"), "dir/7": e.snapshot(t, "dir/7")}
	p := e.Proc
	loseStore(t, p)
	out, err := fencegateCmd(t, p, "fence", "rebuild", "-c", p.CfgPath, "--container", azContainer)
	if err != nil {
		t.Fatalf("rebuild: %v\n%s", err, out)
	}
	if !strings.Contains(out, "scanned 2 stamped object(s) (1 without a stamp), raised or created 2 fence(s)") {
		t.Fatalf("rebuild said:\n%s", out)
	}
	p.Restart()

	wantAzStale(t, "zombie on report", azPut(zombie, "report", "A2"))
	wantAzStale(t, "zombie's blocks on dir/7", azPutBlocks(zombie, "dir/7", "AAAAAAAA", 4))
	_, err = zombie.DeleteBlob(ctx, azContainer, "dir/7", nil)
	wantAzStale(t, "zombie's delete of dir/7", err)
	for name, b := range before {
		if now := e.snapshot(t, name); !now.equal(b) {
			t.Fatalf("%s after the zombie's writes: %+v; want unchanged %+v", name, now, b)
		}
	}
	if err := azPut(owner, "report", "B2"); err != nil {
		t.Fatalf("owner after rebuild: %v", err)
	}
	if got, stamp := e.stored(t, "report"); got != "B2" || stamp != "42" {
		t.Fatalf("report = %q stamp %q; want B2 stamped 42", got, stamp)
	}
}

// A forged stamp (a blob written around the gateway) above the ceiling
// stops an Azure rebuild as it does an S3 one; --prefix skips it.
func TestAzureRebuildCeiling(t *testing.T) {
	e := startAzEnv(t, "")
	zombie, owner := e.worker(t, tokenOf(41)), e.worker(t, tokenOf(42))
	ctx := context.Background()
	if err := azPut(owner, "report", "B"); err != nil {
		t.Fatal(err)
	}
	huge := "9223372036854775807"
	if _, err := e.direct(t).UploadBuffer(ctx, azContainer, "forged", []byte("x"),
		&azblob.UploadBufferOptions{Metadata: map[string]*string{"Fencing_Token": &huge}}); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot(t, "report")
	p := e.Proc
	loseStore(t, p)
	out, err := fencegateCmd(t, p, "fence", "rebuild", "-c", p.CfgPath, "--container", azContainer)
	if err == nil || !strings.Contains(out, "object "+azContainer+"/forged") || !strings.Contains(out, "--max-advance -1") {
		t.Fatalf("rebuild over a forged stamp: err %v\n%s", err, out)
	}
	out, err = fencegateCmd(t, p, "fence", "rebuild", "-c", p.CfgPath, "--bucket", azContainer, "--prefix", "rep")
	if err != nil || !strings.Contains(out, "scanned 1 stamped object(s) (0 without a stamp), raised or created 1 fence(s)") {
		t.Fatalf("rebuild --prefix rep: err %v\n%s", err, out)
	}
	p.Restart()
	wantAzStale(t, "zombie on report", azPut(zombie, "report", "A"))
	if now := e.snapshot(t, "report"); !now.equal(before) {
		t.Fatalf("report after the zombie's write: %+v; want unchanged %+v", now, before)
	}
}
