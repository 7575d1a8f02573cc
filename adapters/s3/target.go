package s3

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/gateway"
)

// target is the bucket and object a request names, and what it does.
type target struct {
	bucket string
	key    string // decoded; "" for bucket and service requests
	op     op
}

// op classifies the requests whose effect on the object's ETag the gateway
// tracks; every other request is forwarded without preconditions.
type op int

const (
	opOther op = iota
	opPutObject
	opCopyObject
	opCompleteMultipart
	opDeleteObject
	// opDeleteVersion deletes one version (DELETE ?versionId=), which
	// need not be the current one: the object may stay, or an older
	// version become current.
	opDeleteVersion
	opDeleteObjects
	// opBucket creates or deletes a bucket (PUT or DELETE on the bucket
	// with no subresource): a write of the bucket and, hierarchically, of
	// every object in it.
	opBucket
	// opBucketConfig is any other write to a bucket (a PUT, DELETE or
	// POST with a subresource: ?lifecycle, ?versioning, ?policy, ?acl,
	// ...). Such a write can change or expose every object of the bucket.
	opBucketConfig
	// opPostObject is a browser-form upload (POST on the bucket): it
	// writes an object named in the body, which the gateway does not read.
	opPostObject
)

// maxKeyBytes is S3's limit on key length.
const maxKeyBytes = 1024

// parseTarget finds bucket and key in a path-style or virtual-hosted
// request. The key is decoded from the raw path exactly once and must have
// one spelling only: the gateway refuses keys that S3-compatible stores
// disagree about or that a file-system backend would fold together
// (empty, "." and ".." segments, encoded slashes, backslashes, control
// characters, invalid UTF-8), so that one object can never be reached
// under two fence keys (docs/design.md §3, step 4).
func (u *Upstream) parseTarget(r *http.Request) (target, *s3Error) {
	var t target
	raw := strings.TrimPrefix(rawPath(r), "/")
	if b, ok := u.virtualBucket(r.Host); ok {
		t.bucket = b
	} else {
		var rest string
		t.bucket, rest, _ = strings.Cut(raw, "/")
		raw = rest
		if t.bucket != "" {
			b, err := url.PathUnescape(t.bucket)
			if err != nil || !validBucket(b) {
				return t, errInvalidRequest("invalid bucket name")
			}
			t.bucket = b
		}
	}
	if raw != "" {
		k, err := decodeKey(raw)
		if err != nil {
			return t, err
		}
		t.key = k
	}
	t.op = classify(r, t)
	return t, nil
}

func (u *Upstream) virtualBucket(host string) (string, bool) {
	if u.vhostSuffix == "" {
		return "", false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	b, ok := strings.CutSuffix(host, "."+u.vhostSuffix)
	if !ok || !validBucket(b) {
		return "", false
	}
	return b, true
}

// validBucket accepts DNS-compatible bucket names (S3's rules for buckets
// created since 2018): 3-63 lower-case letters, digits, dots and hyphens,
// starting and ending with a letter or digit.
func validBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return b[0] != '.' && b[0] != '-' && b[len(b)-1] != '.' && b[len(b)-1] != '-' && !strings.Contains(b, "..")
}

func decodeKey(raw string) (string, *s3Error) {
	if strings.Contains(raw, "%2f") || strings.Contains(raw, "%2F") {
		return "", errInvalidArgument("object key contains an encoded slash (%2F); send / unencoded")
	}
	k, err := url.PathUnescape(raw)
	if err != nil {
		return "", errInvalidArgument("object key has invalid percent-encoding")
	}
	if err := checkKey(k); err != nil {
		return "", err
	}
	return k, nil
}

// checkKey refuses a decoded key with more than one spelling (decodeKey).
func checkKey(k string) *s3Error {
	if len(k) > maxKeyBytes {
		return errKeyTooLong()
	}
	if !utf8.ValidString(k) {
		return errInvalidArgument("object key is not valid UTF-8")
	}
	if c, bad := objectstore.BadByte(k); bad {
		return errInvalidArgument(fmt.Sprintf("object key contains %q, which this gateway refuses", c))
	}
	// "dir/": a trailing slash is a common folder-marker key.
	switch s, bad := objectstore.BadSegment(strings.TrimSuffix(k, "/")); {
	case bad && s == "":
		return errInvalidArgument("object key contains an empty segment (// or a leading /)")
	case bad:
		return errInvalidArgument(`object key contains a "." or ".." segment`)
	}
	return nil
}

