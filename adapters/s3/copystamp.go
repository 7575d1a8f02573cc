package s3

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate/adapters/objectstore"
)

// A stamped CopyObject with the COPY metadata directive is sent with its
// source's metadata (objectstore.CopySource): S3 would copy the source's metadata, the source's stamp
// included (so `fence rebuild` would raise the destination's fence only
// to the source's token, maybe lower than the destination's). The gateway
// sends the copy as REPLACE instead, with the source's metadata and
// content headers read by a HEAD and its own stamp, on the condition that
// the source is still the version the HEAD saw.
// contentHeaders are the headers a REPLACE copy takes from the request and
// a COPY copy from the source, besides the x-amz-meta-* metadata. Not
// x-amz-website-redirect-location: neither directive copies it, both take
// the request's.
var contentHeaders = []string{"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
	"Content-Type", "Expires"}

// copySourceConditions are the worker's conditions on a copy's source.
// The gateway evaluates them against the source it read and then sends
// its own, on that version's ETag.
var copySourceConditions = objectstore.SourceConditions{IfMatch: "X-Amz-Copy-Source-If-Match",
	IfNoneMatch: "X-Amz-Copy-Source-If-None-Match", IfModifiedSince: "X-Amz-Copy-Source-If-Modified-Since",
	IfUnmodifiedSince: "X-Amz-Copy-Source-If-Unmodified-Since"}

// sourceReadHeaders map a CopyObject's headers for reading its source to
// those of a HEAD of it: without the SSE-C key of an encrypted source, the
// request payer's acknowledgement or the source bucket's expected owner,
// S3 refuses the HEAD (400, 403) that the copy itself would pass.
var sourceReadHeaders = map[string]string{
	"X-Amz-Copy-Source-Server-Side-Encryption-Customer-Algorithm": "X-Amz-Server-Side-Encryption-Customer-Algorithm",
	"X-Amz-Copy-Source-Server-Side-Encryption-Customer-Key":       "X-Amz-Server-Side-Encryption-Customer-Key",
	"X-Amz-Copy-Source-Server-Side-Encryption-Customer-Key-Md5":   "X-Amz-Server-Side-Encryption-Customer-Key-Md5",
	"X-Amz-Request-Payer":                "X-Amz-Request-Payer",
	"X-Amz-Source-Expected-Bucket-Owner": "X-Amz-Expected-Bucket-Owner",
}

// copyDirective reads a CopyObject's metadata directive: replace false is
// COPY (the default). A value that is neither is refused: the store could
// read it either way.
func copyDirective(h http.Header) (replace bool, err *s3Error) {
	switch v := h.Values("X-Amz-Metadata-Directive"); {
	case len(v) == 0 || len(v) == 1 && strings.EqualFold(v[0], "COPY"):
		return false, nil
	case len(v) == 1 && strings.EqualFold(v[0], "REPLACE"):
		return true, nil
	}
	return false, errInvalidArgument("x-amz-metadata-directive must be COPY or REPLACE, once")
}

// readCopySource reads the source of a stamped COPY-directive CopyObject
// (x-amz-copy-source: bucket/key, a versionId) with a HEAD signed with the
// gateway's credentials, carrying the copy's headers for reading its
// source (sourceReadHeaders), and evaluates the worker's own conditions on the
// source against it, as S3 would (RFC 9110: If-Match overrides
// If-Unmodified-Since, If-None-Match If-Modified-Since).
func (u *Upstream) readCopySource(ctx context.Context, h http.Header) (*objectstore.CopySource, error) {
	bucket, key, q, ok := parseCopySource(h.Get("X-Amz-Copy-Source"))
	if !ok || len(q) > 1 || len(q) == 1 && len(q["versionId"]) != 1 {
		return nil, errInvalidArgument("x-amz-copy-source must be bucket/key, with at most a versionId, on a route that stamps copies").refusal()
	}
	query := ""
	if v := q.Get("versionId"); v != "" {
		query = "versionId=" + url.QueryEscape(v)
	}
	read := http.Header{}
	for from, to := range sourceReadHeaders {
		if v, ok := h[from]; ok {
			read[to] = v
		}
	}
	resp, err := u.head(ctx, target{bucket: bucket, key: key}, query, read)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusBadRequest {
		// S3 answers a HEAD with no body: the cause cannot be told.
		return nil, errInvalidArgument("the gateway's HEAD of the copy source, whose metadata a stamped copy carries, was refused (400): " +
			"an encrypted source needs x-amz-copy-source-server-side-encryption-customer-*; or copy with x-amz-metadata-directive: REPLACE").refusal()
	}
	if resp.StatusCode == http.StatusOK && resp.Header.Get("ETag") != "" && resp.Header.Get("X-Amz-Missing-Meta") != "" {
		return nil, errNotImplemented("the copy source has metadata S3 does not return: a stamped copy would lose it; copy with x-amz-metadata-directive: REPLACE").refusal()
	}
	return copySourceConditions.ReadSource(resp, h, "s3: HEAD of the copy source", "X-Amz-Meta-", contentHeaders, objectstore.SourceRefusals{
		NotFound:  (&s3Error{http.StatusNotFound, "NoSuchKey", "the copy source does not exist"}).refusal(),
		Forbidden: errAccessDenied("the gateway may not read the copy source").refusal(),
		Failed:    (&s3Error{http.StatusPreconditionFailed, "PreconditionFailed", "at least one of the pre-conditions you specified did not hold (x-amz-copy-source-if-*)"}).refusal()})
}
