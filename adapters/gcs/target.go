package gcs

import (
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/objectstore"
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
	// srcBucket, srcObject: an opCopy's source (read for a stamped copy).
	srcBucket, srcObject string
	// also names objects another reading of the request writes (opMove:
	// fake-gcs-server, which has no moveTo, updates the object whose name
	// is the whole rest of the path). They are fenced too.
	also [][2]string
	// path is the canonical, escaped path forwarded upstream.
	path string
	// session is the session binding of a chunk (opChunk).
	session *session
	// acl: an opObject on the object's access control list.
	acl bool
	// multipart: an opUpload with uploadType=multipart (else media), its
	// parts separated by boundary (checkBodyHeaders).
	multipart bool
	boundary  string
	// why says why an unsupported write is refused.
	why string
	// unnamed: a read parseRead names nothing for, refused with it on a
	// route that fences reads (Inspection.ReadsUnnamed).
	unnamed *fencegate.Error
}

// unsupported is a write outside the table: refused (501) in the JSON
// API's error format.
func unsupported(t target, why string) (target, *fencegate.Error) {
	t.op, t.why = opUnsupported, why
	return t, nil
}

// parseTarget classifies a request with the table of JSON API writes
// (objectTable, bucketTable, the upload paths): which operation it is and
// which objects it writes. A write is accepted only when it parses one way:
// for the store, for fake-gcs-server's router (fakeReading), and for a
// filesystem backend that stores object names as paths (checkName). What
// the table does not list is refused (opUnsupported). Object names come
// from the decoded path segments (an object name is one segment, its "/"
// sent as %2F) or, for uploads, from the name query parameter; a body that
// names objects is checked against them when it is read (Forward).
func parseTarget(r *http.Request) (target, *fencegate.Error) {
	escaped := r.URL.EscapedPath()
	segs, err := resource.CleanObjectPath(escaped)
	if err != nil {
		return target{}, fencegate.InvalidResource("refused path: %s", err)
	}
	t := target{path: resource.JoinPath(segs, len(segs) > 0 && strings.HasSuffix(escaped, "/"))}
	if fencegate.ReadMethod(r.Method) {
		return parseRead(r, t, escaped, segs), nil
	}
	if _, ok := r.Header["X-Http-Method-Override"]; ok {
		// The store would act on another method than the one checked.
		return t, fencegate.InvalidRequest("X-HTTP-Method-Override is not accepted by the gateway: send the method itself")
	}
	if ref := checkRawPath(escaped); ref != nil {
		return t, ref
	}
	upload := hasPrefix(segs, "upload", "storage", "v1", "b")
	if !upload {
		for h := range r.Header {
			if strings.HasPrefix(h, "X-Goog-Upload-") {
				// fake-gcs-server opens a resumable upload on a path it
				// does not route otherwise when it sees this header.
				return t, fencegate.InvalidRequest("%s is accepted on upload requests only", h)
			}
		}
	}
	q, ref := parseQuery(r.URL.RawQuery, upload)
	if ref != nil {
		return t, ref
	}
	switch {
	case upload:
		return parseUpload(r, t, segs[4:], q)
	case hasPrefix(segs, "storage", "v1", "b"):
		return parseJSONAPI(r.Method, t, segs[3:])
	case hasPrefix(segs, "batch"):
		return unsupported(t, "batch requests are not supported by the gateway: it would write objects it does not fence; send each request on its own")
	}
	return unsupported(t, "only the JSON API (/storage/v1, /upload/storage/v1) is writable through the gateway")
}

// readsBody reports whether the gateway reads t's body before it forwards
// it (body): its metadata, a compose's names, an object resource.
func (t *target) readsBody(method string) bool {
	switch t.op {
	case opUpload:
		return t.multipart
	case opResumable, opCompose, opCopy, opMove, opBucket:
		return true
	case opObject:
		return method != http.MethodDelete
	}
	return false
}

