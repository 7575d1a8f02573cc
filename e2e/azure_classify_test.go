package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
)

// wantAzRefused sends s through the gateway with token and checks that it
// is refused in the Blob service's XML error format with code (and
// status, if not 0), and that Azurite's whole state is unchanged.
func (w *azWorld) wantAzRefused(t *testing.T, s azShape, token int64, status int, code string) {
	t.Helper()
	before := w.state(t)
	st, h, body := azSigned(t, w.gw, azWorkerAccount, azWorkerKey, s, token)
	if (status != 0 && st != status) || h.Get("X-Ms-Error-Code") != code ||
		!strings.Contains(body, "<Error><Code>"+code+"</Code>") || h.Get("Content-Type") != "application/xml" {
		t.Errorf("%s with token %d: %d %s %.300s; want %d %s in XML", s.name, token, st, h.Get("X-Ms-Error-Code"), body, status, code)
	}
	if d := azDiff(before, w.state(t)); len(d) > 0 {
		t.Errorf("%s with token %d changed the store:\n%s", s.name, token, strings.Join(d, "\n"))
	}
}

// The writes a worker could send around the fence of an Azure route
// (issue 41), each on Azurite's state: refused, the store unchanged
// (content, ETag, metadata with its fencing_token stamp, tags, block
// lists, containers); the legitimate forms still work and stamp.
func TestAzureClassificationFailsClosed(t *testing.T) {
	w := newAzWorld(t)
	ctx := context.Background()
	bb := [2]string{"X-Ms-Blob-Type", "BlockBlob"}
	id := url.QueryEscape(azBlockID)

	// Rename Container moves every blob of the source container: it was
	// admitted on the destination's fence only (an unfenced name), and
	// Azurite moved fenced/victim, fenced at 100, under token 5.
	t.Run("rename container", func(t *testing.T) {
		rename := azShape{name: "rename", method: "PUT", target: "/renamed?restype=container&comp=rename",
			hdr: [][2]string{{"X-Ms-Source-Container-Name", "fenced"}}}
		w.wantAzRefused(t, rename, 5, http.StatusNotImplemented, "invalid_request")
		// Refused for the current owner too: the gateway admits a write on
		// one container's fences (docs/azure.md).
		w.wantAzRefused(t, rename, azHigh+1, http.StatusNotImplemented, "invalid_request")
	})

	// comp=Block is no Put Block to the store: Azurite runs it as Put
	// Blob. The gateway classified it as Put Block (no precondition, no
	// stamp), so the current owner's request overwrote a version written
	// around the gateway and erased the blob's stamp.
	t.Run("comp in another case", func(t *testing.T) {
		s := azShape{name: "comp=Block", method: "PUT", target: "/fenced/victim?comp=Block&blockid=" + id, hdr: [][2]string{bb}, body: "A"}
		w.wantAzRefused(t, s, 5, http.StatusNotImplemented, "invalid_request")
		w.wantAzRefused(t, s, azHigh, http.StatusNotImplemented, "invalid_request")
		s = azShape{name: "COMP=block", method: "PUT", target: "/fenced/victim?COMP=block&blockid=" + id, hdr: [][2]string{bb}, body: "A"}
		w.wantAzRefused(t, s, azHigh, http.StatusBadRequest, "invalid_request")
	})

	// ?Comp=lease&COMP=metadata: Azurite reads no comp (Put Blob); the
	// gateway took one of the two by Go's map order, forwarding the
	// request unconditioned and unstamped when it took the lease. Now it
	// is refused, the same way every time.
	t.Run("comp twice in two cases", func(t *testing.T) {
		s := azShape{name: "Comp=lease&COMP=metadata", method: "PUT", target: "/fenced/victim?Comp=lease&COMP=metadata",
			hdr: [][2]string{bb, {"X-Ms-Lease-Action", "acquire"}}, body: "A"}
		for range 10 {
			w.wantAzRefused(t, s, azHigh, http.StatusBadRequest, "invalid_request")
		}
	})

	// Put Block without a blockid, Set Blob Tier without a tier but with a
	// copy source: Azurite runs another operation (Put Blob, Copy Blob).
	t.Run("missing what selects the operation", func(t *testing.T) {
		w.wantAzRefused(t, azShape{name: "put block without blockid", method: "PUT", target: "/fenced/victim?comp=block",
			hdr: [][2]string{bb}, body: "A"}, azHigh, http.StatusBadRequest, "invalid_request")
		w.wantAzRefused(t, azShape{name: "tier with a copy source", method: "PUT", target: "/fenced/victim?comp=tier",
			hdr: [][2]string{{"X-Ms-Copy-Source", w.gw + "/fenced/src"}}}, azHigh, http.StatusBadRequest, "invalid_request")
	})

	// An empty condition is no condition to the store: refused, not taken
	// for the worker's own.
	t.Run("empty conditions", func(t *testing.T) {
		for _, h := range []string{"If-Match", "If-None-Match", "If-Unmodified-Since", "X-Ms-If-Tags"} {
			w.wantAzRefused(t, azShape{name: "empty " + h, method: "PUT", target: "/fenced/dir%2Fvictim",
				hdr: [][2]string{bb, {h, ""}}, body: "A"}, azHigh, http.StatusBadRequest, "invalid_request")
		}
	})

	// A Blob Batch names its blobs in its body: refused (501), as before.
	t.Run("batch", func(t *testing.T) {
		c := azWorker(t, w.gw, tokenOf(azHigh+1).Load).ServiceClient().NewContainerClient("fenced")
		bb, err := c.NewBatchBuilder()
		if err != nil {
			t.Fatal(err)
		}
		bb.Delete("victim", nil)
		before := w.state(t)
		if _, err := c.SubmitBatch(ctx, bb, nil); azErrCodeOf(err) != "501 invalid_request" {
			t.Errorf("batch: %v; want 501 invalid_request", err)
		}
		if d := azDiff(before, w.state(t)); len(d) > 0 {
			t.Errorf("batch changed the store:\n%s", strings.Join(d, "\n"))
		}
	})

	// The legitimate forms, through azblob with a newer token: Put Block
	// leaves the blob and its stamp as they are, Put Block List commits
	// and stamps, Put Blob stamps.
	t.Run("blocks keep their stamp semantics", func(t *testing.T) {
		const tok = azHigh + 2
		bc := azWorker(t, w.gw, tokenOf(tok).Load).ServiceClient().NewContainerClient("fenced").NewBlockBlobClient("dir/victim")
		dc := w.srv.Client(t).ServiceClient().NewContainerClient("fenced").NewBlockBlobClient("dir/victim")
		stamp := func() (string, string) {
			p, err := dc.GetProperties(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return meta(p.Metadata, "fencing_token"), string(*p.ETag)
		}
		s0, e0 := stamp()
		blk := base64.StdEncoding.EncodeToString([]byte("legit-0001"))
		if _, err := bc.StageBlock(ctx, blk, streaming.NopCloser(strings.NewReader("C")), nil); err != nil {
			t.Fatalf("put block: %v", err)
		}
		if s, e := stamp(); s != s0 || e != e0 || s0 != fmt.Sprint(azHigh) {
			t.Fatalf("after put block: stamp %q ETag %s; want %q, %s (staging leaves the blob)", s, e, s0, e0)
		}
		if _, err := bc.CommitBlockList(ctx, []string{blk}, nil); err != nil {
			t.Fatalf("put block list: %v", err)
		}
		if s, _ := stamp(); s != fmt.Sprint(tok) {
			t.Fatalf("after put block list: stamp %q; want %d", s, tok)
		}
		if _, err := bc.Upload(ctx, streaming.NopCloser(strings.NewReader("D")), &blockblob.UploadOptions{}); err != nil {
			t.Fatalf("put blob: %v", err)
		}
		if s, _ := stamp(); s != fmt.Sprint(tok) {
			t.Fatalf("after put blob: stamp %q; want %d", s, tok)
		}
		// The table's spelling of the same request, raw.
		st, _, body := azSigned(t, w.gw, azWorkerAccount, azWorkerKey, azShape{name: "raw put block", method: "PUT",
			target: "/fenced/dir%2Fvictim?comp=block&blockid=" + id, body: "E"}, tok)
		if st != http.StatusCreated {
			t.Fatalf("raw put block: %d %s", st, body)
		}
	})
}

func azErrCodeOf(err error) string {
	if err == nil {
		return "nil"
	}
	return azErrCode(err)
}
