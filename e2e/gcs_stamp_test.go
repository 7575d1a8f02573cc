package e2e

import (
	"context"
	"strings"
	"testing"

	"cloud.google.com/go/storage"
)

// GCS stamps feed `fence rebuild` as S3's do: after the store is lost,
// the fences are raised from the token stamps in the objects' custom
// metadata, and the zombie's write is refused again, the object left in
// fake-gcs-server unchanged (content, stamp, generation).
func TestGCSStampRebuildAfterStoreLoss(t *testing.T) {
	e := startGCSEnv(t, "")
	zombie, owner := e.worker(t, tokenOf(41)), e.worker(t, tokenOf(42))
	ctx := context.Background()
	if err := gcsPut(zombie, "report", "A", 0); err != nil {
		t.Fatal(err)
	}
	// The owner's write tries to forge a higher stamp; the gateway's wins.
	w := owner.Bucket(gcsBucket).Object("report").NewWriter(ctx)
	w.Metadata = map[string]string{"fencing-token": "999999"}
	w.Write([]byte("B"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gcsPut(owner, "dir/7", "B", 0); err != nil {
		t.Fatal(err)
	}
	if got, stamp := e.stored(t, "report"); got != "B" || stamp != "42" {
		t.Fatalf("report = %q stamp %q; want B stamped 42", got, stamp)
	}
	// An object written around the gateway has no stamp and is skipped.
	if err := gcsPut(e.direct(t), "unstamped", "x", 0); err != nil {
		t.Fatal(err)
	}
	attrs := func(object string) *storage.ObjectAttrs {
		t.Helper()
		a, err := e.direct(t).Bucket(gcsBucket).Object(object).Attrs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	before := map[string]int64{"report": attrs("report").Generation, "dir/7": attrs("dir/7").Generation}
	p := e.Proc
	loseStore(t, p)
	out, err := fencegateCmd(t, p, "fence", "rebuild", "-c", p.CfgPath, "--bucket", gcsBucket)
	if err != nil {
		t.Fatalf("rebuild: %v\n%s", err, out)
	}
	if !strings.Contains(out, "scanned 2 stamped object(s) (1 without a stamp), raised or created 2 fence(s)") {
		t.Fatalf("rebuild said:\n%s", out)
	}
	p.Restart()

	wantStale(t, "zombie on report", gcsPut(zombie, "report", "A2", 0))
	wantStale(t, "zombie on dir/7", gcsPut(zombie, "dir/7", "A2", 0))
	for object, gen := range before {
		if got, stamp := e.stored(t, object); got != "B" || stamp != "42" {
			t.Fatalf("%s = %q stamp %q after the zombie's write; want B stamped 42", object, got, stamp)
		}
		if g := attrs(object).Generation; g != gen {
			t.Fatalf("%s: generation %d; want %d (unchanged)", object, g, gen)
		}
	}
	if err := gcsPut(owner, "report", "B2", 0); err != nil {
		t.Fatalf("owner after rebuild: %v", err)
	}
	if got, stamp := e.stored(t, "report"); got != "B2" || stamp != "42" {
		t.Fatalf("report = %q stamp %q; want B2 stamped 42", got, stamp)
	}
}

// A forged stamp (an object written around the gateway) above the ceiling
// stops a GCS rebuild as it does an S3 one; --prefix skips it.
func TestGCSRebuildCeiling(t *testing.T) {
	e := startGCSEnv(t, "")
	zombie, owner := e.worker(t, tokenOf(41)), e.worker(t, tokenOf(42))
	ctx := context.Background()
	if err := gcsPut(owner, "report", "B", 0); err != nil {
		t.Fatal(err)
	}
	w := e.direct(t).Bucket(gcsBucket).Object("forged").NewWriter(ctx)
	w.Metadata = map[string]string{"fencing-token": "9223372036854775807"}
	w.Write([]byte("x"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := e.Proc
	loseStore(t, p)
	out, err := fencegateCmd(t, p, "fence", "rebuild", "-c", p.CfgPath, "--bucket", gcsBucket)
	if err == nil || !strings.Contains(out, "object "+gcsBucket+"/forged") || !strings.Contains(out, "--max-advance -1") {
		t.Fatalf("rebuild over a forged stamp: err %v\n%s", err, out)
	}
	out, err = fencegateCmd(t, p, "fence", "rebuild", "-c", p.CfgPath, "--bucket", gcsBucket, "--prefix", "rep")
	if err != nil || !strings.Contains(out, "scanned 1 stamped object(s) (0 without a stamp), raised or created 1 fence(s)") {
		t.Fatalf("rebuild --prefix rep: err %v\n%s", err, out)
	}
	p.Restart()
	wantStale(t, "zombie on report", gcsPut(zombie, "report", "A", 0))
	if got, stamp := e.stored(t, "report"); got != "B" || stamp != "42" {
		t.Fatalf("report = %q stamp %q; want B stamped 42", got, stamp)
	}
}
