package e2e

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
)

// A copy reads its source, and the store reads a source of its own
// account with the copy's authorization: the gateway's. A worker whose
// account SAS may write but not read (no r) is refused a copy (403), as
// Azure refuses a SAS without r a copy's source; before, the gateway
// forwarded it and the worker copied a blob it could not read into one
// it could write (or staged a block read from it). A source that carries a SAS of its own is read by the
// store with that SAS: the gateway's read of a stamped copy's source
// carries only it, so a worker learns of a source what the copy itself
// would tell it (before, the gateway read it with its own credentials and
// answered 404 for a missing source where the store answers 403 for
// both). The blobs are read from Azurite.
func TestAzureCopySourceReadAsTheStore(t *testing.T) {
	e := startAzEnv(t, "")
	ctx := context.Background()
	direct := e.direct(t)
	if err := azPut(direct, "secret", "secret body"); err != nil {
		t.Fatal(err)
	}
	if err := azPut(azWorker(t, e.GW, tokenOf(5).Load), "dst", "old dst"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	sasWorker := func(perms sas.AccountPermissions, token int64) *blob.Client {
		c := azSASWorker(t, e.GW, azWorkerKey, sasValues(perms, time.Time{}, now.Add(time.Hour)), tokenOf(token).Load)
		return c.ServiceClient().NewContainerClient(azContainer).NewBlobClient("dst")
	}
	source := e.GW + "/" + azContainer + "/secret"
	wantDst := func(what, body, stamp string) {
		t.Helper()
		if b, s := e.stored(t, "dst"); b != body || s != stamp {
			t.Fatalf("%s: dst holds %q stamped %q; want %q stamped %q", what, b, s, body, stamp)
		}
	}

	// Write-only: its read of the source is refused, and so is its copy,
	// stamped (the gateway reads the source) or naming metadata (it
	// does not).
	writeOnly := sasWorker(sas.AccountPermissions{Write: true, Create: true}, 6)
	_, err := writeOnly.DownloadStream(ctx, nil)
	wantAzForbidden(t, "a write-only SAS reading", err, "does not grant")
	for _, o := range []*blob.StartCopyFromURLOptions{nil, {Metadata: map[string]*string{"owner": to("w")}}} {
		_, err = writeOnly.StartCopyFromURL(ctx, source, o)
		wantAzForbidden(t, "a write-only SAS copying", err, "does not grant")
		wantDst("after a write-only SAS's copy", "old dst", "5")
	}
	// Nor may it stage a block read from the source (Put Block From URL).
	bb := azSASWorker(t, e.GW, azWorkerKey, sasValues(sas.AccountPermissions{Write: true, Create: true}, time.Time{}, now.Add(time.Hour)),
		tokenOf(6).Load).ServiceClient().NewContainerClient(azContainer).NewBlockBlobClient("dst")
	_, err = bb.StageBlockFromURL(ctx, "YmxvY2sx", source, nil)
	wantAzForbidden(t, "a write-only SAS staging a block from a URL", err, "does not grant")
	list, err := direct.ServiceClient().NewContainerClient(azContainer).NewBlockBlobClient("dst").GetBlockList(ctx, blockblob.BlockListTypeUncommitted, nil)
	if err != nil || len(list.UncommittedBlocks) != 0 {
		t.Fatalf("dst's uncommitted blocks after a write-only SAS's Put Block From URL: %v, %v; want none", list.UncommittedBlocks, err)
	}

	// A source whose SAS the store does not accept (the worker's own
	// key): the store answers the copy 403, the source there or not; so
	// does the gateway.
	bogus := sasValues(sas.AccountPermissions{Read: true}, time.Time{}, now.Add(time.Hour))
	q := azSASQuery(t, bogus)
	sk := azWorker(t, e.GW, tokenOf(7).Load).ServiceClient().NewContainerClient(azContainer).NewBlobClient("dst")
	for _, name := range []string{"secret", "missing"} {
		_, err := direct.ServiceClient().NewContainerClient(azContainer).NewBlobClient("oracle").
			StartCopyFromURL(ctx, e.Az.Endpoint+"/"+azContainer+"/"+name+"?"+q, nil)
		want := azStatus(err)
		_, err = sk.StartCopyFromURL(ctx, e.GW+"/"+azContainer+"/"+name+"?"+q, nil)
		if got := azStatus(err); got != want || got < 400 {
			t.Errorf("copy of %s with a SAS the store refuses: the gateway answers %d (%v); the store answers %d", name, got, err, want)
		}
		wantDst("after a copy with a refused SAS", "old dst", "5")
	}

	// With r, the copy is made, stamped.
	if _, err := sasWorker(sas.AccountPermissions{Read: true, Write: true}, 8).StartCopyFromURL(ctx, source, nil); err != nil {
		t.Fatalf("a read-write SAS copying: %v", err)
	}
	wantDst("after a read-write SAS's copy", "secret body", "8")
}

// azSASQuery is an account SAS signed with the worker's own key (which
// the store does not know), as a query string.
func azSASQuery(t *testing.T, v sas.AccountSignatureValues) string {
	t.Helper()
	c := azSASWorker(t, "http://unused", azWorkerKey, v, tokenOf(0).Load)
	u, err := url.Parse(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	return u.RawQuery
}

// azStatus is the HTTP status of an azblob call's error (200: none).
func azStatus(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	if err != nil {
		return -1
	}
	return http.StatusOK
}
