package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"

	"github.com/fencegate/fencegate/coordinator/client/azblobfence"
)

// azSASWorker is azblob pointed at the gateway with an account SAS signed
// with key for the worker's account name, sending token().
func azSASWorker(t *testing.T, gw, key string, v sas.AccountSignatureValues, token func() int64) *azblob.Client {
	t.Helper()
	cred, err := azblob.NewSharedKeyCredential(azWorkerAccount, key)
	if err != nil {
		t.Fatal(err)
	}
	q, err := v.SignWithSharedKey(cred)
	if err != nil {
		t.Fatal(err)
	}
	return azSASClient(t, gw, q.Encode(), token)
}

// azSASClient is azblob pointed at the gateway with the SAS query.
func azSASClient(t *testing.T, gw, query string, token func() int64) *azblob.Client {
	t.Helper()
	o := azblobfence.ClientOptions(token)
	o.Retry = azNoRetry
	c, err := azblob.NewClientWithNoCredential(gw+"/?"+query, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sasValues(perms sas.AccountPermissions, start, expiry time.Time) sas.AccountSignatureValues {
	return sas.AccountSignatureValues{
		Protocol:      sas.ProtocolHTTPSandHTTP,
		StartTime:     start,
		ExpiryTime:    expiry,
		Permissions:   perms.String(),
		ResourceTypes: (&sas.AccountResourceTypes{Container: true, Object: true}).String(),
	}
}

// wantAzForbidden wants the gateway's 403 forbidden, saying why.
func wantAzForbidden(t *testing.T, what string, err error, why string) {
	t.Helper()
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusForbidden || re.ErrorCode != "forbidden" || !strings.Contains(err.Error(), why) {
		t.Fatalf("%s: err = %v; want 403 forbidden from the gateway: %s", what, err, why)
	}
}

// Workers may authenticate with an account SAS signed with their own key
// (azure.clients), verified by the gateway: signature, validity window and
// permissions. A valid SAS's writes are fenced (stamped, a stale one
// refused); an expired, not yet valid, read-only, tampered or foreign-key
// SAS writes nothing. Checked on the blobs in Azurite.
func TestAzureWorkerSAS(t *testing.T) {
	e := startAzEnv(t, "etag")
	ctx := context.Background()
	now := time.Now().UTC()
	all := sas.AccountPermissions{Read: true, Write: true, Delete: true, List: true, Create: true}
	zombie := azSASWorker(t, e.GW, azWorkerKey, sasValues(all, now.Add(-time.Minute), now.Add(time.Hour)), tokenOf(41).Load)
	owner := azSASWorker(t, e.GW, azWorkerKey, sasValues(all, time.Time{}, now.Add(time.Hour)), tokenOf(42).Load)
	if err := azPut(zombie, "job", "A"); err != nil {
		t.Fatalf("SAS worker's write: %v", err)
	}
	if err := azPutBlocks(owner, "job", "BBBBBBBB", 4); err != nil {
		t.Fatalf("SAS worker's staged write: %v", err)
	}
	if got, stamp := e.stored(t, "job"); got != "BBBBBBBB" || stamp != "42" {
		t.Fatalf("job = %q stamp %q; want BBBBBBBB stamped 42", got, stamp)
	}
	wantAzStale(t, "zombie's late write", azPut(zombie, "job", "A-late"))
	// Reads and listings pass with r and l.
	r, err := owner.DownloadStream(ctx, azContainer, "job", nil)
	if err != nil {
		t.Fatalf("SAS read through the gateway: %v", err)
	}
	r.Body.Close()
	if _, err := owner.NewListBlobsFlatPager(azContainer, nil).NextPage(ctx); err != nil {
		t.Fatalf("SAS listing through the gateway: %v", err)
	}
	before := e.snapshot(t, "job")

	other := strings.Replace(azWorkerKey, "A", "B", 1)
	if other == azWorkerKey {
		other = "b3RoZXIta2V5LTAxMjM0NTY3ODk="
	}
	readOnly := sasValues(sas.AccountPermissions{Read: true, List: true}, time.Time{}, now.Add(time.Hour))
	const (
		window = "expired or not yet valid"
		grant  = "does not grant this operation"
		sig    = "signature does not match"
	)
	for _, tc := range []struct {
		what, why string
		c         *azblob.Client
	}{
		{"expired", window, azSASWorker(t, e.GW, azWorkerKey, sasValues(all, now.Add(-2*time.Hour), now.Add(-time.Hour)), tokenOf(43).Load)},
		{"not yet valid", window, azSASWorker(t, e.GW, azWorkerKey, sasValues(all, now.Add(time.Hour), now.Add(2*time.Hour)), tokenOf(43).Load)},
		{"read-only", grant, azSASWorker(t, e.GW, azWorkerKey, readOnly, tokenOf(43).Load)},
		{"another key", sig, azSASWorker(t, e.GW, other, sasValues(all, time.Time{}, now.Add(time.Hour)), tokenOf(43).Load)},
		{"tampered sp=rwdl", sig, tampered(t, e.GW, readOnly, tokenOf(43).Load)},
	} {
		wantAzForbidden(t, tc.what+": Put Blob", azPut(tc.c, "job", "X"), tc.why)
		wantAzForbidden(t, tc.what+": Put Blob of a new blob", azPut(tc.c, "new", "X"), tc.why)
		_, err := tc.c.DeleteBlob(ctx, azContainer, "job", nil)
		wantAzForbidden(t, tc.what+": Delete Blob", err, tc.why)
	}
	if now := e.snapshot(t, "job"); !now.equal(before) {
		t.Fatalf("job after refused SAS writes: %+v; want unchanged %+v", now, before)
	}
	if got, _ := e.stored(t, "new"); got != "<absent>" {
		t.Fatalf("new = %q; want absent", got)
	}
	// The read-only SAS reads.
	if _, err := azSASWorker(t, e.GW, azWorkerKey, readOnly, tokenOf(43).Load).DownloadStream(ctx, azContainer, "job", nil); err != nil {
		t.Fatalf("read-only SAS read: %v", err)
	}
}

// tampered is a read-only SAS whose sp was widened after signing.
func tampered(t *testing.T, gw string, v sas.AccountSignatureValues, token func() int64) *azblob.Client {
	t.Helper()
	cred, err := azblob.NewSharedKeyCredential(azWorkerAccount, azWorkerKey)
	if err != nil {
		t.Fatal(err)
	}
	q, err := v.SignWithSharedKey(cred)
	if err != nil {
		t.Fatal(err)
	}
	enc := strings.Replace(q.Encode(), "sp="+v.Permissions, "sp=rwdl", 1)
	if enc == q.Encode() {
		t.Fatalf("sp not found in %s", enc)
	}
	return azSASClient(t, gw, enc, token)
}

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
