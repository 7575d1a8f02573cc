package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/storage"
)

// A copyTo or rewriteTo on a stamping GCS route carries the copy's token,
// not the source's, and keeps the source's metadata: the gateway reads the
// source and sends its metadata with the copy's stamp. Before, a copyTo
// without a body gave the destination (fenced at 9) the source's stamp 5,
// from which `fence rebuild` rebuilt its fence at 5; a rewrite by the
// official client replaced the source's metadata with the stamp alone; a
// worker's ifSourceGenerationMatch was left to fake-gcs-server, which
// ignores it; a moveTo left the source's stamp on the destination.
func TestGCSCopyStampsCopyToken(t *testing.T) {
	e := startGCSEnv(t, "")
	ctx := context.Background()
	var tok atomic.Int64
	worker := e.worker(t, &tok)
	direct := e.direct(t).Bucket(gcsBucket)
	put := func(token int64, object, body string) {
		t.Helper()
		tok.Store(token)
		w := worker.Bucket(gcsBucket).Object(object).NewWriter(ctx)
		w.ContentType, w.ContentLanguage = "text/csv", "de"
		w.Metadata = map[string]string{"owner": "src-owner", "fencing-token": "999"}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("write %s with token %d: %v", object, token, err)
		}
	}
	attrs := func(object string) *storage.ObjectAttrs {
		t.Helper()
		a, err := direct.Object(object).Attrs(ctx)
		if err != nil {
			t.Fatalf("direct attrs of %s: %v", object, err)
		}
		return a
	}
	put(5, "src", "source body")
	put(9, "dst", "old dst")
	put(9, "dst2", "old dst2")
	src := attrs("src")
	if src.Metadata["fencing-token"] != "5" {
		t.Fatalf("source metadata %v; want stamp 5", src.Metadata)
	}
	wantCopied := func(object string, token int64) {
		t.Helper()
		a := attrs(object)
		if body, stamp := e.stored(t, object); body != "source body" || stamp != fmt.Sprint(token) ||
			a.Metadata["owner"] != "src-owner" || len(a.Metadata) != 2 || a.ContentType != "text/csv" {
			t.Fatalf("%s holds %q, metadata %v, Content-Type %q; want the source's, stamped %d", object, body, a.Metadata, a.ContentType, token)
		}
	}
	copyURL := func(verb, object, query string) string {
		return e.GW + "/storage/v1/b/" + gcsBucket + "/o/src/" + verb + "/b/" + gcsBucket + "/o/" + object + query
	}

	// A worker's condition on another generation of the source is
	// answered 412, the destination unchanged.
	resp, body := gcsRaw(t, http.MethodPost, copyURL("copyTo", "dst", fmt.Sprintf("?ifSourceGenerationMatch=%d", src.Generation+1)), 9, nil, nil)
	if resp.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("copy on a source condition that fails: %s %s; want 412", resp.Status, body)
	}
	if b, stamp := e.stored(t, "dst"); b != "old dst" || stamp != "9" {
		t.Fatalf("the failed copy changed the destination: %q stamped %s", b, stamp)
	}

	// copyTo without a body, with the worker's holding condition.
	resp, body = gcsRaw(t, http.MethodPost, copyURL("copyTo", "dst", fmt.Sprintf("?ifSourceGenerationMatch=%d", src.Generation)), 9, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("copyTo with token 9: %s %s", resp.Status, body)
	}
	wantCopied("dst", 9)

	// The official client's rewrite (a body naming no metadata).
	tok.Store(9)
	if _, err := worker.Bucket(gcsBucket).Object("dst2").CopierFrom(worker.Bucket(gcsBucket).Object("src")).Run(ctx); err != nil {
		t.Fatalf("rewrite with token 9: %v", err)
	}
	wantCopied("dst2", 9)

	// moveTo cannot carry the stamp: refused, nothing moved.
	resp, body = gcsRaw(t, http.MethodPost, e.GW+"/storage/v1/b/"+gcsBucket+"/o/src/moveTo/o/moved", 9, nil, nil)
	if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(body, "stamp") {
		t.Fatalf("moveTo on a stamping route: %s %s; want 501", resp.Status, body)
	}
	if _, err := direct.Object("moved").Attrs(ctx); !errors.Is(err, storage.ErrObjectNotExist) {
		t.Fatalf("moveTo wrote the destination: %v", err)
	}

	// The stamps rebuild the destination's fence at 9: token 8 is refused.
	dst := attrs("dst")
	p := e.Proc
	rebuildFrom(t, p, "--bucket", gcsBucket, 3, `{"resource":"fenced/dst","highest":9`)
	p.Restart()
	resp, body = gcsRaw(t, http.MethodPost, copyURL("copyTo", "dst", ""), 8, nil, nil)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "stale_fencing_token") {
		t.Fatalf("token 8 on the copied destination: %s %s; want 409 stale", resp.Status, body)
	}
	if a := attrs("dst"); a.Generation != dst.Generation || a.Metadata["fencing-token"] != "9" {
		t.Fatalf("destination changed by token 8: generation %d, metadata %v", a.Generation, a.Metadata)
	}
}

// rebuildFrom loses p's store and rebuilds its fences from the stamps in
// bucket (flag: --bucket or --container): stamped objects scanned, and the
// exported fences must hold want.
func rebuildFrom(t *testing.T, p *Proc, flag, bucket string, stamped int, want string) {
	t.Helper()
	loseStore(t, p)
	if out, err := fencegateCmd(t, p, "fence", "rebuild", "-c", p.CfgPath, flag, bucket); err != nil ||
		!strings.Contains(out, fmt.Sprintf("scanned %d stamped object(s)", stamped)) {
		t.Fatalf("rebuild: %v\n%s", err, out)
	}
	export := filepath.Join(p.Dir, "fences.jsonl")
	if out, err := fencegateCmd(t, p, "fence", "export", "-c", p.CfgPath, "-o", export); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	if lines, _ := os.ReadFile(export); !strings.Contains(string(lines), want) {
		t.Fatalf("rebuilt fences:\n%s\nwant %s", lines, want)
	}
}
