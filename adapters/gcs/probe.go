package gcs

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate/adapters/objectstore"
)

// ProbeObject is the object the racing probe writes and deletes.
const ProbeObject = ".fencegate-probe"

// ProbeRace runs the racing probe (objectstore.ProbeRace) on the store:
// uploads with ifGenerationMatch (0, then the probe object's generation)
// in bucket.
func (u *Upstream) ProbeRace(ctx context.Context, bucket string, n int) error {
	return objectstore.ProbeRace(ctx, "bucket", bucket, &probe{u: u, bucket: bucket}, n)
}

type probe struct {
	u      *Upstream
	bucket string
}

// Put uploads body with ifGenerationMatch (the generation in ifMatch, or
// 0 for ifMatch "") and returns the status and the written generation as
// an entity-tag.
func (p *probe) Put(ctx context.Context, body, ifMatch string) (int, string, error) {
	gen := "0"
	if ifMatch != "" {
		gen = strings.Trim(ifMatch, `"`)
		if gen == "fencegate-probe-wrong-etag" {
			gen = "1" // a generation the object does not have
		}
	}
	u := p.u
	q := url.Values{"uploadType": {"media"}, "name": {ProbeObject}, "ifGenerationMatch": {gen}}
	resp, err := u.do(ctx, http.MethodPost, "/upload/storage/v1/b/"+url.PathEscape(p.bucket)+"/o?"+q.Encode(), strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxObjectDoc))
	if g := generationOf(b); g != "" && resp.StatusCode < 300 {
		return resp.StatusCode, `"` + g + `"`, nil
	}
	return resp.StatusCode, "", nil
}

// Head returns the probe object's generation as an entity-tag.
func (p *probe) Head(ctx context.Context) (string, error) {
	return p.u.generation(ctx, p.bucket, ProbeObject)
}

func (p *probe) Delete(ctx context.Context) {
	if resp, err := p.u.do(ctx, http.MethodDelete, "/storage/v1/b/"+url.PathEscape(p.bucket)+"/o/"+url.PathEscape(ProbeObject), nil); err == nil {
		resp.Body.Close()
	}
}
