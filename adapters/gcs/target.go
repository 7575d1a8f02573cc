package gcs

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/resource"
)

// op is the kind of write a request is, as the JSON API names them.
type op int

const (
	opRead        op = iota // not a write: forwarded as is
	opUpload                // uploadType=media or multipart: the object is written
	opResumable             // uploadType=resumable without upload_id: opens a session
	opChunk                 // a request on an open session (chunk, status, cancel)
	opObject                // DELETE, PATCH, PUT, ACL writes on one object
	opCompose               // compose into the destination object
	opCopy                  // copyTo, rewriteTo: the destination is written
	opMove                  // moveTo: source and destination are written
	opUnsupported           // a write the gateway cannot name the objects of
	opBucket                // a bucket-level write (no one object)
)

// target is what a request writes: its operation and the objects, the
// first being the one whose generation and stamp the gateway tracks.
type target struct {
	op      op
	bucket  string
	object  string // "" for a bucket-level write
	bucket2 string // opMove: the destination
	object2 string
	// path is the cleaned, escaped path forwarded upstream.
	path string
	// session is the session binding of a chunk (opChunk).
	session *session
	// acl: an opObject on the object's access control list.
	acl bool
	// why says why an unsupported write is refused.
	why string
}

// parseTarget reads the JSON API request: which objects it writes, named
// from the decoded path segments (an object name is one segment, its "/"
// sent as %2F) or, for uploads, from the name query parameter, which the
// store takes over the name in the upload's metadata.
func parseTarget(r *http.Request) (target, *fencegate.Error) {
	escaped := r.URL.EscapedPath()
	segs, err := resource.CleanObjectPath(escaped)
	if err != nil {
		return target{}, fencegate.InvalidResource("refused path: %s", err)
	}
	t := target{path: resource.JoinPath(segs, len(segs) > 0 && strings.HasSuffix(escaped, "/"))}
	if fencegate.ReadMethod(r.Method) {
		return t, nil
	}
	if _, ok := r.Header["X-Http-Method-Override"]; ok {
		// The store would act on another method than the one checked.
		return t, fencegate.InvalidRequest("X-HTTP-Method-Override is not accepted by the gateway: send the method itself")
	}
	q, qerr := url.ParseQuery(r.URL.RawQuery)
	if qerr != nil {
		return t, fencegate.InvalidRequest("the query string is not valid: %v", qerr)
	}
	for _, k := range []string{"name", "upload_id", "uploadType", "ifGenerationMatch", sessionParam} {
		// The gateway and the store must read one value.
		if len(q[k]) > 1 {
			return t, fencegate.InvalidRequest("the query parameter %s must be sent once", k)
		}
	}
	switch {
	case hasPrefix(segs, "upload", "storage", "v1", "b") && len(segs) == 6 && segs[5] == "o":
		t.bucket = segs[4]
		if q.Has("upload_id") {
			t.op = opChunk
			s, ref := parseSession(q)
			if ref != nil {
				return t, ref
			}
			t.object, t.session = s.object, s
			return t, nil
		}
		if r.Method != http.MethodPost {
			t.op, t.why = opUnsupported, "an upload is a POST (or a PUT to an open session)"
			return t, nil
		}
		t.object = q.Get("name")
		if t.object == "" {
			return t, fencegate.InvalidRequest("uploads through the gateway name the object in the name query parameter (the gateway fences the object the store writes)")
		}
		switch q.Get("uploadType") {
		case "media", "multipart":
			t.op = opUpload
		case "resumable":
			t.op = opResumable
		default:
			return t, fencegate.InvalidRequest("uploadType must be media, multipart or resumable")
		}
	case hasPrefix(segs, "storage", "v1", "b") && len(segs) >= 6 && segs[4] == "o":
		t.bucket, t.object = segs[3], segs[5]
		rest := segs[6:]
		switch {
		case len(rest) == 0:
			t.op = opObject
		case rest[0] == "acl" && ((len(rest) == 1 && r.Method == http.MethodPost) || len(rest) == 2):
			// ACL insert (POST .../acl) and update or delete of one entry
			// (.../acl/ENTITY): writes to the object's state.
			t.op, t.acl = opObject, true
		case len(rest) == 1 && rest[0] == "compose" && r.Method == http.MethodPost:
			t.op = opCompose
		case len(rest) == 5 && (rest[0] == "copyTo" || rest[0] == "rewriteTo") && rest[1] == "b" && rest[3] == "o" && r.Method == http.MethodPost:
			t.op, t.bucket, t.object = opCopy, rest[2], rest[4]
		case len(rest) == 3 && rest[0] == "moveTo" && rest[1] == "o" && r.Method == http.MethodPost:
			t.op, t.bucket2, t.object2 = opMove, t.bucket, rest[2]
		default:
			t.op, t.why = opUnsupported, "this object operation is not known to the gateway"
		}
	case hasPrefix(segs, "storage", "v1", "b"):
		t.op = opBucket
		if len(segs) >= 4 {
			t.bucket = segs[3]
		}
	case hasPrefix(segs, "batch"):
		t.op, t.why = opUnsupported, "batch requests are not supported by the gateway: it would write objects it does not fence; send each request on its own"
	default:
		t.op, t.why = opUnsupported, "only the JSON API (/storage/v1, /upload/storage/v1) is writable through the gateway"
	}
	return t, nil
}

func hasPrefix(segs []string, prefix ...string) bool {
	if len(segs) < len(prefix) {
		return false
	}
	for i, p := range prefix {
		if segs[i] != p {
			return false
		}
	}
	return true
}
