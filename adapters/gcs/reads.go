package gcs

import (
	"bytes"
	"io"
	"net/http"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/httprefusal"
)

// parseRead names what a read (GET, HEAD, OPTIONS, TRACE) reads, for a
// route with fence_reads, which authorizes and fences a read like a write:
// the object of GET or HEAD /storage/v1/b/BUCKET/o/NAME (its metadata, or
// its content with alt=media) and /download/storage/v1/b/BUCKET/o/NAME;
// the object of a GET of its ACL (/storage/v1/b/BUCKET/o/NAME/acl, and
// .../acl/ENTITY), which the store and fake-gcs-server both read as a read
// of NAME, when they read the same NAME in the path;
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
	o := rest[min(2, len(rest)):]
	switch {
	case len(rest) == 3 && rest[1] == "o":
		// One segment after o/: fake-gcs-server's greedy object name
		// reads the same object (its ACL routes need a /acl after it).
	case download:
		return refused("a download is /download/storage/v1/b/BUCKET/o/NAME, the object's name one segment (its / sent as %%2F)")
	case len(rest) > 3 && rest[1] == "o":
		if r.Method != http.MethodGet || len(o) > 3 || o[1] != wACL {
			return refused("a read below an object other than a GET of its ACL (.../o/NAME/acl, .../o/NAME/acl/ENTITY) is not named by the gateway")
		}
		// The object's ACL (objectAccessControls.list, .get of one
		// entity), a read of the object, as the store reads it: its name
		// one segment. fake-gcs-server's routes match the name greedily,
		// the list's first: the path must name the same object for it
		// (not NAME/acl/acl, the ACL of "NAME/acl" there). Not HEAD,
		// which it reads as a HEAD of the object "NAME/acl".
		if _, fo := fakeReading(r.Method, t.bucket, o); fo != o[0] {
			return refused("the path names the ACL of object %q for the store and of %q for another reading of it (fake-gcs-server's): read it another way", o[0], fo)
		}
	default:
		// A read of the bucket (its metadata, ACL, a listing): the
		// bucket, with no object.
		return t
	}
	if ref := checkName(o[0]); ref != nil {
		return unnamed(ref)
	}
	t.object = o[0]
	return t
}

// maxComposeSources is the store's limit on the sources of one compose.
const maxComposeSources = 32

// composeReads reads a compose's body before the fence, bounded as body
// reads it after (bodyDoc: JSON's Content-Type, at most maxMetadataDoc
// bytes), puts the bytes back on r (they are forwarded as sent, or
// stamped by body), and refuses, as body would, a document not read one
// way or naming another destination than t's (checkNames). It names the
// sources the compose reads (sourceObjects[].name, in the destination's
// bucket): on a route with fence_reads each is authorized and fenced as a
// GET of it. A source the gateway cannot name as the store reads it (no
// name, a name checkName refuses, another bucket, more sources than the
// store takes) is unnamed, refused on such a route only: elsewhere a
// compose's sources are not looked at, as before.
func composeReads(r *http.Request, t *target) (reads []map[string]string, ref *fencegate.Error, unnamed error) {
	doc, err := bodyDoc(r, nil)
	if err != nil {
		return nil, fencegate.AsError(err), nil
	}
	if doc != nil {
		r.Body = io.NopCloser(bytes.NewReader(doc))
	}
	n, err := checkedNames(doc, t.bucket, t.object, true)
	if err != nil {
		return nil, fencegate.InvalidRequest("the request body: %v", err), nil
	}
	refused := func(format string, a ...any) error {
		return fencegate.InvalidResource("on a route that fences reads, a compose's sources are reads: "+format, a...)
	}
	if len(n.sources) > maxComposeSources {
		return nil, nil, refused("%d sources, more than the store's %d", len(n.sources), maxComposeSources)
	}
	for i, s := range n.sources {
		if s.name == nil {
			return nil, nil, refused("sourceObjects[%d] names no object", i)
		}
		if ref := checkName(*s.name); ref != nil {
			return nil, nil, refused("sourceObjects[%d]: %s", i, ref.Message)
		}
		if !s.agree(t.bucket, *s.name) {
			return nil, nil, refused("sourceObjects[%d] names another bucket or object than %s/%s (a compose reads its sources in the destination's bucket)", i, t.bucket, *s.name)
		}
		reads = append(reads, vars(t.bucket, *s.name))
	}
	return reads, nil, nil
}
