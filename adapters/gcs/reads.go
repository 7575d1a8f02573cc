package gcs

import (
	"net/http"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/httprefusal"
)

// parseRead names what a read (GET, HEAD, OPTIONS, TRACE) reads, for a
// route with fence_reads, which authorizes and fences a read like a write:
// the object of GET or HEAD /storage/v1/b/BUCKET/o/NAME (its metadata, or
// its content with alt=media) and /download/storage/v1/b/BUCKET/o/NAME;
// the bucket alone (no object) for any other read of /storage/v1/b/BUCKET,
// a listing included, which a "{bucket}/{object}" template has no key for
// (refused, as an S3 ListObjects or an Azure List Blobs is). A read is
// named with the writes' grammar and refusals (checkRawPath, parseQuery,
// checkBucket, checkName, one object segment, as fake-gcs-server's router
// reads it too); anything else is t.unnamed, refused on such a route only:
// elsewhere reads pass unfenced, as they always did, so a read the
// gateway cannot name is never refused there.
func parseRead(r *http.Request, t target, escaped string, segs []string) target {
	unnamed := func(ref *fencegate.Error) target {
		t.bucket, t.object, t.unnamed = "", "", ref
		return t
	}
	refused := func(format string, a ...any) target {
		return unnamed(fencegate.InvalidResource("on a route that fences reads, "+format, a...))
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return refused("only GET and HEAD are reads the gateway names an object for")
	}
	if _, ok := r.Header["X-Http-Method-Override"]; ok {
		return refused("X-HTTP-Method-Override is not accepted on reads: the store would act on another method than the one checked")
	}
	if ref := checkRawPath(escaped); ref != nil {
		return unnamed(ref)
	}
	if _, ref := parseQuery(r.URL.RawQuery, false); ref != nil {
		return unnamed(ref)
	}
	var rest []string
	download := hasPrefix(segs, "download", "storage", "v1", "b")
	switch {
	case download:
		rest = segs[4:]
	case hasPrefix(segs, "storage", "v1", "b"):
		rest = segs[3:]
	default:
		return unnamed(httprefusal.WithStatus(http.StatusNotImplemented, &fencegate.Error{Code: fencegate.CodeInvalidRequest,
			Message: "on a route that fences reads, only JSON API reads (/storage/v1/b/BUCKET/..., /download/storage/v1/b/BUCKET/o/NAME) are named: the XML API, which the gateway does not write either, is not supported"}))
	}
	if len(rest) == 0 {
		return refused("a listing of buckets names no bucket the gateway can fence")
	}
	if ref := checkBucket(rest[0]); ref != nil {
		return unnamed(ref)
	}
	t.bucket = rest[0]
	switch {
	case len(rest) == 3 && rest[1] == "o":
		if ref := checkName(rest[2]); ref != nil {
			return unnamed(ref)
		}
		// One segment after o/: fake-gcs-server's greedy object name
		// reads the same object (its ACL routes need a /acl after it).
		t.object = rest[2]
	case download:
		return refused("a download is /download/storage/v1/b/BUCKET/o/NAME, the object's name one segment (its / sent as %%2F)")
	case len(rest) > 3 && rest[1] == "o":
		return refused("a read below an object (its ACL) is not named by the gateway: read the object itself")
	}
	// Else a read of the bucket (its metadata, ACL, a listing): the
	// bucket, with no object.
	return t
}
