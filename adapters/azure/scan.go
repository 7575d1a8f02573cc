package azure

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/fencegate/fencegate/adapters/objectstore"
)

// ObjectVars are the template variables of one blob (container, blob), as
// Inspect derives them for a request writing it.
func (u *Upstream) ObjectVars(container, blob string) map[string]string { return vars(container, blob) }

// ScanStamps lists container under prefix (List Blobs with
// include=metadata, so one request per page of blobs) with the gateway's
// own credentials and calls fn with the stamp of every blob that has one.
// Blobs without a stamp (written before stamping was on, or around the
// gateway) are skipped and counted in unstamped; a malformed stamp is an
// error, not a guess. Memory is bounded by one listing page.
func (u *Upstream) ScanStamps(ctx context.Context, containerName, prefix string, fn func(objectstore.Stamp) error) (unstamped int, err error) {
	c, err := u.containerClient(containerName, 2)
	if err != nil {
		return 0, fmt.Errorf("container %s: %w", containerName, err)
	}
	scan := &objectstore.StampScan{Collection: containerName, Key: u.stampKey, Fn: fn}
	opts := &container.ListBlobsFlatOptions{Include: container.ListBlobsInclude{Metadata: true}}
	if prefix != "" {
		opts.Prefix = &prefix
	}
	pager := c.NewListBlobsFlatPager(opts)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return scan.Unstamped, fmt.Errorf("list %s/%s: %w", containerName, prefix, listError(err))
		}
		if page.Segment == nil {
			continue
		}
		for _, b := range page.Segment.BlobItems {
			if b == nil || b.Name == nil {
				continue
			}
			v, ok := "", false
			if p, found := objectstore.MetaValue(b.Metadata, u.stampKey); found && p != nil {
				v, ok = *p, true
			}
			if err := scan.Object(*b.Name, v, ok); err != nil {
				return scan.Unstamped, err
			}
		}
	}
	return scan.Unstamped, nil
}

// listError is the store's answer without the SDK's dump of the request
// (whose URL carries a SAS's signature when the route uses one).
func listError(err error) error {
	if re, ok := err.(*azcore.ResponseError); ok {
		return fmt.Errorf("%d %s", re.StatusCode, re.ErrorCode)
	}
	return err
}

// containerClient is azblob's client of one container (and of its blobs),
// with the gateway's credentials and transport, and retries (-1: none).
func (u *Upstream) containerClient(name string, retries int32) (*container.Client, error) {
	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: &http.Client{Transport: u.transport},
		Retry:     policy.RetryOptions{MaxRetries: retries},
	}}
	target := u.blobURL(name, "")
	target.RawPath = strings.TrimSuffix(target.RawPath, "/")
	target.Path = strings.TrimSuffix(target.Path, "/")
	if u.cred == nil {
		return container.NewClientWithNoCredential(target.String(), opts)
	}
	cred, err := container.NewSharedKeyCredential(u.cred.account, u.cred.b64())
	if err != nil {
		return nil, err
	}
	return container.NewClientWithSharedKeyCredential(target.String(), cred, opts)
}