// checkBodyHeaders refuses a write whose body the gateway reads but the
// store may read otherwise (and sets a multipart upload's boundary): one with a Content-Encoding (fake-gcs-server
// inflates a gzip body before it reads it, the gateway reads the bytes
// sent: a gzip stream whose header comment holds the multipart body the
// gateway stamped, and whose content holds another with a forged stamp,
// was stored with the forged one) or with more than one Content-Type
// (which boundary or type a store takes is its own choice).
func checkBodyHeaders(r *http.Request, t *target) *fencegate.Error {
	if !t.readsBody(r.Method) {
		return nil
	}
	if _, ok := r.Header["Content-Encoding"]; ok {
		// Before, such bodies were refused too, as not JSON or with no
		// metadata part, but some after the fence; the Java client
		// compresses request bodies unless told not to.
		return fencegate.InvalidRequest("a Content-Encoding is refused on a request whose body names objects or carries metadata: the store would decode a body the gateway did not read; send it unencoded (Java clients: setDisableGZipContent(true))")
	}
	if len(r.Header["Content-Type"]) > 1 {
		return fencegate.InvalidRequest("the request carries more than one Content-Type: the store could read its body as another")
	}
	if t.op == opUpload {
		// Checked before the fence: a refusal known from the headers
		// does not wait for the body, nor raise a fence.
		var ref *fencegate.Error
		t.boundary, ref = multipartBoundary(r.Header.Get("Content-Type"))
		return ref
	}
	return nil
}

// checkRawPath refuses a write's path that a store or its emulator would
// read another way than its canonical form: empty segments ("a//b"), "."
// and ".." segments (the gateway would clean them, the store may not),
// and a trailing slash (fake-gcs-server takes it into the object name).
func checkRawPath(escaped string) *fencegate.Error {
	if escaped == "" || escaped[0] != '/' {
		return fencegate.InvalidResource("refused path: it must start with /")
	}
	for _, s := range strings.Split(escaped[1:], "/") {
		d, err := url.PathUnescape(s)
		switch {
		case s == "":
			return fencegate.InvalidResource("refused path: empty segment or trailing slash (the store would read another object name)")
		case err != nil:
			return fencegate.InvalidResource("refused path: invalid percent-encoding in %q", s)
		case d == "." || d == "..":
			return fencegate.InvalidResource("refused path: %q segment", d)
		}
	}
	return nil
}

// parseUpload reads /upload/storage/v1/b/BUCKET/o (rest: BUCKET, "o").
func parseUpload(r *http.Request, t target, rest []string, q resource.Query) (target, *fencegate.Error) {
	if len(rest) != 2 || rest[1] != "o" {
		return unsupported(t, "uploads go to /upload/storage/v1/b/BUCKET/o")
	}
	if ref := checkBucket(rest[0]); ref != nil {
		return t, ref
	}
	t.bucket = rest[0]
	if q.Has("upload_id") {
		// A request on an open session: a chunk or a status query (PUT,
		// or POST as the Go client sends them, forwarded as a PUT:
		// fake-gcs-server reads a POST with a JSON Content-Type as the
		// start of another session, on the object its body names), or a
		// cancel (DELETE).
		if r.Method != http.MethodPut && r.Method != http.MethodPost && r.Method != http.MethodDelete {
			return unsupported(t, "a request on an upload session is a PUT or POST (a chunk or a status query) or a DELETE (cancel)")
		}
		if q.Get("uploadType") != "resumable" {
			return t, fencegate.InvalidRequest("a request on an upload session carries uploadType=resumable (the store would run another upload type on the session's object)")
		}
		t.op = opChunk
		s, ref := parseSession(q)
		if ref != nil {
			return t, ref
		}
		t.object, t.session = s.object, s
		return t, nil
	}
	if q.Has(sessionParam) {
		return t, errUnknownSession()
	}
	if r.Method != http.MethodPost {
		return unsupported(t, "an upload is a POST (or a PUT to an open session)")
	}
	t.object = q.Get("name")
	if t.object == "" {
		return t, fencegate.InvalidRequest("uploads through the gateway name the object in the name query parameter (the gateway fences the object the store writes)")
	}
	if ref := checkName(t.object); ref != nil {
		return t, ref
	}
	switch q.Get("uploadType") {
	case "media", "multipart":
		t.op, t.multipart = opUpload, q.Get("uploadType") == "multipart"
	case "resumable":
		t.op = opResumable
	default:
		return t, fencegate.InvalidRequest("uploadType must be media, multipart or resumable")
	}
	return t, nil
}

