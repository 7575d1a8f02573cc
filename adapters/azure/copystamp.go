package azure

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/gateway"
)

// Copy Blob and Copy Blob From URL give the destination the source's
// metadata when the request names none, and the request's alone when it
// names some: the gateway's stamp alone would drop the source's metadata
// (the users'). On a stamping route a copy that names no metadata is sent
// with the source's, read with the gateway's credentials (Get Blob
// Properties), and the copy's stamp, on the condition that the source is
// still the version read (x-ms-source-if-match). Put Blob From URL takes
// no metadata from its source (only its properties): the stamp is the
// blob's metadata, as for Put Blob.

// sourceConditions are the worker's conditions on a copy's source,
// evaluated against the source read and replaced by the gateway's.
// x-ms-source-if-tags is the store's to evaluate.
var sourceConditions = objectstore.SourceConditions{IfMatch: "X-Ms-Source-If-Match",
	IfNoneMatch: "X-Ms-Source-If-None-Match", IfModifiedSince: "X-Ms-Source-If-Modified-Since",
	IfUnmodifiedSince: "X-Ms-Source-If-Unmodified-Since"}

const metaPrefix = "X-Ms-Meta-"

// copiesSourceMetadata reports whether a copy takes its source's metadata:
// a Copy Blob or Copy Blob From URL (not Put Blob From URL, which names
// its blob type) that names none.
func copiesSourceMetadata(r *http.Request, t target) bool {
	if t.op != opCopy || r.Header.Get("X-Ms-Blob-Type") != "" {
		return false
	}
	for k := range r.Header {
		if strings.HasPrefix(k, metaPrefix) {
			return false
		}
	}
	return true
}

// readCopySource reads the metadata and ETag of a copy's source as the
// store would read it for the copy, and evaluates the worker's own
// conditions on the source against them, as the store would. The store
// reads a source that carries a SAS of its own with that SAS, and a Copy
// Blob From URL's with its x-ms-copy-source-authorization: the gateway's
// read carries only that, never its own credentials, so that its answer
// (404, 403, a condition that fails) is the one the copy would get, and
// tells a worker nothing of a source it may not read. A source of this
// account with neither is read with the copy's own authorization, which
// is the gateway's (the worker's SAS needs r for a copy: permitted).
func (u *Upstream) readCopySource(ctx context.Context, in *http.Request) (*objectstore.CopySource, error) {
	src, ownSAS, ok := u.sourceBlob(in, in.Header.Get("X-Ms-Copy-Source"))
	if !ok {
		return nil, fencegate.InvalidRequest("a copy on a route with stamp: true that names no metadata takes the source's, " +
			"which the gateway reads: its x-ms-copy-source must be a blob of this store (on the gateway's address or the store's); " +
			"or name the destination's metadata (x-ms-meta-*)")
	}
	var (
		resp *http.Response
		err  error
	)
	if auth := in.Header.Get("X-Ms-Copy-Source-Authorization"); ownSAS || auth != "" {
		resp, err = u.readAs(ctx, src, auth)
	} else {
		resp, err = u.do(ctx, http.MethodHead, src, nil)
	}
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	return sourceConditions.ReadSource(resp, in.Header, "azure: Get Blob Properties of the copy source", metaPrefix, nil, objectstore.SourceRefusals{
		NotFound: &fencegate.Error{Code: fencegate.CodeNotFound, Message: "the copy source does not exist"},
		Forbidden: &fencegate.Error{Code: fencegate.CodeForbidden,
			Message: "the copy source may not be read with the authorization the copy carries (its SAS, x-ms-copy-source-authorization or the gateway's), and a stamped copy carries its metadata"},
		Failed: &fencegate.Error{Code: fencegate.CodePreconditionFailed,
			Message: "a condition on the copy source (x-ms-source-if-*) does not hold"}})
}

// readAs sends Get Blob Properties of src (its own SAS in its query) with
// auth as its Authorization ("" none), not signed with the gateway's
// credentials.
func (u *Upstream) readAs(ctx context.Context, src *url.URL, auth string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, src.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Ms-Version", apiVersion)
	req.Header.Set("X-Ms-Date", u.now().UTC().Format(http.TimeFormat))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return u.transport.RoundTrip(req)
}

// sourceBlob is the store's URL of a copy source that names a blob of the
// store, on the gateway's address or the store's own, with the snapshot or
// version it names. A source that carries a SAS (sig) keeps its whole
// query, with which the store reads it (ownSAS); any other keeps no other
// parameter.
func (u *Upstream) sourceBlob(in *http.Request, src string) (_ *url.URL, ownSAS, ok bool) {
	s, container, blob, ok := u.sourceName(in, src)
	if !ok {
		return nil, false, false
	}
	out := u.blobURL(container, blob)
	sq := s.Query()
	if sq.Has("sig") {
		out.RawQuery = s.RawQuery
		return out, true, true
	}
	q := out.Query()
	for _, k := range []string{"snapshot", "versionid"} {
		if v := sq.Get(k); v != "" {
			q.Set(k, v)
		}
	}
	out.RawQuery = q.Encode()
	return out, false, true
}

// sourceName is the container and blob a copy source names in the store's
// account, on the gateway's address or the store's own, and the source as
// parsed; false for a source elsewhere (another account or host) or one
// the gateway does not read as one blob.
func (u *Upstream) sourceName(in *http.Request, src string) (_ *url.URL, container, blob string, ok bool) {
	s, err := url.Parse(src)
	if err != nil {
		return nil, "", "", false
	}
	p, prefix := s.EscapedPath(), u.endpoint.EscapedPath()
	switch {
	case strings.EqualFold(s.Host, in.Host):
	case strings.EqualFold(s.Host, u.endpoint.Host) && strings.HasPrefix(p, strings.TrimSuffix(prefix, "/")+"/"):
		p = p[len(strings.TrimSuffix(prefix, "/")):]
	default:
		return nil, "", "", false
	}
	container, names, slash, err := parsePath(p)
	if err != nil || slash || container == "" || len(names) == 0 {
		return nil, "", "", false
	}
	return s, container, strings.Join(names, "/"), true
}

// copySourceReads names the blob a request's x-ms-copy-source reads (Copy
// Blob, Put Blob From URL, Put Block/Page From URL, Append Block From URL:
// on any request that sends it, fail closed) in insp.Reads, which a route
// with fence_reads authorizes and fences as a GET of it. A source in
// another account or host, which is no resource of the route, is
// insp.ReadsUnnamed: refused on such a route.
func (u *Upstream) copySourceReads(r *http.Request, insp *gateway.Inspection) {
	vs := r.Header.Values("X-Ms-Copy-Source")
	if len(vs) == 0 {
		return
	}
	_, container, blob, ok := u.sourceName(r, vs[0])
	if len(vs) != 1 || !ok {
		insp.ReadsUnnamed = &fencegate.Error{Code: fencegate.CodeForbidden,
			Message: "x-ms-copy-source must name one blob of this route's account, once, on a route that fences reads: " +
				"a copy reads its source, which such a route authorizes and fences as a GET of it, and a source elsewhere is none of its resources"}
		return
	}
	insp.Reads = []map[string]string{vars(container, blob)}
}