// parseCopySource reads x-amz-copy-source (bucket/key, URL-encoded as a
// whole, an optional leading / and ?versionId): S3 decodes the value once
// and takes the bucket up to the first /.
func parseCopySource(src string) (bucket, key string, q url.Values, ok bool) {
	p, rawQuery, _ := strings.Cut(src, "?")
	p, err := url.PathUnescape(strings.TrimPrefix(p, "/"))
	bucket, key, _ = strings.Cut(p, "/")
	q, qerr := url.ParseQuery(rawQuery)
	return bucket, key, q, err == nil && qerr == nil && validBucket(bucket) && key != ""
}

// copySourceReads names the object a request's x-amz-copy-source reads
// (CopyObject, UploadPartCopy: on any request that sends it, fail closed)
// in insp.Reads, which a route with fence_reads authorizes and fences as a
// GET of it. A source the gateway cannot name as one object of the route
// (sent twice, not bucket/key, an access point ARN, a key with another
// spelling in a path) is insp.ReadsUnnamed, refused on such a route.
func (u *Upstream) copySourceReads(h http.Header, insp *gateway.Inspection) {
	vs := h.Values("X-Amz-Copy-Source")
	if len(vs) == 0 {
		return
	}
	bucket, key, _, ok := parseCopySource(vs[0])
	if len(vs) != 1 || !ok {
		insp.ReadsUnnamed = errInvalidArgument("x-amz-copy-source must be bucket/key (with at most a versionId), once, on a route that fences reads: " +
			"a copy reads its source, which such a route authorizes and fences as a GET of it").refusal()
		return
	}
	if err := checkKey(key); err != nil {
		e := *err
		e.Message = "x-amz-copy-source: " + e.Message
		insp.ReadsUnnamed = e.refusal()
		return
	}
	insp.Reads = []map[string]string{u.vars(bucket, key)}
}

func classify(r *http.Request, t target) op {
	raw := r.URL.RawQuery
	if t.key == "" {
		if t.bucket == "" || fencegate.ReadMethod(r.Method) {
			return opOther
		}
		switch {
		case r.Method == http.MethodPost && queryHas(raw, "delete"):
			return opDeleteObjects
		case r.Method == http.MethodPost && raw == "":
			return opPostObject
		case (r.Method == http.MethodPut || r.Method == http.MethodDelete) && plainBucketQuery(raw):
			return opBucket
		}
		// Any other write names a subresource, or is a method S3 does
		// not define on a bucket: a configuration write, whatever the
		// store makes of it (fail closed).
		return opBucketConfig
	}
	has := func(names ...string) bool {
		if raw == "" {
			return false
		}
		for _, n := range names {
			if queryHas(raw, n) {
				return true
			}
		}
		return false
	}
	// Only the subresources S3 defines for a method make a request other
	// than that method's object write: a store routes any other query
	// (PUT ?torrent, DELETE ?acl) to PutObject or DeleteObject, as
	// VersityGW does, and an untracked write would leave the record naming
	// the version it replaced (TestReviewSubresourceWriteUntracked).
	switch r.Method {
	case http.MethodPut:
		switch {
		case has("acl", "tagging", "retention", "legal-hold"):
			// Object metadata, not the object's ETag.
			return opOther
		case has("uploadId", "partNumber"):
			return opOther // UploadPart, UploadPartCopy: invisible until completion
		case r.Header.Get("X-Amz-Copy-Source") != "":
			return opCopyObject
		}
		return opPutObject
	case http.MethodPost:
		if has("uploadId") {
			// Whatever else the query says (?select, ?restore): a store
			// may complete the upload (VersityGW routes ?select without
			// select-type=2 on to CompleteMultipartUpload).
			return opCompleteMultipart
		}
	case http.MethodDelete:
		switch {
		case has("tagging", "uploadId"):
			return opOther // DeleteObjectTagging, AbortMultipartUpload
		case has("versionId"):
			return opDeleteVersion
		}
		return opDeleteObject
	}
	return opOther
}

