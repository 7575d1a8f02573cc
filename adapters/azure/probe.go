package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/fencegate/fencegate/adapters/objectstore"
)

// ProbeBlob is the blob the racing probe writes and deletes.
const ProbeBlob = ".fencegate-probe"

// ProbeRace runs the racing probe (objectstore.ProbeRace) on the store,
// through the official SDK (azblob) rather than the gateway's own signing:
// Put Blobs with If-None-Match: *, then If-Match on the probe blob's ETag,
// in container.
func (u *Upstream) ProbeRace(ctx context.Context, container string, n int) error {
	// Without the SDK's retries: the probe counts every answer.
	c, err := u.containerClient(container, -1)
	if err != nil {
		return fmt.Errorf("container %s: %w", container, err)
	}
	return objectstore.ProbeRace(ctx, "container", container, &probe{c: c.NewBlockBlobClient(ProbeBlob)}, n)
}

type probe struct{ c *blockblob.Client }

// Put uploads body on If-Match: ifMatch (If-None-Match: * for "") and
// returns the status and the written ETag.
func (p *probe) Put(ctx context.Context, body, ifMatch string) (int, string, error) {
	cond := &blob.ModifiedAccessConditions{}
	if ifMatch == "" {
		cond.IfNoneMatch = new(azcore.ETagAny)
	} else {
		cond.IfMatch = new(azcore.ETag(ifMatch))
	}
	resp, err := p.c.Upload(ctx, streaming.NopCloser(strings.NewReader(body)),
		&blockblob.UploadOptions{AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: cond}})
	var re *azcore.ResponseError
	switch {
	case errors.As(err, &re):
		return re.StatusCode, "", nil
	case err != nil:
		return 0, "", err
	}
	etag := ""
	if resp.ETag != nil {
		etag = string(*resp.ETag)
	}
	return http.StatusCreated, etag, nil
}

// Head returns the probe blob's ETag ("" if it does not exist).
func (p *probe) Head(ctx context.Context) (string, error) {
	resp, err := p.c.GetProperties(ctx, nil)
	var re *azcore.ResponseError
	switch {
	case errors.As(err, &re) && re.StatusCode == http.StatusNotFound:
		return "", nil
	case err != nil:
		return "", err
	case resp.ETag == nil:
		return "", errors.New("no ETag in the answer")
	}
	return string(*resp.ETag), nil
}

func (p *probe) Delete(ctx context.Context) { p.c.Delete(ctx, nil) }