// The words of the table's paths, after /storage/v1/b/BUCKET/o/NAME/.
const (
	wACL     = "acl"
	wCompose = "compose"
	wCopyTo  = "copyTo"
	wRewrite = "rewriteTo"
	wMoveTo  = "moveTo"
)

// parseJSONAPI reads /storage/v1/b/... (rest: the segments after "b"):
// the table of the JSON API's object and bucket writes.
func parseJSONAPI(method string, t target, rest []string) (target, *fencegate.Error) {
	if len(rest) == 0 {
		// buckets.insert names its bucket in the body: no fence key before
		// the body is read.
		return unsupported(t, "creating a bucket through the gateway is not supported")
	}
	if ref := checkBucket(rest[0]); ref != nil {
		return t, ref
	}
	t.bucket = rest[0]
	if len(rest) == 1 || rest[1] != "o" {
		return parseBucketWrite(method, t, rest[1:])
	}
	o := rest[2:]
	if len(o) == 0 {
		return unsupported(t, "not a write of the JSON API")
	}
	t.object = o[0]
	n := len(o)
	switch {
	case n == 1 && (method == http.MethodPatch || method == http.MethodPut || method == http.MethodDelete):
		t.op = opObject
	case n == 2 && o[1] == wACL && method == http.MethodPost,
		n == 3 && o[1] == wACL && (method == http.MethodPut || method == http.MethodDelete):
		// ACL insert, and update or delete of one entry. Not PATCH:
		// fake-gcs-server reads PATCH .../o/X/acl/E as a patch of the
		// object named "X/acl/E".
		t.op, t.acl = opObject, true
	case n == 2 && o[1] == wCompose && method == http.MethodPost:
		t.op = opCompose
	case n == 6 && (o[1] == wCopyTo || o[1] == wRewrite) && o[2] == "b" && o[4] == "o" && method == http.MethodPost:
		if ref := checkBucket(o[3]); ref != nil {
			return t, ref
		}
		if ref := checkName(o[5]); ref != nil {
			return t, ref
		}
		t.op, t.srcBucket, t.srcObject, t.bucket, t.object = opCopy, t.bucket, o[0], o[3], o[5]
	case n == 4 && o[1] == wMoveTo && o[2] == "o" && method == http.MethodPost:
		if ref := checkName(o[3]); ref != nil {
			return t, ref
		}
		t.op, t.bucket2, t.object2 = opMove, t.bucket, o[3]
	default:
		return unsupported(t, "this object operation is not known to the gateway")
	}
	if ref := checkName(o[0]); ref != nil {
		return t, ref
	}
	// The same path as fake-gcs-server's router reads it: the object it
	// writes must be the one fenced.
	fb, fo := fakeReading(method, rest[0], o)
	switch {
	case t.op == opMove:
		// No moveTo in fake-gcs-server: it updates the object named by
		// the rest of the path. Fenced as well (the real store moves).
		t.also = append(t.also, [2]string{fb, fo})
	case fb != t.bucket || fo != t.object:
		return t, fencegate.InvalidResource("refused path: it names object %s/%s for the store and %s/%s for another reading of it (fake-gcs-server's): rename the object or send another request", t.bucket, t.object, fb, fo)
	}
	return t, nil
}

