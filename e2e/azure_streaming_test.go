package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/fencegate/fencegate/internal/testenv"
)

// Large uploads through the gateway, as one Put Blob and as 16 MiB staged
// blocks with their commit: the gateway's peak RSS stays far below the
// blob size (bodies stream), and the stored blobs are whole and stamped.
func TestAzureLargeUploadStreams(t *testing.T) {
	e := startAzEnv(t, "etag")
	w := e.worker(t, tokenOf(1))
	if err := azPut(w, "small", "tiny"); err != nil {
		t.Fatal(err)
	}
	base := vmHWM(t, e.Proc)
	const size = 64 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>13)
	}
	sum := md5.Sum(data)
	ctx := context.Background()
	uploads := map[string]func(name string) error{
		"put blob": func(name string) error {
			_, err := w.ServiceClient().NewContainerClient(azContainer).NewBlockBlobClient(name).
				Upload(ctx, streaming.NopCloser(bytes.NewReader(data)), nil)
			return err
		},
		"blocks": func(name string) error {
			_, err := w.UploadStream(ctx, azContainer, name, bytes.NewReader(data),
				&azblob.UploadStreamOptions{BlockSize: 16 << 20, Concurrency: 1})
			return err
		},
	}
	for name, up := range uploads {
		blobName := "large/" + strings.ReplaceAll(name, " ", "-")
		if err := up(blobName); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r, err := e.direct(t).DownloadStream(ctx, azContainer, blobName, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := md5.New()
		n, err := io.Copy(h, r.Body)
		r.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		_, md := e.props(t, blobName)
		if n != size || !bytes.Equal(h.Sum(nil), sum[:]) || meta(md, "fencing_token") != "1" {
			t.Fatalf("%s: stored %d bytes, md5 %x, metadata %v; want %d bytes, md5 %x, stamp 1", name, n, h.Sum(nil), md, size, sum)
		}
	}
	peak := vmHWM(t, e.Proc)
	t.Logf("gateway peak RSS: %d MiB after a small upload, %d MiB after two %d MiB uploads", base>>20, peak>>20, size>>20)
	if peak-base > 40<<20 {
		t.Errorf("gateway peak RSS grew by %d MiB for %d MiB blobs: the body is buffered", (peak-base)>>20, size>>20)
	}
}

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

// BenchmarkAzureUpload writes blobs with azblob's Put Blob, straight to
// Azurite and through a gateway (stamping, no precondition) in front of
// it: the ratio of the two is the gateway's cost.
//
//	go test -run '^$' -bench BenchmarkAzureUpload -benchtime 100x ./e2e/
func BenchmarkAzureUpload(b *testing.B) {
	srv := testenv.Azurite(b)
	srv.CreateContainer(b, azContainer)
	p := startFencegate(b, s3GatewayYAML(azRouteYAML("blobs", "", srv.Endpoint, "", "30s")))
	direct := srv.Client(b)
	gw := azWorker(b, p.URL("gateway"), func() int64 { return 1 })
	for _, size := range []int{4 << 10, 16 << 20} {
		data := bytes.Repeat([]byte("x"), size)
		for _, c := range []struct {
			name string
			c    *azblob.Client
		}{{"direct", direct}, {"gateway", gw}} {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, c.name), func(b *testing.B) {
				b.SetBytes(int64(size))
				bc := c.c.ServiceClient().NewContainerClient(azContainer)
				for i := 0; b.Loop(); i++ {
					_, err := bc.NewBlockBlobClient(fmt.Sprintf("bench-%d", i%8)).
						Upload(context.Background(), streaming.NopCloser(bytes.NewReader(data)), nil)
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
