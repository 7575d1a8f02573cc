package e2e

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
)

// lease_guard: the gateway holds an infinite lease on the blobs it wrote,
// so a write around the gateway with the account's key but without the
// lease id is refused by Azurite itself, while the gateway's own writes
// go on; workers cannot take or break leases through the gateway. What it
// does not guard: the account's key can break the lease, after which a
// write around the gateway lands (and the gateway's next write takes the
// lease again).
func TestAzureLeaseGuard(t *testing.T) {
	e := startAzEnv(t, "", "lease_guard: true", "lease_secret: lease-secret-0123456789")
	ctx := context.Background()
	w := e.worker(t, tokenOf(1))
	if err := azPut(w, "guarded", "A"); err != nil {
		t.Fatal(err)
	}
	direct := e.direct(t).ServiceClient().NewContainerClient(azContainer).NewBlockBlobClient("guarded")
	props, err := direct.GetProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if props.LeaseState == nil || *props.LeaseState != lease.StateTypeLeased || props.LeaseDuration == nil || *props.LeaseDuration != lease.DurationTypeInfinite {
		t.Fatalf("lease state %v duration %v; want an infinite lease held", leaseVal(props.LeaseState), leaseVal(props.LeaseDuration))
	}
	// Around the gateway, with the account's key: refused by the store.
	var re *azcore.ResponseError
	if err := azPut(e.direct(t), "guarded", "bypass"); !errors.As(err, &re) || re.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("write around the gateway: %v; want 412 (lease id missing)", err)
	}
	if _, err := direct.Delete(ctx, nil); !errors.As(err, &re) || re.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("delete around the gateway: %v; want 412 (lease id missing)", err)
	}
	if got, _ := e.stored(t, "guarded"); got != "A" {
		t.Fatalf("stored %q; want A", got)
	}
	// Through the gateway: written with the lease.
	if err := azPut(e.worker(t, tokenOf(2)), "guarded", "B"); err != nil {
		t.Fatalf("the gateway's write of a guarded blob: %v", err)
	}
	if got, stamp := e.stored(t, "guarded"); got != "B" || stamp != "2" {
		t.Fatalf("stored %q stamp %q; want B stamped 2", got, stamp)
	}
	// Workers do not manage the gateway's leases.
	lc, err := lease.NewBlobClient(w.ServiceClient().NewContainerClient(azContainer).NewBlobClient("guarded"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.BreakLease(ctx, nil); !errors.As(err, &re) || re.StatusCode != http.StatusForbidden {
		t.Fatalf("a worker's break lease: %v; want 403", err)
	}
	// Not guarded: the account's key breaks the lease; then a write around
	// the gateway lands. The gateway's next write takes the lease again.
	dl, err := lease.NewBlobClient(e.direct(t).ServiceClient().NewContainerClient(azContainer).NewBlobClient("guarded"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dl.BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: to(int32(0))}); err != nil {
		t.Fatal(err)
	}
	if err := azPut(e.direct(t), "guarded", "around"); err != nil {
		t.Fatalf("write around the gateway after the break: %v", err)
	}
	if err := azPut(e.worker(t, tokenOf(2)), "guarded", "C"); err != nil {
		t.Fatalf("the gateway's write after the break: %v", err)
	}
	if err := azPut(e.direct(t), "guarded", "bypass-again"); !errors.As(err, &re) || re.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("write around the gateway after the gateway's next write: %v; want 412", err)
	}
	if got, _ := e.stored(t, "guarded"); got != "C" {
		t.Fatalf("stored %q; want C", got)
	}
	// The gateway deletes with its lease.
	if _, err := w.ServiceClient().NewContainerClient(azContainer).NewBlobClient("guarded").Delete(ctx, nil); err == nil {
		t.Fatal("a stale token's delete was admitted")
	}
	if _, err := e.worker(t, tokenOf(2)).DeleteBlob(ctx, azContainer, "guarded", nil); err != nil {
		t.Fatalf("the gateway's delete of a guarded blob: %v", err)
	}
	if got, _ := e.stored(t, "guarded"); got != "<absent>" {
		t.Fatalf("after delete: %q", got)
	}
}

func leaseVal[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