// parseBucketWrite reads the bucket writes of the table (rest: after the
// bucket's name), each one fake-gcs-server routes as the store does (or
// not at all). A bucket write is fenced as a write of the whole bucket, a
// tree write over its objects: its settings (ACL, notifications,
// versioning, labels) change what happens to every object in it. Not in
// the table, as fake-gcs-server reads them as other writes: the IAM
// policy, lockRetentionPolicy and defaultObjectAcl (an upload, or a
// delete of an object of bucket "storage").
func parseBucketWrite(method string, t target, rest []string) (target, *fencegate.Error) {
	n := len(rest)
	switch {
	case n == 0 && (method == http.MethodPatch || method == http.MethodPut || method == http.MethodDelete),
		n == 1 && rest[0] == wACL && method == http.MethodPost,
		n == 2 && rest[0] == wACL && (method == http.MethodPut || method == http.MethodPatch || method == http.MethodDelete),
		n == 1 && rest[0] == "notificationConfigs" && method == http.MethodPost,
		n == 2 && rest[0] == "notificationConfigs" && method == http.MethodDelete:
		t.op = opBucket
		return t, nil
	}
	return unsupported(t, "this bucket operation is not known to the gateway")
}

// fakeReading is the bucket and object a write (or a GET) on
// /storage/v1/b/BUCKET/o/ followed by the segments o is for
// fake-gcs-server's router (gorilla/mux
// on the escaped path, routes in their order, object names matching ".+"
// greedily): the object whose ACL, content or metadata it changes.
func fakeReading(method, bucket string, o []string) (string, string) {
	n := len(o)
	join := func(s []string) string { return strings.Join(s, "/") }
	switch method {
	case http.MethodPost:
		if n >= 2 && o[n-1] == wACL {
			return bucket, join(o[:n-1])
		}
		for i := n - 5; i >= 1; i-- { // the longest source first
			if (o[i] == wCopyTo || o[i] == wRewrite) && o[i+1] == "b" && o[i+3] == "o" {
				return o[i+2], join(o[i+4:])
			}
		}
		if n >= 2 && o[n-1] == wCompose {
			return bucket, join(o[:n-1])
		}
	case http.MethodGet:
		// An ACL read: the list's route comes first.
		if n >= 2 && o[n-1] == wACL {
			return bucket, join(o[:n-1])
		}
		if n >= 3 && o[n-2] == wACL {
			return bucket, join(o[:n-2])
		}
	case http.MethodPut, http.MethodDelete:
		if n >= 3 && o[n-2] == wACL {
			return bucket, join(o[:n-2])
		}
	}
	return bucket, join(o)
}

// checkBucket refuses a bucket name outside the store's naming rules: one
// a filesystem backend would read as a path ("..") or the store as
// another bucket.
func checkBucket(b string) *fencegate.Error {
	ok := len(b) >= 1 && len(b) <= 222 && !strings.Contains(b, "..")
	for i := 0; ok && i < len(b); i++ {
		c := b[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			(c == '-' || c == '_' || c == '.') && i > 0 && i < len(b)-1
	}
	if !ok {
		return fencegate.InvalidResource("refused bucket name %q: not a valid bucket name", b)
	}
	return nil
}

// checkName refuses an object name that a store or its filesystem backend
// would clean into another name: empty, a leading or trailing "/", empty,
// "." or ".." components, a backslash or a control character, or invalid
// UTF-8. Names with "/" inside ("dir/job") pass.
func checkName(n string) *fencegate.Error {
	if n == "" || len(n) > 1024 || !utf8.ValidString(n) {
		return fencegate.InvalidResource("refused object name: empty, longer than 1024 bytes or not UTF-8")
	}
	if _, bad := objectstore.BadSegment(n); bad {
		return fencegate.InvalidResource("refused object name %q: a leading, trailing or double /, or a . or .. component (a filesystem backend would store another name)", n)
	}
	if _, bad := objectstore.BadByte(n); bad {
		return fencegate.InvalidResource("refused object name %q: a control character or a backslash", n)
	}
	return nil
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