// plainBucketQuery reports whether a PUT or DELETE on a bucket with query
// raw is CreateBucket or DeleteBucket: no query, or only the operation
// names SDKs add (x-id). A store routes a bucket request by its
// subresource; any other parameter is treated as one.
func plainBucketQuery(raw string) bool {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if k, _, _ := strings.Cut(pair, "="); k != "x-id" && pair != "" {
			return false
		}
	}
	return true
}

// queryHas reports whether url.ParseQuery(raw) has name, without building
// the map (classify asks up to eleven times per request): the same pairs
// are skipped (empty, with a semicolon, with bad percent-encoding in key or
// value) and keys are compared decoded (TestQueryHas, FuzzQueryHas).
func queryHas(raw, name string) bool {
	if strings.Count(raw, "&") >= maxQueryPairs {
		// net/url's limit (and its GODEBUG): let it decide.
		q, _ := url.ParseQuery(raw)
		return q.Has(name)
	}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if strings.ContainsAny(k, "%+") {
			u, err := url.QueryUnescape(k)
			if err != nil {
				continue
			}
			k = u
		}
		if k != name {
			continue
		}
		if strings.IndexByte(v, '%') >= 0 {
			if _, err := url.QueryUnescape(v); err != nil {
				continue
			}
		}
		return true
	}
	return false
}

// maxQueryPairs is net/url's default limit on the pairs of a query it
// parses (more: none are).
const maxQueryPairs = 10000

// maxDeleteBody bounds a DeleteObjects body: S3 allows 1000 keys of up to
// 1024 bytes each, with some XML around them.
const maxDeleteBody = 2 << 20

// deleteRequest is a DeleteObjects request as Inspect read it: the body's
// bytes, its parsed document and the validated key of each <Object>.
type deleteRequest struct {
	body []byte
	doc  *deleteDoc
	keys []string
}

// readDeleteObjects reads and parses a DeleteObjects body and puts the
// bytes back on r so they are forwarded unchanged. The body is parsed
// strictly (parseDeleteDoc) so that no store can read other keys from the
// same bytes; the keys are validated like path keys.
func readDeleteObjects(r *http.Request) (*deleteRequest, *s3Error) {
	if strings.Contains(strings.ToLower(strings.Join(r.Header.Values("Content-Encoding"), ",")), "aws-chunked") {
		return nil, errNotImplemented("DeleteObjects with an aws-chunked body is not supported by the gateway")
	}
	if r.ContentLength > maxDeleteBody {
		return nil, errMalformedXML("DeleteObjects body is too large")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxDeleteBody+1))
	if err != nil {
		return nil, errInvalidRequest("reading the DeleteObjects body: " + err.Error())
	}
	if len(body) > maxDeleteBody {
		return nil, errMalformedXML("DeleteObjects body is too large")
	}
	// The gateway forwards exactly the bytes it parsed (or, with per-object
	// ETag conditions, a canonical rewrite of the same document). Replacing
	// the inbound body is the one mutation of the request the adapter
	// makes: the gateway streams r.Body on after Inspect.
	r.Body = io.NopCloser(bytes.NewReader(body))
	doc, perr := parseDeleteDoc(body)
	if perr != nil {
		return nil, perr
	}
	keys := make([]string, len(doc.objects))
	for i, o := range doc.objects {
		// The XML key is already decoded; check it like a decoded path key.
		k, err := decodeKey(strings.ReplaceAll(url.PathEscape(o.fields["Key"]), "%2F", "/"))
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return &deleteRequest{body: body, doc: doc, keys: keys}, nil
}

// upstreamPath is the path-style path of t on the upstream.
func upstreamPath(base string, t target) (path, rawPath string) {
	base = strings.TrimSuffix(base, "/")
	if t.bucket == "" {
		return base + "/", base + "/"
	}
	if t.key == "" {
		return base + "/" + t.bucket, base + "/" + t.bucket
	}
	return base + "/" + t.bucket + "/" + t.key, base + "/" + t.bucket + "/" + uriEncode(t.key, false)
}
